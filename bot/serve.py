"""Transports for the Bolt app: HTTP (production) and Socket Mode (development).

HTTP mode is Bolt's WSGI adapter behind the standard library's threading WSGI
server. Why not a framework: the bot serves Slack's
`/slack/events` (slash commands and interactivity share it, see the app
manifest) and the kubelet's `/healthz` — and a thread per request is what the
sync Bolt app expects. The listen backlog is raised from the standard
library's 5, because Slack delivers bursts (a channel's worth of `/tau` at a
stand-up) and a dropped SYN costs a 1-second retransmit out of a 3-second
ack budget.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from slack_bolt import App
from slack_bolt.adapter.wsgi import SlackRequestHandler

from workers.health_http import HEALTH_PATH, Ready, route

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
# Slack's largest payloads (a block_actions press echoing a 50-block card) are tens of kB.
MAX_BODY_BYTES = 1024 * 1024

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 128


class _QuietHandler(WSGIRequestHandler):
    """Access lines go to logging at debug level, not to stderr for every Slack request."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)


def wsgi_app(app: App, ready: Ready | None = None) -> WsgiApp:
    """Route `/healthz`, `/readyz` and `/metrics` (workers/health_http.py) here and everything
    else to Bolt (which 404s unknown paths)."""
    slack = SlackRequestHandler(app, path=EVENTS_PATH)

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        answered = route(environ, start_response, ready=ready)
        if answered is not None:
            return answered
        refused = _refuse_early(environ)
        if refused is not None:
            status, why = refused
            log.warning("refused %s %s from %s: %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"),
                        environ.get("REMOTE_ADDR"), why)
            start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
            return [why.encode() + b"\n"]
        return slack(environ, start_response)

    return application


def _refuse_early(environ: dict[str, Any]) -> tuple[str, str] | None:
    """Refuse before any byte of the body is read: too large, or a signature timestamp that is
    not a number (Bolt would answer 500 for it, and log the whole body)."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return "400 Bad Request", "invalid Content-Length"
    if length > MAX_BODY_BYTES:
        return "413 Payload Too Large", f"body of {length} bytes is over the {MAX_BODY_BYTES}-byte limit"
    stamp = environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP")
    if environ.get("REQUEST_METHOD") == "POST" and stamp is not None and not stamp.strip().isdigit():
        return "401 Unauthorized", "malformed X-Slack-Request-Timestamp"
    return None


def make_http_server(app: App, host: str = "0.0.0.0", port: int = 3000,
                     ready: Ready | None = None) -> WSGIServer:
    """A bound, not yet serving, server; ``server_port`` tells the port when 0 was asked."""
    return make_server(host, port, wsgi_app(app, ready), server_class=_ThreadingWSGIServer,
                       handler_class=_QuietHandler)


class BackgroundServer:
    """An HTTP server on a daemon thread: for tests and the benchmark, same code as `serve http`."""

    def __init__(self, app: App, host: str = "127.0.0.1", port: int = 0, ready: Ready | None = None) -> None:
        self.server = make_http_server(app, host, port, ready)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       name="taubot-http", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_http(app: App, host: str, port: int, ready: Ready | None = None) -> None:
    """Serve until interrupted."""
    server = make_http_server(app, host, port, ready)
    log.info("taubot listening on http://%s:%s%s", host, server.server_port, EVENTS_PATH)
    try:
        server.serve_forever()
    finally:
        server.server_close()


def serve_socket(app: App, app_token: str) -> None:
    """Socket Mode: Slack pushes the same payloads over a WebSocket; no public endpoint."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    SocketModeHandler(app, app_token).start()


__all__ = ["BackgroundServer", "EVENTS_PATH", "HEALTH_PATH", "make_http_server", "serve_http",
           "serve_socket", "wsgi_app"]
