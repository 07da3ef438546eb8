"""The Kubernetes API emulator in its own process: `python -m bench.emulator_process DUMP LATENCY [CERT KEY]`.

Benchmarks and the monitor's process-level tests start it this way so the
emulator's JSON encoding and selector matching (a real API server's work) do
not share a CPU core and a GIL with the client being measured. With CERT and
KEY it serves https with that certificate; `--bookmarks SECONDS` sets how
often a quiet WATCH with `allowWatchBookmarks` gets a BOOKMARK. Prints the
base URL on its first line. Then each line on stdin is a command (a JSON
object; several keys may go together):

* `{"upsert": [objects]}` changes the cluster (a controller's work, mid-run);
* `{"delete": [[kind, namespace, name], …]}` deletes objects;
* `{"compact": true}` forgets the change history (etcd compaction: WATCHes from
  before it get `410 Gone`);
* `{"fail": [resource, status, times]}` answers requests for a resource with
  that status (`times` null: until `{"clear_faults": true}`);
* `{"count": true}` prints the number of requests served so far, and
  `{"requests": true}` prints them as one JSON line (method, path, query).

EOF stops it. `EmulatorProcess` is the caller's side of that.
"""

from __future__ import annotations

import argparse
import json
import ssl
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.fakes.kube_api import running_emulator


class EmulatorProcess:
    """Start the emulator process with ``objects``; change and count through its stdin."""

    def __init__(self, objects: list[dict[str, Any]], latency: float = 0.0, *,
                 bookmarks: float | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        dump = Path(self._tmp.name) / "dump.json"
        dump.write_text(json.dumps(objects))
        extra = ["--bookmarks", str(bookmarks)] if bookmarks is not None else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.emulator_process", str(dump), str(latency), *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.base_url = self.proc.stdout.readline().strip()

    def _send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def _ask(self, command: dict[str, Any]) -> str:
        self._send(command)
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def upsert(self, objects: list[dict[str, Any]]) -> None:
        self._send({"upsert": objects})

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self._send({"delete": [[kind, namespace, name]]})

    def compact(self) -> None:
        self._send({"compact": True})

    def fail(self, resource: str, status: int = 500, times: int | None = None) -> None:
        self._send({"fail": [resource, status, times]})

    def clear_faults(self) -> None:
        self._send({"clear_faults": True})

    def request_count(self) -> int:
        return int(self._ask({"count": True}))

    def requests(self) -> list[dict[str, Any]]:
        return list(json.loads(self._ask({"requests": True})))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)  # closing 1,600 open WATCHes takes a while
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._tmp.cleanup()

    def __enter__(self) -> EmulatorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dump")
    parser.add_argument("latency", type=float)
    parser.add_argument("cert", nargs="?")
    parser.add_argument("key", nargs="?")
    parser.add_argument("--bookmarks", type=float, default=None)
    args = parser.parse_args()
    context = None
    if args.key:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)
    with open(args.dump, encoding="utf-8") as fh:
        objects = json.load(fh)
    extra: dict[str, Any] = {"bookmark_interval": args.bookmarks} if args.bookmarks else {}
    with running_emulator(objects, latency=args.latency, ssl_context=context, **extra) as emu:
        print(emu.base_url, flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            for obj in command.get("upsert") or []:
                emu.upsert(obj)
            for kind, namespace, name in command.get("delete") or []:
                emu.delete(kind, namespace, name)
            if command.get("compact"):
                emu.compact()
            if command.get("fail"):
                resource, status, times = command["fail"]
                emu.fail(resource, status, times)
            if command.get("clear_faults"):
                emu.clear_faults()
            if command.get("count"):
                print(len(emu.requests), flush=True)
            if command.get("requests"):
                print(json.dumps([{"method": r.method, "path": r.path, "query": dict(r.query)}
                                  for r in list(emu.requests)]), flush=True)


if __name__ == "__main__":
    main()
