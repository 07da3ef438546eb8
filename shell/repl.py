"""`taubot shell`: `/tau …` lines from a terminal, answered by the same path as Slack.

Grammar → identity → job → collect → evaluate → render → surface: the line
goes to `bot.commands.TauCommands` exactly as a signed slash command would,
its job is queued by name and run by `workers.plumbing.jobqueue.InlineQueue` (the same
job functions rq runs), and cards go to `TerminalSurface`. Typing a button's
number presses it through the same listeners as Slack's buttons.

Input: one entry is one line, except that a `/tau` line with an open ```
fence takes the lines up to the closing fence, and `/tau validate` with
nothing after its flags takes the lines after it (a pasted manifest) up to a
blank line, the next `/tau` line or the end of input (`entries`).

Time: with `--demo` the clock is the demo's own (it starts at the examples'
judging time) and jumps to each scheduled watch tick. Piped input plays a
`--watch` out at once, after its line, so a transcript reads the same every
time. At a terminal (`background=True`) the ticks run on a thread beside the
prompt (`Ticker`), so *Stop watching* and other commands can be typed while a
card is watched: against a real cluster each tick comes at its real time, in
the demo every ``DEMO_TICK_SECONDS``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

import redis

from bot.buttons import DetailsButton, EscalateButton, MuteButton, ValidateNodesButton
from bot.commands import NoMapping, TauCommands, queue_enqueuer
from bot.identity import IdentityResolver, load_identity_map
from bot.runs_buttons import OpenStatusButton
from bot.watch_buttons import StopWatchingButton
from workers.config.settings import Settings
from workers.contracts.ids import (
    DETAILS_ACTION,
    ESCALATE_ACTION,
    MUTE_ACTION,
    OPEN_STATUS_ACTION,
    STOP_WATCHING_ACTION,
    VALIDATE_NODES_ACTION,
)
from workers.plumbing.clock import Clock, ManualClock
from workers.plumbing.jobqueue import InlineQueue
from workers.render.mrkdwn import escape
from workers.render.text import mrkdwn_to_text
from workers.services import Services, install
from workers.surfaces.slack_client import make_web_client
from workers.surfaces.terminal import TerminalSurface

RESPONSE_URL = "https://taubot.invalid/shell/response"
WATCH_FAST_FORWARD_LIMIT = 400  # ticks per input line in the demo: a 30-minute watch at 5 s is 360
DEMO_TICK_SECONDS = 2.0  # at a terminal, the demo's watch ticks come this often (its clock jumps)
FENCE = "```"
EXIT_WORDS = ("exit", "quit", "/exit", "/quit")
CANCEL = "\x03"  # what a terminal's Ctrl-C at the prompt gives `entries`: drop the entry being typed


def _takes_manifest(line: str) -> bool:
    """`/tau validate` with only flags after it: the manifest follows on the next lines."""
    words = line.split()
    if [w.lower() for w in words[:2]] != ["/tau", "validate"] or "{" in line:
        return False
    rest = words[2:]
    while rest and rest[0].startswith("--workspace"):
        rest = rest[1:] if "=" in rest[0] else rest[2:]
    return not rest


def entries(lines: Iterable[str], continuing: Callable[[bool], None] | None = None) -> Iterator[str]:
    """Input lines joined into whole entries (see the module's docstring). ``continuing(True)``
    is called while an entry takes more lines, so a terminal can prompt with "…". A `CANCEL`
    line (Ctrl-C at the prompt) drops the entry being typed, as a shell drops its line."""
    source = iter(lines)
    held: str | None = None
    while True:
        line = held if held is not None else next(source, None)
        held = None
        if line is None:
            return
        if line == CANCEL:
            continue
        line = line.rstrip("\r\n")
        head = line.strip()
        open_fence = head.startswith("/tau") and head.count(FENCE) % 2 == 1
        if not open_fence and not _takes_manifest(head):
            yield line
            continue
        parts: list[str] | None = [line]
        if continuing:
            continuing(True)
        for more in source:
            if more == CANCEL:
                parts = None
                break
            more = more.rstrip("\r\n")
            if not open_fence and (not more.strip() or more.strip().startswith("/tau")
                                   or more.strip() in EXIT_WORDS):
                held = more if more.strip() else None
                break
            parts.append(more)
            if more.count(FENCE) % 2 == 1:
                if open_fence:
                    break
                open_fence = True
        if continuing:
            continuing(False)
        if parts is not None:
            yield "\n".join(parts)


def redacted(url: str) -> str:
    """A Redis URL to print: without its password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def named_redis(url: str) -> redis.Redis:
    """The Redis the user named, if it answers now; never another one in its place."""
    conn = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
    try:
        conn.ping()
    except redis.RedisError as exc:
        raise ConnectionError(f"no Redis answers at {redacted(url)}: {' '.join(str(exc).split())[:200]}") \
            from None
    return conn


def in_process_redis() -> redis.Redis:
    """fakeredis with Lua (lupa): locks and the pacer's scripts work as on a real server."""
    import fakeredis

    return fakeredis.FakeRedis()


class ShellQueue(InlineQueue):
    """The inline queue, remembering what each job is (`/tau status r`), so a failure names
    the command the user typed rather than a job id."""

    def __init__(self, now: Callable[[], datetime], on_error: Callable[[str, BaseException], None]) -> None:
        super().__init__(now, on_error)
        self.descriptions: dict[str, str] = {}

    def enqueue(self, job: str, *args: Any, job_id: str | None = None, description: str = "",
                **options: Any) -> str:
        job_id = super().enqueue(job, *args, job_id=job_id, description=description, **options)
        if description:
            self.descriptions[job_id] = description
        return job_id


class Shell:
    """One terminal session: its Services, the `/tau` handler and the button listeners."""

    def __init__(self, settings: Settings, *, user: str, channel: str, write: Callable[[str], None],
                 conn: redis.Redis, clock: Clock, blocks_json: bool = False,
                 on_time: Callable[[datetime], None] | None = None, demo: Any = None,
                 write_json: Callable[[str], None] | None = None) -> None:
        self.user = user
        self.demo = demo  # the demo cluster the session runs on (`--demo`), for `taubot demo` and tests
        self.channel = channel
        self.write = write
        self.clock = clock
        self.on_time = on_time
        self.lock = threading.RLock()  # one entry or one tick at a time (Ticker)
        self.ticker: Ticker | None = None
        self.surface = TerminalSurface(write, blocks_json=blocks_json, user=user, write_json=write_json)
        self.queue = ShellQueue(clock.now, self._job_failed)
        self.services = Services(settings=settings, redis=conn, surface=self.surface, queue=self.queue,
                                 clock=clock)
        install(self.services)
        identity = load_identity_map(settings.identity_file) if settings.identity_file else None
        slack = make_web_client(settings, rate_limit_retries=0)
        resolver = IdentityResolver(identity, slack, conn) if identity is not None else None
        self.resolver = resolver or NoMapping()
        self.commands = TauCommands(self.resolver, queue_enqueuer(self.queue, settings), ack_budget=3600)
        self.escalate = EscalateButton(settings, self.resolver, self.queue)
        self.stop = StopWatchingButton(self.resolver, self.queue)
        self.listeners: dict[str, Any] = {
            ESCALATE_ACTION: self.escalate, STOP_WATCHING_ACTION: self.stop,
            MUTE_ACTION: MuteButton(settings, self.resolver, self.queue),
            VALIDATE_NODES_ACTION: ValidateNodesButton(settings, self.resolver, self.queue),
            DETAILS_ACTION: DetailsButton(settings, self.resolver, self.queue),
            OPEN_STATUS_ACTION: OpenStatusButton(settings, self.resolver, self.queue, slack),  # `/tau runs`
        }

    def close(self) -> None:
        """Close what the session's jobs kept open (the clusters' connection pools on the process
        loop), so a session ends without aiohttp's "Unclosed client session" warnings."""
        if self.ticker is not None:
            self.ticker.stop()
        self.services.close()

    def _job_failed(self, what: str, exc: BaseException) -> None:
        what = self.queue.descriptions.get(what, what)
        text = " ".join(str(exc).split())
        self.write(f"⚠️ taubot could not finish {what}: {type(exc).__name__}: {escape(text, 300)}\n")

    def _respond(self, **kwargs: Any) -> None:
        self.surface.respond(RESPONSE_URL, str(kwargs.get("text") or ""))

    def line(self, text: str) -> bool:
        """Handle one entry (a line, or a command with its manifest); False when the session
        should end. Nothing raises to the terminal: an unexpected error is one line."""
        with self.lock:
            try:
                return self._line(text)
            except Exception as exc:  # noqa: BLE001 - a person at a prompt gets a line, never a traceback
                self.write(f"⚠️ taubot hit an internal error: {type(exc).__name__}: "
                           f"{escape(' '.join(str(exc).split()), 300)}\n")
                return True

    def _line(self, text: str) -> bool:
        text = text.strip()
        if not text:
            return True
        if text in EXIT_WORDS:
            return False
        if text.isdigit():
            self.press(int(text))
        elif text.startswith("/tau"):
            payload = {"text": text[len("/tau"):].strip(), "user_id": self.user, "channel_id": self.channel,
                       "response_url": RESPONSE_URL, "command": "/tau"}
            reply = self.commands.handle(payload, self._respond)
            self.write(f"(only you) {mrkdwn_to_text(reply.text)}\n")
        else:
            self.write("type `/tau help`, a button's number, or `exit`\n")
            return True
        self.settle()
        return True

    def press(self, number: int) -> None:
        button = self.surface.buttons.get(number)
        if button is None:
            self.write(f"no button [{number}] on the cards above\n")
            return
        self.write(f"▶ pressed [{number}] {button.label}\n")
        body = {
            "type": "block_actions", "user": {"id": self.user}, "channel": {"id": button.channel},
            "container": {"type": "message", "message_ts": button.ts, "channel_id": button.channel},
            "message": {"ts": button.ts}, "response_url": RESPONSE_URL,
            "actions": [{"action_id": button.action_id, "value": button.value}],
        }
        listener = self.listeners.get(button.action_id)
        if listener is None:
            self.write("that button does nothing here\n")
            return
        listener.handle(body, self._respond)

    def settle(self) -> None:
        """Run what is due now; then, while watches are pending, move time to their ticks —
        or, with a `Ticker` beside the prompt, leave those to it."""
        self.queue.run_due()
        if self.ticker is not None:
            self.ticker.wake.set()
            return
        ticks = 0
        while (due := self.queue.next_due()) is not None and ticks < WATCH_FAST_FORWARD_LIMIT:
            if isinstance(self.clock, ManualClock):
                if due > self.clock.now():
                    self.clock.set(due)
            else:
                wait = (due - self.clock.now()).total_seconds()
                if wait > 0:
                    time.sleep(wait)  # a person at a terminal waits for the next refresh, like Slack
            if self.on_time is not None:
                self.on_time(self.clock.now())
            ticks += self.queue.run_due()

    def run(self, lines: Iterable[str], *, echo: bool, continuing: Callable[[bool], None] | None = None,
            background: bool = False, pace: Callable[[datetime], float] | None = None) -> int:
        """Handle entries until they end or one says exit; ``echo`` prints each first, so piped
        input reads as a transcript. ``background``: watch ticks run beside the prompt (a
        `Ticker`, paced by ``pace``); they stop when the input ends."""
        if background:
            self.ticker = Ticker(self, pace or self._pace)
            self.ticker.start()
        try:
            for text in entries(lines, continuing):
                if echo and text.strip():
                    first, *more = text.strip().splitlines()
                    self.write("\n› " + "\n… ".join([first, *more]) + "\n")
                try:
                    if not self.line(text):
                        break
                except KeyboardInterrupt:  # Ctrl-C while it ran: its job was cancelled (ProcessLoop.run)
                    first = text.strip().splitlines()[0] if text.strip() else ""
                    self.write(f"^C — {first} was interrupted; what it had not done yet is cancelled\n")
        finally:
            if self.ticker is not None:
                self.ticker.stop()
                if self.queue.next_due() is not None:
                    self.write("(the shell ended: watches still running here stopped with it)\n")
        return 0

    def _pace(self, due: datetime) -> float:
        """Wall-clock seconds until a tick due at ``due``: its real time, or the demo's step."""
        if isinstance(self.clock, ManualClock):
            return DEMO_TICK_SECONDS
        return max(0.0, (due - self.clock.now()).total_seconds())


class Ticker(threading.Thread):
    """Runs a shell's delayed jobs (watch ticks) beside the prompt, one at a time under the
    shell's lock, so a press of *Stop watching* typed meanwhile is handled between ticks."""

    def __init__(self, shell: Shell, pace: Callable[[datetime], float]) -> None:
        super().__init__(name="taubot-shell-ticker", daemon=True)
        self.shell = shell
        self.pace = pace
        self.wake = threading.Event()  # set after each entry: a new job may be due sooner
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()
        self.wake.set()
        self.join(timeout=10)

    def _wait_for(self, due: datetime) -> bool:
        """Wait the pace's time for the tick due at ``due``; False when something sooner
        became due meanwhile (or nothing is due any more, or the shell ends)."""
        end = time.monotonic() + self.pace(due)
        while self.wake.wait(max(0.0, end - time.monotonic())):
            self.wake.clear()
            if self._stopped.is_set():
                return False
            with self.shell.lock:
                now_due = self.shell.queue.next_due()
            if now_due is None or now_due < due:
                return False
        return True

    def run(self) -> None:
        shell = self.shell
        while not self._stopped.is_set():
            with shell.lock:
                due = shell.queue.next_due()
            if due is None:
                self.wake.wait()
                self.wake.clear()
                continue
            if not self._wait_for(due):
                continue
            with shell.lock:
                if self._stopped.is_set():
                    return
                if isinstance(shell.clock, ManualClock) and due > shell.clock.now():
                    shell.clock.set(due)
                if shell.on_time is not None:
                    shell.on_time(shell.clock.now())
                try:
                    shell.queue.run_due()
                except Exception as exc:  # noqa: BLE001 - the queue reports job failures; this is the rest
                    shell.write(f"⚠️ taubot hit an internal error: {type(exc).__name__}\n")


__all__ = ["CANCEL", "Shell", "ShellQueue", "Ticker", "entries", "in_process_redis", "named_redis",
           "redacted"]
