"""`taubot serve http|socket` and `taubot worker`: the long-running services of SPEC §9.

Kept apart from `cli.py` so the diagnose CLI does not import Bolt, rq or the
Kubernetes client; every import here happens inside the command that needs
it. Configuration problems (bad settings, missing token, invalid identity
file) end the process with one line and exit 2, like any other bad input.
"""

from __future__ import annotations

import argparse
import logging
import re
from typing import Any

from .errors import UsageError
from .registry import subcommand

# `taubot serve http`'s server processes unless told (the Helm chart says 2 too). Why 2, not 1: a
# burst of 50 signed `/tau status` on 2 cores was acked in p50 14-17 / p99 22-29 ms by two
# processes and p50 21-27 / p99 59-70 ms by one (bench/ack_latency.py, load 1.9, issue 36), and
# two took less CPU per ack (0.52-0.64 ms against 0.70-0.86: one process's threads queue for one
# interpreter lock). On one core they share it, for ~50 MB more.
DEFAULT_SERVE_PROCESSES = 2


def ServiceConfigError(message: str) -> Exception:  # noqa: N802 - reads as the exception it builds
    """A service cannot start with this configuration: the CLI's `UsageError` (one line, exit 2)."""
    return UsageError(message)


def _settings(**overrides: Any) -> Any:
    from workers.config.settings import SettingsError, load_settings

    try:
        return load_settings(**overrides)
    except SettingsError as exc:
        raise ServiceConfigError(str(exc)) from None


def redis_given(settings: Any, command: str) -> None:
    """A service's Redis is the one it was given, never whatever answers on :6379.

    The settings' default URL suits tests and the chart's wiring, but a bot and a worker that each
    fell back to a local Redis they were not given would never see each other's jobs, silently."""
    if "redis_url" not in settings.model_fields_set:
        raise ServiceConfigError(f"{command} needs a Redis and was given none: set TAUBOT_REDIS_URL (or "
                                 "TAUBOT_REDIS_URL_FILE) to the Redis the bot and the workers share, "
                                 "e.g. redis://127.0.0.1:6379/0")


def _logging() -> None:
    from workers.outside.logsafe import install

    install(logging.INFO)


def _app(settings: Any, *, socket_mode: bool) -> Any:
    from bot.app import build_app
    from bot.identity import IdentityConfigError

    if settings.slack_bot_token is None:
        raise ServiceConfigError("TAUBOT_SLACK_BOT_TOKEN (or TAUBOT_SLACK_BOT_TOKEN_FILE) is not set")
    if not socket_mode and settings.slack_signing_secret is None:
        raise ServiceConfigError(
            "TAUBOT_SLACK_SIGNING_SECRET (or …_FILE) is not set: HTTP mode verifies every request"
        )
    from slack_bolt.error import BoltError
    from slack_sdk.errors import SlackApiError, SlackClientError

    try:
        return build_app(settings, socket_mode=socket_mode)
    except IdentityConfigError as exc:
        raise ServiceConfigError(f"TAUBOT_IDENTITY_FILE: {exc}") from None
    except (BoltError, SlackApiError) as exc:  # auth.test at start: a revoked or mistyped token
        text = " ".join(str(exc).split())
        if isinstance(exc, SlackApiError) or "auth.test result" in text:
            error = re.search(r"'error': '([^']+)'", text)
            raise ServiceConfigError("Slack refused TAUBOT_SLACK_BOT_TOKEN at start-up (auth.test: "
                                     f"{error.group(1) if error else 'invalid'})") from None
        raise ServiceConfigError(f"cannot reach Slack at {settings.slack_api_url}: {text[:200]}") from None
    except (SlackClientError, OSError) as exc:
        raise ServiceConfigError(f"cannot reach Slack at {settings.slack_api_url} to check the token: "
                                 f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None


def cmd_serve_http(args: argparse.Namespace) -> int:
    from bot.serve import serve_http

    _logging()
    settings = _settings()
    redis_given(settings, "taubot serve http")
    app = _app(settings, socket_mode=False)
    from redis import Redis

    from workers.plumbing.health_http import redis_ready

    ready = redis_ready(Redis.from_url(settings.redis_url, socket_timeout=1, socket_connect_timeout=1))
    if args.processes < 1:
        raise ServiceConfigError("--processes needs at least 1")
    try:
        return serve_http(app, args.host, args.port, ready, processes=args.processes)
    except OSError as exc:  # the port is taken, or not ours to bind
        raise ServiceConfigError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None


def cmd_serve_socket(args: argparse.Namespace) -> int:
    from bot.serve import serve_socket

    _logging()
    settings = _settings()
    redis_given(settings, "taubot serve socket")
    if settings.slack_app_token is None:
        raise ServiceConfigError("TAUBOT_SLACK_APP_TOKEN (xapp-…) is not set: Socket Mode needs it")
    from redis import Redis

    # No HTTP port of its own in Socket Mode: the probes (the chart's bot.mode: socket) and
    # /metrics are served on TAUBOT_METRICS_PORT, like the worker's.
    _serve_health(settings, Redis.from_url(settings.redis_url, socket_timeout=1, socket_connect_timeout=1))
    serve_socket(_app(settings, socket_mode=True).bolt, settings.slack_app_token.get_secret_value())
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """An rq worker with the scheduler on, because `Retry(interval=…)` needs it."""
    _logging()
    settings = _settings()
    redis_given(settings, "taubot worker")
    # Build the process's Services and import the job code once, here: rq forks a work horse
    # per job, and a child that imported the Kubernetes client, Jinja and the engine itself
    # would pay ~0.3 s per command.
    from redis.exceptions import RedisError

    import workers.jobs  # noqa: F401
    from workers.plumbing.gc_tuning import tune_gc
    from workers.rq_worker import make_worker, run_pool
    from workers.services import Services, install

    services = Services.for_slack(settings)
    try:
        services.redis.ping()
    except RedisError as exc:
        raise ServiceConfigError(f"cannot reach Redis at TAUBOT_REDIS_URL: {exc}") from None
    install(services)
    _serve_health(settings, services.redis, watches=True)
    tune_gc()
    if args.pool < 1:
        raise ServiceConfigError("--pool needs at least 1 worker")
    if args.pool > 1:
        run_pool(services.queue.rq, services.redis, args.pool, in_process=args.in_process,  # type: ignore[attr-defined]
                 burst=args.burst)
        return 0
    worker = make_worker(services.queue.rq, services.redis, in_process=args.in_process)  # type: ignore[attr-defined]
    worker.work(burst=args.burst, with_scheduler=True)
    return 0


def _serve_health(settings: Any, conn: Any, *, watches: bool = False) -> None:
    """/healthz, /readyz (Redis) and /metrics on ``TAUBOT_METRICS_HOST``:``TAUBOT_METRICS_PORT``
    (port 0: none)."""
    if not settings.metrics_port:
        return
    from workers.plumbing.health_http import redis_ready, serve_in_background

    collectors = []
    if watches:
        from workers.flows.watch import active_watches
        from workers.plumbing.metrics import ActiveWatches

        collectors.append(ActiveWatches(lambda: active_watches(conn)))
    try:
        serve_in_background(settings.metrics_port, ready=redis_ready(conn), collectors=collectors,
                            host=settings.metrics_host)
    except OSError as exc:
        raise ServiceConfigError(f"cannot listen on {settings.metrics_host}:{settings.metrics_port} for "
                                 f"/metrics: {exc.strerror or exc}") from None


@subcommand
def add_service_commands(sub: Any) -> None:
    """Add `serve` and `worker` to the `taubot` subcommand parser ``sub``."""
    serve = sub.add_parser("serve", help="run the Slack front end")
    modes = serve.add_subparsers(dest="mode", required=True, parser_class=type(serve))
    http = modes.add_parser("http", help="Bolt app over HTTP: /slack/events and /healthz")
    http.add_argument("--port", type=int, default=3000)
    http.add_argument("--host", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    http.add_argument("--processes", type=int, default=DEFAULT_SERVE_PROCESSES, metavar="N",
                      help="N server processes sharing the port (SO_REUSEPORT; default "
                      f"{DEFAULT_SERVE_PROCESSES}): an ack is CPU-bound and one process has one "
                      "interpreter lock, so a burst of commands is acked about N times sooner with N cores")
    http.set_defaults(func=cmd_serve_http)
    socket = modes.add_parser("socket", help="Bolt app over Socket Mode (development)")
    socket.set_defaults(func=cmd_serve_socket)

    worker = sub.add_parser("worker", help="run an rq worker (with scheduler) on taubot's queue")
    worker.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    worker.add_argument("--in-process", action="store_true",
                        help="run jobs in this process instead of a forked work horse per job: "
                        "several times the throughput for --watch ticks; a job that crashes the "
                        "interpreter takes the worker with it (job timeouts still apply)")
    worker.add_argument("--pool", type=int, default=1, metavar="N",
                        help="N rq workers in this pod (rq's WorkerPool): latency-bound jobs such as "
                        "--watch ticks overlap; one Redis lease still runs the scheduler")
    worker.set_defaults(func=cmd_worker)


__all__ = ["DEFAULT_SERVE_PROCESSES", "ServiceConfigError", "add_service_commands", "cmd_serve_http",
           "cmd_serve_socket", "cmd_worker", "redis_given"]
