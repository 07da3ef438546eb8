"""The Kubernetes API emulator in its own process: `python -m bench.emulator_process DUMP LATENCY [CERT KEY]`.

Benchmarks start it this way so the emulator's JSON encoding and selector
matching (a real API server's work) do not share a CPU core and a GIL with the
client being measured. With CERT and KEY it serves https with that certificate.
Prints the base URL on its first line. Then each line on stdin is a command:
`{"upsert": [objects]}` changes the cluster (a controller's work, mid-benchmark),
`{"count": true}` prints the number of requests served so far; EOF stops it.
`EmulatorProcess` is the benchmark's side of that.
"""

from __future__ import annotations

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

    def __init__(self, objects: list[dict[str, Any]], latency: float = 0.0) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        dump = Path(self._tmp.name) / "dump.json"
        dump.write_text(json.dumps(objects))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.emulator_process", str(dump), str(latency)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.base_url = self.proc.stdout.readline().strip()

    def _send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def upsert(self, objects: list[dict[str, Any]]) -> None:
        self._send({"upsert": objects})

    def request_count(self) -> int:
        self._send({"count": True})
        assert self.proc.stdout is not None
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self._tmp.cleanup()

    def __enter__(self) -> EmulatorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    dump, latency = sys.argv[1], float(sys.argv[2])
    context = None
    if len(sys.argv) > 4:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(sys.argv[3], sys.argv[4])
    with open(dump, encoding="utf-8") as fh:
        objects = json.load(fh)
    with running_emulator(objects, latency=latency, ssl_context=context) as emu:
        print(emu.base_url, flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            for obj in command.get("upsert") or []:
                emu.upsert(obj)
            if command.get("count"):
                print(len(emu.requests), flush=True)


if __name__ == "__main__":
    main()
