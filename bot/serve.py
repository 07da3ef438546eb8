"""Transports for the Bolt app: HTTP (production) and Socket Mode (development).

HTTP mode is aiohttp's server in front of the sync Bolt app. Why aiohttp and
not the standard library's WSGI server it replaced: measured with 50 signed
commands released at once against `taubot serve http` in its own process, the
threaded `wsgiref` server spent most of each ack parsing HTTP in pure Python
and starting a thread per request; aiohttp parses with its C parser on one
event loop and hands each request to a fixed pool of threads, where Bolt's
sync listeners run as before (`process_before_response=True`: the listener
runs in that thread and the ack is its return value, with no polling for it).
aiohttp is already a dependency (of kubernetes_asyncio); the bot process still
never imports kubernetes_asyncio.

Paths: Slack's `/slack/events` (slash commands and interactivity share it, see
the app manifest) and `/healthz`, `/readyz`, `/metrics` (workers/health_http.py).
The listen backlog is raised from the usual 5 because Slack delivers bursts (a
channel's worth of `/tau` at a stand-up) and a dropped SYN costs a 1-second
retransmit out of a 3-second ack budget.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from slack_bolt import App, BoltResponse
from slack_bolt.request import BoltRequest

from workers.health_http import HEALTH_PATH, METRICS_PATH, READY_PATH, Ready, answer

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
# Slack's largest payloads (a block_actions press echoing a 50-block card) are tens of kB.
MAX_BODY_BYTES = 1024 * 1024
DISPATCH_THREADS = 32
BACKLOG = 128


def _refuse_early(request: web.Request) -> tuple[int, str] | None:
    """Refuse before any byte of the body is read: too large, or a signature timestamp that is
    not a number (Bolt would answer 500 for it, and log the whole body)."""
    raw = request.headers.get("Content-Length")
    try:
        length = int(raw or 0)
    except ValueError:
        return 400, "invalid Content-Length"
    if length > MAX_BODY_BYTES:
        return 413, f"body of {length} bytes is over the {MAX_BODY_BYTES}-byte limit"
    stamp = request.headers.get("X-Slack-Request-Timestamp")
    if request.method == "POST" and stamp is not None and not stamp.strip().isdigit():
        return 401, "malformed X-Slack-Request-Timestamp"
    return None


def _text(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n", content_type="text/plain", charset="utf-8")


def _to_aiohttp(response: BoltResponse) -> web.Response:
    headers = {name: values[0] for name, values in response.headers.items()
               if values and name.lower() not in ("content-length",)}
    body = response.body if isinstance(response.body, bytes) else str(response.body or "").encode()
    return web.Response(status=response.status, body=body, headers=headers)


def web_app(app: App, ready: Ready | None = None, *, threads: int = DISPATCH_THREADS) -> web.Application:
    """The aiohttp application: Bolt on `/slack/events`, health and metrics beside it."""
    executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bolt-http")

    async def events(request: web.Request) -> web.StreamResponse:
        refused = _refuse_early(request)
        if refused is not None:
            status, why = refused
            log.warning("refused %s %s from %s: %s", request.method, request.path, request.remote, why)
            return _text(status, why)
        if request.method != "POST":
            return _text(404, "not found")
        body = (await request.read()).decode("utf-8", errors="replace")
        bolt_request = BoltRequest(body=body, query=request.query_string,
                                   headers={k.lower(): request.headers.getall(k) for k in request.headers})
        response = await asyncio.get_running_loop().run_in_executor(executor, app.dispatch, bolt_request)
        return _to_aiohttp(response)

    async def health(request: web.Request) -> web.StreamResponse:
        status, content_type, body = answer(request.path, ready=ready)
        return web.Response(status=status, body=body, headers={"Content-Type": content_type})

    async def stop_executor(_app: web.Application) -> None:
        executor.shutdown(wait=False, cancel_futures=True)

    application = web.Application(client_max_size=MAX_BODY_BYTES)
    application.router.add_route("*", EVENTS_PATH, events)
    for path in (HEALTH_PATH, READY_PATH, METRICS_PATH):
        application.router.add_get(path, health)
    application.on_cleanup.append(stop_executor)
    return application


class BackgroundServer:
    """The HTTP server on a daemon thread with its own event loop: for tests and the benchmark,
    the same application as `serve http`."""

    def __init__(self, app: App, host: str = "127.0.0.1", port: int = 0, ready: Ready | None = None) -> None:
        self.application = web_app(app, ready)
        self.host, self.port = host, port
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="taubot-http", daemon=True)
        self.runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def _start(self) -> None:
        self.runner = web.AppRunner(self.application, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port, backlog=BACKLOG)
        await site.start()
        self.port = self.runner.addresses[0][1]

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


def serve_http(app: App, host: str, port: int, ready: Ready | None = None) -> None:
    """Serve until interrupted (SIGTERM/SIGINT end it cleanly). ``OSError`` when the port is taken."""
    log.info("taubot listening on http://%s:%s%s", host, port, EVENTS_PATH)
    web.run_app(web_app(app, ready), host=host, port=port, backlog=BACKLOG, access_log=None,
                print=None, handle_signals=True)


def serve_socket(app: App, app_token: str) -> None:
    """Socket Mode: Slack pushes the same payloads over a WebSocket; no public endpoint."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    SocketModeHandler(app, app_token).start()


__all__ = ["BackgroundServer", "EVENTS_PATH", "HEALTH_PATH", "MAX_BODY_BYTES", "serve_http", "serve_socket",
           "web_app"]

