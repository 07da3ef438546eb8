"""The Kubernetes API emulator in its own process: `python -m bench.emulator_process DUMP LATENCY [CERT KEY]`.

Benchmarks and the monitor's process-level tests start it this way so the
emulator's JSON encoding and selector matching (a real API server's work) do
not share a CPU core and a GIL with the client being measured. With CERT and
KEY it serves https with that certificate; `--bookmarks SECONDS` sets how
often a quiet WATCH with `allowWatchBookmarks` gets a BOOKMARK.

LATENCY delays each answer inside the emulator: a request's round trip, not a
connection's. `--rtt SECONDS` instead puts a network of that round-trip time in
front of it (`DelayingProxy`): every byte crosses it in RTT/2 each way and a new
connection's first byte leaves one RTT late (the TCP handshake), so what a
client pays for connections it opens — and for TLS, whose handshake crosses it
like any byte — is counted as on a real network. Prints the base URL (the
proxy's, with `--rtt`) on its first line. Then each line on stdin is a command (a JSON
object; several keys may go together):

* `{"upsert": [objects]}` changes the cluster (a controller's work, mid-run);
* `{"delete": [[kind, namespace, name], …]}` deletes objects;
* `{"compact": true}` forgets the change history (etcd compaction: WATCHes from
  before it get `410 Gone`);
* `{"fail": [resource, status, times]}` answers requests for a resource with
  that status (`times` null: until `{"clear_faults": true}`);
* `{"count": true}` prints the number of requests served so far, and
  `{"requests": true}` prints them as one JSON line (method, path, query, the
  request's round and the client connection it came on).

EOF stops it. `EmulatorProcess` is the caller's side of that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.fakes.kube_api import running_emulator


class EmulatorProcess:
    """Start the emulator process with ``objects``; change and count through its stdin."""

    def __init__(self, objects: list[dict[str, Any]], latency: float = 0.0, *,
                 bookmarks: float | None = None, rtt: float | None = None,
                 tls: tuple[Path, Path] | None = None) -> None:
        """``tls``: the certificate and key to serve https with."""
        self._tmp = tempfile.TemporaryDirectory()
        dump = Path(self._tmp.name) / "dump.json"
        dump.write_text(json.dumps(objects))
        extra = ["--bookmarks", str(bookmarks)] if bookmarks is not None else []
        extra += ["--rtt", str(rtt)] if rtt is not None else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.emulator_process", str(dump), str(latency),
             *(str(p) for p in tls or ()), *extra],
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


class DelayingProxy:
    """A TCP pipe to ``upstream`` (host, port) that behaves like a network of round-trip time
    ``rtt``: each chunk is delivered RTT/2 after it was read, in order, both ways, and the first
    byte a client sends on a new connection leaves no earlier than one RTT after it connected
    (on a real network `connect()` returns after the SYN / SYN-ACK round trip; on loopback at
    once). Serves from a daemon thread with its own event loop."""

    def __init__(self, upstream: tuple[str, int], rtt: float) -> None:
        self.upstream, self.rtt = upstream, rtt  # served on the upstream's host, another port
        self.connections = 0  # opened by clients so far
        self._opened = threading.Condition()
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="delaying-proxy", daemon=True)
        self._thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=10)

    async def _start(self) -> int:
        self._server = await asyncio.start_server(self._serve, self.upstream[0], 0)
        return int(self._server.sockets[0].getsockname()[1])

    def wait_for_connections(self, count: int, timeout: float) -> bool:
        """Whether clients have opened ``count`` connections (waits at most ``timeout`` for them)."""
        with self._opened:
            return self._opened.wait_for(lambda: self.connections >= count, timeout)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._opened:
            self.connections += 1
            self._opened.notify_all()
        connected = time.monotonic()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        half, handshake_done = self.rtt / 2, connected + self.rtt
        with contextlib.suppress(asyncio.CancelledError):  # closing the proxy: the connection just ends
            await asyncio.gather(self._pipe(reader, up_writer, lambda at: max(at, handshake_done) + half),
                                 self._pipe(up_reader, writer, lambda at: at + half))

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, due: Any) -> None:
        """Copy ``src`` to ``dst``, each chunk (and the end) delivered at ``due(time read)``."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def read() -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    queue.put_nowait((due(time.monotonic()), data))
            queue.put_nowait((due(time.monotonic()), b""))

        async def deliver() -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while True:
                    at, data = await queue.get()
                    await asyncio.sleep(max(0.0, at - time.monotonic()))
                    if not data:
                        break
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        await asyncio.gather(read(), deliver())

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


@contextlib.contextmanager
def behind(base_url: str, rtt: float | None) -> Iterator[str]:
    """``base_url`` as a client at ``rtt`` seconds reaches it (itself when ``rtt`` is None)."""
    if rtt is None:
        yield base_url
        return
    parts = urlsplit(base_url)
    proxy = DelayingProxy((parts.hostname or "127.0.0.1", parts.port or 80), rtt)
    try:
        yield f"{parts.scheme}://{parts.hostname}:{proxy.port}"  # the name a certificate names
    finally:
        proxy.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dump")
    parser.add_argument("latency", type=float)
    parser.add_argument("cert", nargs="?")
    parser.add_argument("key", nargs="?")
    parser.add_argument("--bookmarks", type=float, default=None)
    parser.add_argument("--rtt", type=float, default=None,
                        help="seconds of round trip between the client and the emulator (a delaying proxy)")
    args = parser.parse_args()
    context = None
    if args.key:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)
    with open(args.dump, encoding="utf-8") as fh:
        objects = json.load(fh)
    extra: dict[str, Any] = {"bookmark_interval": args.bookmarks} if args.bookmarks else {}
    with running_emulator(objects, latency=args.latency, ssl_context=context, **extra) as emu, \
            behind(emu.base_url, args.rtt) as base_url:
        print(base_url, flush=True)
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
                print(json.dumps([{"method": r.method, "path": r.path, "query": dict(r.query),
                                   "round": r.round, "connection": list(r.peer or ())}
                                  for r in list(emu.requests)]), flush=True)


if __name__ == "__main__":
    main()
