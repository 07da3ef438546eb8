"""When training will finish (layer 7): pure, from the progress lines' times and the stated total.

The rate is measured over the last window of timed progress lines (steps per second between
the first and the last line of the window), the time left is the remaining steps at that rate,
and the expected end counts from the last progress line's time. No ETA is made when the log
states no total (tqdm's `N/M`, Megatron's `iteration N/M`, HF's `Total optimization steps = M`,
Lightning's `max_steps=M`), when the lines carry no times, or when the run is not progressing
(stalled, hung, crashed, finished): an ETA of a stalled run would be a guess.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from .progress import Progress

WINDOW_SECONDS = 600  # the rate is over the last ten minutes of timed progress lines
MIN_SPAN_SECONDS = 1.0
MAX_REMAINING_SECONDS = 100 * 365.25 * 86400  # beyond it an "expected end" is no date (nor a datetime)


def _usable(x: float) -> bool:
    """A step or total an ETA can compute with (a log may state `inf` or `1e308`, SPEC §11)."""
    return math.isfinite(x) and abs(x) <= 1e100


class Eta(BaseModel):
    """The training run's expected end, or why there is none (`unavailable`)."""

    step: float | None = None
    total: float | None = None
    steps_per_second: float | None = Field(default=None, description="over the window")
    window_seconds: float | None = None
    remaining_seconds: float | None = None
    expected_end: datetime | None = None
    unavailable: str | None = None


def training_eta(progress: Progress, *, progressing: bool) -> Eta:
    """The ETA from `progress`; ``progressing`` is the Runtime progress check's verdict (its
    `progress.ok` while the run runs) — anything else gets no ETA."""
    step, total = progress.last_step, progress.total
    if not progressing:
        return Eta(step=step, total=total, unavailable="the run is not progressing (see Runtime progress)")
    if total is None:
        return Eta(step=step, unavailable="the log states no total step count")
    if not _usable(total):
        return Eta(step=step, total=total, unavailable="the log states a total step count no ETA can use")
    timed = [(at, s) for at, s, _loss in progress.points if at is not None and s is not None and _usable(s)]
    if len(timed) < 2:
        return Eta(step=step, total=total, unavailable="too few timed progress lines for a rate")
    last_at, last_step = timed[-1]
    window = [(at, s) for at, s in timed if (last_at - at).total_seconds() <= WINDOW_SECONDS]
    first_at, first_step = window[0]
    span = (last_at - first_at).total_seconds()
    if span < MIN_SPAN_SECONDS or last_step <= first_step:
        return Eta(step=step, total=total,
                   unavailable="no measurable rate in the last window (the lines share one time)")
    rate = (last_step - first_step) / span
    remaining = max(total - last_step, 0.0) / rate
    if not math.isfinite(remaining) or remaining > MAX_REMAINING_SECONDS:
        return Eta(step=last_step, total=total, steps_per_second=rate, window_seconds=span,
                   unavailable="at the measured rate the run would not end within 100 years")
    return Eta(step=last_step, total=total, steps_per_second=rate, window_seconds=span,
               remaining_seconds=remaining, expected_end=last_at + timedelta(seconds=remaining))


__all__ = ["WINDOW_SECONDS", "Eta", "training_eta"]
