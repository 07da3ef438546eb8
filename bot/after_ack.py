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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

AFTER_ACK_THREADS = 4


class AfterAck:
    """A press's or an event's work, run on this pool once its listener has acked."""

    def __init__(self, threads: int = AFTER_ACK_THREADS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="after-ack")
        self._idle = threading.Condition()
        self._pending = 0

    def submit(self, work: Callable[..., Any], *args: Any) -> None:
        """Run ``work(*args)`` after the answer (the listeners' work never raises: each turns its
        failures into what the presser is told)."""
        with self._idle:
            self._pending += 1
        self._pool.submit(work, *args).add_done_callback(self._done)

    def _done(self, _finished: Future[Any]) -> None:
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Whether everything submitted so far has run (waits at most ``timeout`` for it)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)


__all__ = ["AFTER_ACK_THREADS", "AfterAck"]
