"""`taubot shell`: `/tau …` lines from a terminal, answered by the same path as Slack.

Grammar → identity → job → collect → evaluate → render → surface: the line
goes to `bot.commands.TauCommands` exactly as a signed slash command would,
its job is queued by name and run by `workers.queue.InlineQueue` (the same
job functions rq runs), and cards go to `TerminalSurface`. Typing a button's
number presses it through the same listeners as Slack's buttons.

Time: with `--demo` the clock is the demo's own (it starts at the examples'
judging time) and jumps to each scheduled watch tick, so a `--watch` plays
out at once; against a real cluster the clock is the system's and the shell
waits for each tick in real time (Ctrl-C returns to the prompt).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import redis

from bot.buttons import EscalateButton, MuteButton, ValidateNodesButton
from bot.commands import NoMapping, TauCommands, queue_enqueuer
from bot.identity import IdentityResolver, load_identity_map
from bot.watch_buttons import StopWatchingButton
from workers.clock import Clock, ManualClock
from workers.contracts.ids import ESCALATE_ACTION, MUTE_ACTION, STOP_WATCHING_ACTION, VALIDATE_NODES_ACTION
from workers.queue import InlineQueue
from workers.render.mrkdwn import escape
from workers.render.text import mrkdwn_to_text
from workers.services import Services, install
from workers.settings import Settings
from workers.surfaces.slack_client import make_web_client
from workers.surfaces.terminal import TerminalSurface

RESPONSE_URL = "https://taubot.invalid/shell/response"
WATCH_FAST_FORWARD_LIMIT = 400  # ticks per input line in the demo: a 30-minute watch at 5 s is 360


def local_redis(url: str) -> redis.Redis | None:
    """The configured Redis if it answers now, else None (the shell then uses fakeredis)."""
    conn = redis.Redis.from_url(url, socket_connect_timeout=0.3, socket_timeout=1)
    try:
        conn.ping()
        return conn
    except redis.RedisError:
        return None


def in_process_redis() -> redis.Redis:
    """fakeredis with Lua (lupa): locks and the pacer's scripts work as on a real server."""
    import fakeredis

    return fakeredis.FakeRedis()


class Shell:
    """One terminal session: its Services, the `/tau` handler and the button listeners."""

    def __init__(self, settings: Settings, *, user: str, channel: str, write: Callable[[str], None],
                 conn: redis.Redis, clock: Clock, blocks_json: bool = False,
                 on_time: Callable[[datetime], None] | None = None) -> None:
        self.user = user
        self.channel = channel
        self.write = write
        self.clock = clock
        self.on_time = on_time
        self.surface = TerminalSurface(write, blocks_json=blocks_json, user=user)
        self.queue = InlineQueue(clock.now, self._job_failed)
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
        }

    def _job_failed(self, what: str, exc: BaseException) -> None:
        self.write(f"⚠️ taubot could not finish {what}: {type(exc).__name__}: {escape(str(exc), 300)}\n")

    def _respond(self, **kwargs: Any) -> None:
        self.surface.respond(RESPONSE_URL, str(kwargs.get("text") or ""))

    def line(self, text: str) -> bool:
        """Handle one input line; False when the session should end."""
        text = text.strip()
        if not text:
            return True
        if text in ("exit", "quit", "/exit", "/quit"):
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
        """Run what is due now; then, while watches are pending, move time to their ticks."""
        self.queue.run_due()
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

    def run(self, lines: Iterable[str], *, echo: bool) -> int:
        """Handle lines until they end or one says exit; ``echo`` prints each line first, so
        piped input reads as a transcript."""
        for text in lines:
            if echo and text.strip():
                self.write(f"\n› {text.strip()}\n")
            try:
                if not self.line(text):
                    break
            except KeyboardInterrupt:
                self.write("(interrupted)\n")
        return 0


__all__ = ["Shell", "in_process_redis", "local_redis"]
