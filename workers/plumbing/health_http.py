"""`/healthz`, `/readyz` and `/metrics`: what the kubelet and Prometheus ask every taubot process.

* `/healthz` — liveness: the process answers HTTP. Nothing else, so a Redis
  outage does not get every pod restarted (they would not be any better).
* `/readyz` — readiness: the dependency the process cannot work without
  answers (Redis for all three; Slack's `auth.test` already passed at start,
  or the process would have exited with one line saying why).
* `/metrics` — prometheus_client's text exposition; in the worker it merges
  the work horses' samples (`workers.plumbing.metrics.scrape`).

The bot mounts these routes beside `/slack/events` on its own port
(`bot/serve.py`); the worker and the monitor serve them on a small
threaded WSGI server of their own (`serve_in_background`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from workers.plumbing.metrics import scrape

log = logging.getLogger(__name__)

HEALTH_PATH, READY_PATH, METRICS_PATH = "/healthz", "/readyz", "/metrics"
Ready = Callable[[], str | None]  # None when ready, else why not (one line)
StartResponse = Callable[..., Any]


def redis_ready(conn: Any) -> Ready:
    """Readiness that pings ``conn`` (a redis.Redis)."""
    def check() -> str | None:
        try:
            conn.ping()
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready", said in one line
            return f"redis unreachable: {type(exc).__name__}"
        return None
    return check


def answer(path: str, *, ready: Ready | None = None,
           collectors: list[Any] | None = None) -> tuple[int, str, bytes]:
    """(status, content type, body) for one of the three paths — any server can send it."""
    if path == METRICS_PATH:
        body, content_type = scrape(collectors)
        return 200, content_type, body
    why = ready() if (ready is not None and path == READY_PATH) else None
    text = "text/plain; charset=utf-8"
    return (200, text, b"ok\n") if why is None else (503, text, why.encode() + b"\n")


def route(environ: dict[str, Any], start_response: StartResponse, *, ready: Ready | None = None,
          collectors: list[Any] | None = None) -> Iterable[bytes] | None:
    """Answer one of the three paths (WSGI), or None when the path is not one of them."""
    path, method = environ.get("PATH_INFO"), environ.get("REQUEST_METHOD")
    if method not in ("GET", "HEAD") or path not in (HEALTH_PATH, READY_PATH, METRICS_PATH):
        return None
    status, content_type, body = answer(str(path), ready=ready, collectors=collectors)
    start_response({200: "200 OK", 503: "503 Service Unavailable"}[status], [("Content-Type", content_type)])
    return [body]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s %s", self.address_string(), format % args)


def serve_in_background(port: int, *, ready: Ready | None = None, collectors: list[Any] | None = None,
                        host: str = "127.0.0.1") -> WSGIServer:
    """Serve the three paths on a daemon thread; returns the server (``server_port`` when 0).

    Loopback unless told (`TAUBOT_METRICS_HOST`): the metrics name runs, namespaces and channels,
    so they are not offered to whatever can reach the pod's IP unless the operator says so."""
    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        answered = route(environ, start_response, ready=ready, collectors=collectors)
        if answered is not None:
            return answered
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found\n"]

    server = make_server(host, port, app, server_class=_Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="taubot-health", daemon=True).start()
    log.info("health and metrics on http://%s:%s%s", host, server.server_port, METRICS_PATH)
    return server


__all__ = ["HEALTH_PATH", "METRICS_PATH", "READY_PATH", "answer", "redis_ready", "route",
           "serve_in_background"]
