"""Where a press's or an event's work runs: after Slack has its answer.

Slack waits at most 3 seconds for the HTTP answer to a button press (`block_actions`) or an
Events API delivery (`app_home_opened`) and reads nothing in it but the status. Yet the work a
press starts can wait on Slack itself — an ephemeral refusal posted to its `response_url`, the
presser's DM opened for a Home tab's *Status of <run>* (`conversations.open`), an unmapped
user's Home tab published — and on Redis. Behind `process_before_response` (bot/serve.py: the
listener's return is the answer) all of that came before the answer. So the listeners ack and
hand the rest to `AfterAck`: a pool of its own, so that neither a slow Slack nor a stalled Redis
holds any request's answer. What a press did is unchanged, only when: `wait_idle` lets a caller
that must read it (a test) wait on the pool rather than on time.

Shared fairly, and bounded. One person pressing again and again while Slack is slow (each
`conversations.open` may hold a thread for the Web client's 10 s) filled every thread and queued
everyone else's presses behind theirs, with no end to the queue. So each presser has at most
`PER_PRESSER_RUNNING` works on the pool at once — the others wait in that presser's own line and
go on as theirs finish, so another person's press finds a thread — and at most
`PER_PRESSER_WAITING` waiting; past that, or past `MAX_WAITING` for everyone, a press's work is
dropped, logged and counted (`taubot_button_presses_total{action="after-ack",outcome="dropped"}`):
its presser still has their earlier presses of the same kind on the way.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from bot.presser import Presser
from workers.plumbing.metrics import PRESSES

log = logging.getLogger(__name__)

AFTER_ACK_THREADS = 4
PER_PRESSER_RUNNING = 2  # fewer than the threads: one presser never holds them all
PER_PRESSER_WAITING = 16  # a person's presses waiting for their earlier ones; more are dropped
MAX_WAITING = 512  # everyone's presses waiting, whoever pressed

_Work = tuple[Callable[..., Any], tuple[Any, ...]]


class AfterAck:
    """A press's or an event's work, run on this pool once its listener has acked."""

    def __init__(self, threads: int = AFTER_ACK_THREADS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="after-ack")
        self._idle = threading.Condition()
        self._pending = 0
        self._running: Counter[str] = Counter()  # presser → works handed to the pool
        self._waiting: dict[str, deque[_Work]] = {}  # presser → works waiting for their earlier ones
        self._queued = 0

    def submit(self, work: Callable[..., Any], *args: Any) -> bool:
        """Run ``work(*args)`` after the answer (the listeners' work never raises: each turns its
        failures into what the presser is told); False when it was dropped (the module docstring).
        The presser is the `Presser` among ``args``, as every listener passes it."""
        who = next((a.slack_user for a in args if isinstance(a, Presser)), "")
        with self._idle:
            if self._running[who] < PER_PRESSER_RUNNING:
                self._running[who] += 1
                self._pending += 1
                start = True
            elif self._queued >= MAX_WAITING or len(self._waiting.get(who, ())) >= PER_PRESSER_WAITING:
                PRESSES.labels("after-ack", "dropped").inc()
                log.warning("a press's work by %s dropped: %d of theirs already waiting", who[:20],
                            len(self._waiting.get(who, ())))
                return False
            else:
                self._waiting.setdefault(who, deque()).append((work, args))
                self._queued += 1
                self._pending += 1
                start = False
        if start:
            self._start(who, work, args)
        return True

    def _start(self, who: str, work: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self._pool.submit(work, *args).add_done_callback(lambda done: self._done(who, done))

    def _done(self, who: str, _finished: Future[Any]) -> None:
        """One of ``who``'s works ended: their next waiting one goes on, in its place."""
        with self._idle:
            line = self._waiting.get(who)
            following = line.popleft() if line else None
            if line is not None and not line:
                del self._waiting[who]
            if following is None:
                self._running[who] -= 1
                if not self._running[who]:
                    del self._running[who]
            else:
                self._queued -= 1
            self._pending -= 1
            self._idle.notify_all()
        if following is not None:
            self._start(who, *following)

    def wait_idle(self, timeout: float) -> bool:
        """Whether everything submitted so far has run (waits at most ``timeout`` for it)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)


__all__ = ["AFTER_ACK_THREADS", "MAX_WAITING", "PER_PRESSER_RUNNING", "PER_PRESSER_WAITING", "AfterAck"]
