"""Transports for the Bolt app: HTTP (production) and Socket Mode (development).

HTTP mode is aiohttp's server in front of the sync Bolt app. Why aiohttp and
not the standard library's WSGI server it replaced: measured with 50 signed
commands released at once against `taubot serve http` in its own process, the
threaded `wsgiref` server spent most of each ack parsing HTTP in pure Python
and starting a thread per request; aiohttp parses with its C parser on one
event loop and hands each request to a fixed pool of threads: a signed `/tau`
is acked there by `bot/slash.py` (verify, parse, enqueue, answer), anything
else is Bolt's, whose sync listeners run as before (`process_before_response=True`:
the listener runs in that thread and the ack is its return value, with no polling for it).
aiohttp is already a dependency (of kubernetes_asyncio); the bot process still
never imports kubernetes_asyncio.

Paths: Slack's `/slack/events` (slash commands and interactivity share it, see
the app manifest) and `/healthz`, `/readyz`, `/metrics` (workers/plumbing/health_http.py).
The listen backlog is raised from the usual 5 because Slack delivers bursts (a
channel's worth of `/tau` at a stand-up) and a dropped SYN costs a 1-second
retransmit out of a 3-second ack budget.

Why few dispatch threads, and processes (`--processes N`) to go wider: an ack is
CPU-bound (about 0.25 ms on its thread — rq's enqueue and its Redis round trip are
most of it, the parse and the signature the rest; the audit line is written after
the burst, `log_after_the_burst` — and 0.15 ms of aiohttp's on the loop) and one
process has one interpreter lock. With 32 threads a burst of 50
was served side by side and every ack came late (p50 49 ms, the p99 of the
burst); with 4 the acks come out roughly in arrival order (p50 30 ms); `/tau` now
has threads of its own (`SLASH_THREADS`: fewer turns at the lock, and no press
waiting on Slack ahead of it), presses and events keep the 4. Two
processes, each with its own socket on the port (SO_REUSEPORT, so the kernel
spreads connections evenly), halve the queue: p50 16 ms, p99 27 ms
(bench/ack_latency.py, 2 cores). Gunicorn's pre-fork, measured too, shares one
accepting socket, and a burst landed mostly on one worker (p50 22 ms). Few
threads are safe because the ack budget runs from the request's arrival
(`ARRIVED` in the request context): a command that queued behind stalled ones
answers "still working" at once. The event loop keeps each command's deadline
(`AckDeadline`): the listener authorizes and enqueues on its dispatch thread,
and should it still be at it — or not have reached it — when the budget is spent,
the loop answers "still working" itself — so an ack crosses threads twice, not four times.
"""

from __future__ import annotations

import asyncio
import logging
import logging.handlers
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from multidict import CIMultiDictProxy
from slack_bolt import App, BoltResponse
from slack_bolt.request import BoltRequest

from bot.app import FrontEnd
from bot.commands import ACK_BUDGET_SECONDS, ARRIVED, DEADLINE, STILL_WORKING, AckDeadline
from bot.slash import SlashAck, SlashCommands
from workers.plumbing.health_http import HEALTH_PATH, METRICS_PATH, READY_PATH, Ready, answer

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
# Slack's largest payloads (a block_actions press echoing a 50-block card) are tens of kB.
MAX_BODY_BYTES = 1024 * 1024
DISPATCH_THREADS = 4
# `/tau` acks have threads of their own: a press's listener — which may wait on Slack — never holds
# a command's ack. Two, not more: an ack is CPU-bound, so more threads only take turns at the
# interpreter lock (with 4 shared ones a burst's acks cost 0.8 ms of CPU each, with these 0.6-0.65;
# 1 and 2 measured alike), and the second keeps commands moving while one waits on Slack for an
# email-mapped user's identity. A command still waiting for a thread when its budget is spent is
# answered "still working" by the loop; the thread then hands it to `TauCommands`' own pool.
SLASH_THREADS = 2
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


def _bolt_answer(front: FrontEnd, body: str, query: str, headers: CIMultiDictProxy[str], arrived: float,
                 deadline: AckDeadline) -> web.Response:
    """Bolt's answer to one request (anything but a signed `/tau`), on a dispatch thread."""
    bolt_request = BoltRequest(body=body, query=query,
                               headers={k.lower(): headers.getall(k) for k in headers},
                               context={ARRIVED: arrived, DEADLINE: deadline})
    return _to_aiohttp(front.bolt.dispatch(bolt_request))


def _slash_answer(slash: SlashCommands, payload: dict[str, str], arrived: float,
                  deadline: AckDeadline) -> web.Response:
    """A signed `/tau`'s ack (`bot/slash.py`), on the commands' thread."""
    ack = slash.answer(payload, arrived=arrived, deadline=deadline)
    return web.Response(status=ack.status, body=ack.body, headers={"Content-Type": ack.content_type})


def web_app(front: FrontEnd, ready: Ready | None = None, *,
            threads: int = DISPATCH_THREADS) -> web.Application:
    """The aiohttp application: Slack's requests on `/slack/events`, health and metrics beside it."""
    executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bolt-http")
    slash_executor = ThreadPoolExecutor(max_workers=SLASH_THREADS, thread_name_prefix="tau-ack")

    async def events(request: web.Request) -> web.StreamResponse:
        refused = _refuse_early(request)
        if refused is not None:
            status, why = refused
            log.warning("refused %s %s from %s: %s", request.method, request.path, request.remote, why)
            return _text(status, why)
        if request.method != "POST":
            return _text(404, "not found")
        arrived = time.monotonic()
        body = (await request.read()).decode("utf-8", errors="replace")
        deadline = AckDeadline(arrived + ACK_BUDGET_SECONDS)
        loop = asyncio.get_running_loop()
        command = front.slash.accepts(body, request.headers) if front.slash is not None else None
        if isinstance(command, SlashAck):  # not signed by Slack: refused unparsed (bot/slash.py)
            return web.Response(status=command.status, body=command.body,
                                headers={"Content-Type": command.content_type})
        if command is not None:
            dispatched = loop.run_in_executor(slash_executor, _slash_answer, front.slash, command, arrived,
                                              deadline)
        else:
            dispatched = loop.run_in_executor(executor, _bolt_answer, front, body, request.query_string,
                                              request.headers, arrived, deadline)
        try:
            left = max(0.0, deadline.at - time.monotonic())
            return await asyncio.wait_for(asyncio.shield(dispatched), left)
        except TimeoutError:
            # A command still authorizing or enqueueing, or one its thread has not reached (the thread
            # then answers "still working" at once, unheard, and its outcome goes to response_url):
            # Slack hears now. Anything else is Bolt's listener's to answer, whenever it does.
            if deadline.expire() or command is not None:
                return web.json_response(STILL_WORKING.ack_kwargs())
            return await dispatched

    async def health(request: web.Request) -> web.StreamResponse:
        status, content_type, body = answer(request.path, ready=ready)
        return web.Response(status=status, body=body, headers={"Content-Type": content_type})

    async def stop_executor(_app: web.Application) -> None:
        executor.shutdown(wait=False, cancel_futures=True)
        slash_executor.shutdown(wait=False, cancel_futures=True)

    application = web.Application(client_max_size=MAX_BODY_BYTES)
    application.router.add_route("*", EVENTS_PATH, events)
    for path in (HEALTH_PATH, READY_PATH, METRICS_PATH):
        application.router.add_get(path, health)
    application.on_cleanup.append(stop_executor)
    return application


class BackgroundServer:
    """The HTTP server on a daemon thread with its own event loop: for tests and the benchmark,
    the same application as `serve http`."""

    def __init__(self, front: FrontEnd, host: str = "127.0.0.1", port: int = 0,
                 ready: Ready | None = None, *, threads: int = DISPATCH_THREADS) -> None:
        self.application = web_app(front, ready, threads=threads)
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


def serve_http(front: FrontEnd, host: str, port: int, ready: Ready | None = None, *,
               processes: int = 1) -> int:
    """Serve until SIGTERM/SIGINT; the exit code. ``OSError`` when the port is taken.

    With ``processes`` > 1 this process forks that many servers, each with its own socket on
    the port (SO_REUSEPORT), and waits for them: a signal is passed on to every one, and one
    that dies takes the rest down with a non-zero exit, so Kubernetes restarts the pod rather
    than it serving at part strength unnoticed."""
    if processes <= 1:
        _run(front, host, port, ready, reuse_port=False)
        return 0
    _probe_bind(host, port)
    return prefork(lambda: _run(front, host, port, ready, reuse_port=True), processes)


def _run(front: FrontEnd, host: str, port: int, ready: Ready | None, *, reuse_port: bool) -> None:
    def listening(_banner: str) -> None:  # aiohttp calls this once the socket is bound
        log.info("taubot listening on http://%s:%s%s (pid %s)", host, port, EVENTS_PATH, os.getpid())

    stop_logging = log_after_the_burst()  # in this process: after a fork, its thread is its own
    try:
        web.run_app(web_app(front, ready), host=host, port=port, backlog=BACKLOG, access_log=None,
                    print=listening, handle_signals=True, reuse_port=reuse_port or None)
    finally:
        stop_logging()


# How long the log's writer lets a burst of acks go first (each command's audit line is written then).
LOG_DELAY_SECONDS = 0.05


class _SameRecord(logging.handlers.QueueHandler):
    """Queues each record as it is: the queue is this process's own, so nothing needs pickling,
    and the handlers behind it redact and format the record exactly as they would have."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


class _AfterTheBurst(logging.handlers.QueueListener):
    """Writes the queued records; the first one after a quiet spell waits `LOG_DELAY_SECONDS`."""

    _quiet = True

    def dequeue(self, block: bool) -> logging.LogRecord:
        record: logging.LogRecord = self.queue.get(block)
        if self._quiet:
            time.sleep(LOG_DELAY_SECONDS)
        self._quiet = self.queue.empty()
        return record


def log_after_the_burst() -> Callable[[], None]:
    """Put the root logger's handlers behind a queue written by a thread of its own; the function
    that writes what is left and puts them back.

    Why: every `/tau` ack logs its audit line, and redacting, formatting and writing it was a
    sixth of what the ack did on its thread (bench/ack_latency.py under py-spy) — paid again, in a
    burst, by each command queued behind it. Queued, it costs the ack a record; the writer waits
    `LOG_DELAY_SECONDS` after a quiet spell, so a burst's lines are written after its acks. A line
    is never lost on a clean exit (SIGTERM: aiohttp returns, this writes the rest)."""
    root = logging.getLogger()
    handlers = list(root.handlers)
    if not handlers:
        return lambda: None
    lines: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    writer = _AfterTheBurst(lines, *handlers, respect_handler_level=True)
    root.handlers = [_SameRecord(lines)]
    writer.start()

    def stop() -> None:
        root.handlers = handlers
        writer.stop()

    return stop


def _probe_bind(host: str, port: int) -> None:
    """Fail here, in one process with one message, when the port cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        probe.bind((host, port))


def prefork(serve: Callable[[], None], processes: int) -> int:
    """Run ``serve`` in ``processes`` forked children until they end; the first bad exit code.

    Fork happens before any thread exists (checked): the Bolt app, its Redis pool and its
    executors are built but idle, and redis-py opens new connections in a child by itself."""
    if threading.active_count() > 1:
        raise RuntimeError(f"cannot fork {processes} servers: {threading.active_count()} threads already "
                           "run in this process")
    children: set[int] = set()
    stopping = False

    def stop(signum: int = signal.SIGTERM, _frame: object = None) -> None:
        nonlocal stopping
        stopping = True
        for child in list(children):
            try:
                os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                pass

    # Before the first fork, so that no signal finds the parent without its handler.
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:  # the child: serve, and never return into the parent's code
            for sig, handler in previous.items():
                signal.signal(sig, handler)  # aiohttp installs its own once it runs
            code = 0
            try:
                serve()
            except BaseException:  # noqa: BLE001 - a child must end here whatever happened
                log.exception("front-end process %s failed", os.getpid())
                code = 1
            finally:
                logging.shutdown()
                os._exit(code)
        children.add(pid)
    exit_code = 0
    try:
        while children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            children.discard(pid)
            _forget_metrics(pid)
            code = os.waitstatus_to_exitcode(status)
            if not stopping:
                log.error("front-end process %s exited (%s): stopping the other %d", pid,
                          f"signal {-code}" if code < 0 else f"code {code}", len(children))
                exit_code = code if code > 0 else 1
                stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return exit_code


def _forget_metrics(pid: int) -> None:
    """prometheus_client's multiprocess mode keeps a dead process's live gauges until told."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


def _refuse(message: str) -> None:
    """A Socket Mode start that cannot go on: one line on stderr, exit 2 (as the CLI's usage errors)."""
    print(f"taubot: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def serve_socket(app: App, app_token: str) -> None:
    """Socket Mode: Slack pushes the same payloads over a WebSocket; no public endpoint.

    The first WebSocket URL is asked for here (``apps.connections.open`` with the app-level
    token), so a token Slack refuses is one line and exit 2, not slack_sdk's traceback; the
    handler then connects to that URL and asks for new ones itself on a reconnect."""
    from slack_bolt.adapter.socket_mode import SocketModeHandler
    from slack_sdk.errors import SlackApiError, SlackClientError

    if not app_token.startswith("xapp-"):
        _refuse("TAUBOT_SLACK_APP_TOKEN is not an app-level token (xapp-…): Socket Mode needs one "
                "with the connections:write scope")
    handler = SocketModeHandler(app, app_token)
    try:
        url = app.client.apps_connections_open(app_token=app_token)["url"]
    except SlackApiError as exc:
        error = exc.response.get("error") if exc.response is not None else None
        _refuse(f"Slack refused TAUBOT_SLACK_APP_TOKEN (apps.connections.open: {error or 'invalid'})")
    except (SlackClientError, OSError) as exc:
        _refuse(f"cannot reach Slack to open a Socket Mode connection: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:200]}")
    if not isinstance(url, str) or not url.startswith(("wss://", "ws://")):
        _refuse("Slack's apps.connections.open answered no WebSocket URL")
    handler.client.wss_uri = url  # type: ignore[attr-defined]
    try:
        handler.start()
    except (SlackApiError, SlackClientError, OSError) as exc:
        _refuse(f"the Socket Mode connection to Slack failed: {type(exc).__name__}: "
                f"{' '.join(str(exc).split())[:200]}")


__all__ = ["BackgroundServer", "EVENTS_PATH", "HEALTH_PATH", "MAX_BODY_BYTES", "log_after_the_burst",
           "prefork", "serve_http", "serve_socket", "web_app"]

