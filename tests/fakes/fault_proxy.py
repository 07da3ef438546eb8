"""Fault injection at the transport, between a process under test and a server it talks to.

Why a proxy and not a fault inside the server or the client: the monitor's
process-level tests must break what a network breaks — connections reset,
a server unreachable for a while, a WATCH that closes at once, answers
`410`, `500`, or stalls with its headers sent and no byte after — while both
the monitor and the API emulator run unchanged in their own processes.

* `HttpFaultProxy` forwards HTTP (keep-alive, streamed WATCH bodies) to an
  upstream base URL and records every request it saw with its arrival time
  (`time.monotonic()`: the proxy's own log, as an API server's audit log has
  times; tests bound request *rates* with it, they never wait on time).
  `down()` resets every open connection and every new request until `up()`.
  `watch_fault(...)` / `list_fault(...)` change how WATCHes or LISTs are
  answered until cleared.
* `TcpFaultProxy` pipes raw bytes (Redis): `down()` resets every connection
  and refuses new ones until `up()`.

Both serve on 127.0.0.1 from a daemon thread with its own event loop, like the
fake Slack, so synchronous tests can drive them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

WatchFault = str | None  # None | "close" | "gone" | "error" | "stall"


@dataclass(frozen=True)
class SeenRequest:
    at: float
    method: str
    path: str
    query: dict[str, str]
    outcome: str  # "forwarded", "reset", or the injected fault

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")

    @property
    def stream(self) -> str:
        """Which informer stream asked: the collection path plus its field selector."""
        return f"{self.path}?{self.query.get('fieldSelector', '')}"

    @property
    def first_page(self) -> bool:
        """A WATCH, or the first page of a LIST (later pages belong to the same LIST)."""
        return self.is_watch or "continue" not in self.query


class _LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=15)

    def stop(self) -> None:
        async def cancel_rest() -> None:  # held handlers (a stalled WATCH) end with the loop
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            self.run(cancel_rest())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


def _reset(transport: asyncio.BaseTransport | None) -> None:
    """Close with RST (SO_LINGER 0), as a dropped route or a restarted server does."""
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class HttpFaultProxy:
    """An HTTP proxy in front of ``upstream`` (a base URL) with switchable faults."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.base_url = ""
        self._lock = threading.Condition()
        self._seen: list[SeenRequest] = []
        self._down = False
        self._watch_fault: WatchFault = None
        self._watch_status = 500
        self._list_status: int | None = None
        self._open: set[asyncio.BaseTransport] = set()
        self._watches: set[aiohttp.ClientResponse] = set()
        self._release: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._thread = _LoopThread("fault-proxy")
        self._thread.run(self._start())

    async def _start(self) -> None:
        self._release = asyncio.Event()
        self._session = aiohttp.ClientSession(auto_decompress=True, timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def close(self) -> None:
        async def stop() -> None:
            assert self._release is not None
            self._release.set()
            for transport in list(self._open):
                _reset(transport)
            if self._runner is not None:
                await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()
        self._thread.run(stop())
        self._thread.stop()

    # ------------------------------------------------------------ faults

    def down(self) -> None:
        """The API unreachable: every open connection reset, every new request too."""
        with self._lock:
            self._down = True
        self._thread.run(self._reset_open())

    async def _reset_open(self) -> None:
        for transport in list(self._open):
            _reset(transport)

    def up(self) -> None:
        with self._lock:
            self._down = False

    def watch_fault(self, fault: WatchFault, status: int = 500) -> None:
        """How WATCHes are answered: "close" (200, then the stream ends at once), "gone" (one
        `410 Gone` ERROR event, as kube-apiserver's watch cache sends), "error" (HTTP ``status``),
        "stall" (200 and headers, then silence), or None (forwarded). Stalled streams are let go
        (ended) when the fault is cleared."""
        with self._lock:
            self._watch_fault, self._watch_status = fault, status
        if fault is None:
            self._thread.loop.call_soon_threadsafe(self._unstall)
        else:  # open streams end (cleanly), as when an API server restarts: their next WATCH meets the fault
            self._thread.loop.call_soon_threadsafe(self._end_watches)

    def _end_watches(self) -> None:
        for upstream in list(self._watches):
            upstream.close()

    def _unstall(self) -> None:
        assert self._release is not None
        self._release.set()
        self._release = asyncio.Event()

    def list_fault(self, status: int | None) -> None:
        """LISTs (and GETs) answered with HTTP ``status`` until set to None."""
        with self._lock:
            self._list_status = status

    # ------------------------------------------------------------ what was seen

    def seen(self) -> list[SeenRequest]:
        with self._lock:
            return list(self._seen)

    def mark(self) -> int:
        """A position in the request log, for `seen_since`."""
        with self._lock:
            return len(self._seen)

    def seen_since(self, mark: int) -> list[SeenRequest]:
        with self._lock:
            return self._seen[mark:]

    def wait_until(self, condition: Callable[[list[SeenRequest]], bool], timeout: float = 20.0) -> None:
        """Block until ``condition(seen requests)`` holds (re-checked at each request)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not condition(self._seen):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"proxy: condition not met within {timeout}s "
                                         f"({len(self._seen)} requests seen)")
                self._lock.wait(left)

    def _record(self, request: web.Request, outcome: str) -> None:
        with self._lock:
            self._seen.append(SeenRequest(time.monotonic(), request.method, request.path,
                                          dict(request.query), outcome))
            self._lock.notify_all()

    # ------------------------------------------------------------ HTTP

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        transport = request.transport
        if transport is not None:
            self._open.add(transport)
        try:
            return await self._answer(request)
        finally:
            if transport is not None:
                self._open.discard(transport)

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            down, watch_fault, watch_status, list_status = (self._down, self._watch_fault, self._watch_status,
                                                            self._list_status)
        is_watch = request.query.get("watch") in ("true", "1")
        if down:
            self._record(request, "reset")
            _reset(request.transport)
            return web.Response(status=503)  # never sent: the connection is gone
        if is_watch and watch_fault is not None:
            self._record(request, watch_fault)
            return await self._watch_faulted(request, watch_fault, watch_status)
        if not is_watch and list_status is not None:
            self._record(request, f"status {list_status}")
            return _status(list_status)
        self._record(request, "forwarded")
        return await self._forward(request, is_watch)

    async def _watch_faulted(self, request: web.Request, fault: str, status: int) -> web.StreamResponse:
        if fault == "error":
            return _status(status)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if fault == "gone":
            gone = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410,
                    "message": "too old resource version: 1 (99)"}
            await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
        elif fault == "stall":
            assert self._release is not None
            await self._release.wait()
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    async def _forward(self, request: web.Request, is_watch: bool) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() not in ("host", "content-length", "accept-encoding", "connection")}
        body = await request.read() if request.can_read_body else None
        try:
            upstream = await self._session.request(request.method, self.upstream + request.path_qs,
                                                   headers=headers, data=body)
        except aiohttp.ClientError:
            return _status(503)
        try:
            if not is_watch or upstream.status != 200:
                data = await upstream.read()
                return web.Response(body=data, status=upstream.status,
                                    content_type=upstream.content_type or "application/json")
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            await response.prepare(request)
            self._watches.add(upstream)
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientError):
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            with contextlib.suppress(ConnectionResetError):
                await response.write_eof()
            return response
        finally:
            self._watches.discard(upstream)
            upstream.release()


def _status(code: int) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "message": "injected by the fault proxy", "reason": "InternalError" if code >= 500 else ""}
    return web.json_response(body, status=code)


class TcpFaultProxy:
    """A byte pipe to ``127.0.0.1:port`` (Redis) that can drop every connection for a while."""

    def __init__(self, port: int) -> None:
        self.upstream_port = port
        self.port = 0
        self._down = False
        self._conns: set[asyncio.BaseTransport] = set()
        self._server: asyncio.base_events.Server | None = None
        self._thread = _LoopThread("tcp-fault-proxy")
        self._thread.run(self._start())
        self.refused = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._down:
            self.refused += 1
            _reset(writer.transport)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            _reset(writer.transport)
            return
        self._conns.update((writer.transport, up_writer.transport))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._conns.difference_update((writer.transport, up_writer.transport))

    def down(self) -> None:
        """Redis unreachable: every connection reset, new ones reset at once, until `up()`."""
        self._down = True

        async def drop() -> None:
            for transport in list(self._conns):
                _reset(transport)
        self._thread.run(drop())

    def up(self) -> None:
        self._down = False

    def close(self) -> None:
        async def stop() -> None:
            for transport in list(self._conns):
                _reset(transport)
            if self._server is not None:
                self._server.close()
        self._thread.run(stop())
        self._thread.stop()


__all__ = ["HttpFaultProxy", "SeenRequest", "TcpFaultProxy"]
