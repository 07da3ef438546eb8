"""The only source of `now` for flows and the engine.

Production uses `SystemClock`; tests and the demo pass a `ManualClock`, so a
watch tick "12 minutes later" is a line of test code rather than a sleep, and
every time-based judgement is reproducible.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    """The real time, UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to (thread-safe: tests run servers in threads)."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("a clock's time must be timezone-aware")
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, moment: datetime) -> None:
        with self._lock:
            self._now = moment


__all__ = ["Clock", "ManualClock", "SystemClock"]
