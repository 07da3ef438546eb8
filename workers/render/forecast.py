"""Words for what comes next: a waiting run's queue position and a training run's ETA.

One wording for the card, the terminal tree and the shell; plain text (the card escapes it).
Only what the facts prove is said: a missing number is left out, a failed read is
`unavailable: …` with its reason, and no start time is ever guessed.
"""

from __future__ import annotations

from datetime import UTC

from workers.diagnosis.eta import Eta
from workers.diagnosis.queue_position import QueuePosition


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st…"""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def queue_position_text(qp: QueuePosition, *, short: bool = False) -> str:
    """`3rd in ClusterQueue h100-shared (2nd of 4 in your LocalQueue team-a); the 1 ahead of you in
    it asks for 8 GPUs; 1 more ahead from other LocalQueues; start time unknown: …`. ``short``
    (the card's first screen): the position alone, or why there is none without the remedy."""
    if qp.unavailable:
        return f"unavailable: {qp.unavailable.split('; ')[0] if short else qp.unavailable}"
    where = f"ClusterQueue {qp.cluster_queue}" if qp.cluster_queue else "its ClusterQueue"
    parts = [f"{ordinal(qp.position_in_cluster_queue or 0)} in {where} "
             f"({ordinal(qp.position_in_local_queue or 0)} of {qp.pending_in_local_queue} "
             f"in your LocalQueue {qp.local_queue})"]
    if short:
        return parts[0]
    ahead = len(qp.ahead_in_local_queue)
    if ahead:
        asks = (f" ask{'s' if ahead == 1 else ''} for {qp.gpus_ahead} GPU{'s' if qp.gpus_ahead != 1 else ''}"
                if qp.gpus_ahead is not None else " (their requests could not be read)")
        parts.append(f"the {ahead} ahead of you in it{asks}")
    if qp.ahead_elsewhere:
        parts.append(f"{qp.ahead_elsewhere} more ahead from other LocalQueues (their requests are not "
                     "visible to you)")
    parts.append(f"start time {qp.start_time}")
    return "; ".join(parts)


DURATION_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def duration_text(seconds: float) -> str:
    """The two largest units: `45 s`, `4 min 36 s`, `3 h 5 min`, `173 d 12 h`."""
    left, parts = max(int(round(seconds)), 0), []
    for unit, size in DURATION_UNITS:
        count, left = divmod(left, size)
        if count or (unit == "s" and not parts):
            parts.append(f"{count} {unit}")
    return " ".join(parts[:2])


def _count(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def eta_text(eta: Eta) -> str:
    """`ends about 2026-11-30 14:32 UTC (in 3 h 05 min): step 2,990 of 10,000 at 0.63 steps/s over
    the last 10 min`, or `none: …` (no total, no rate, not progressing: not a failed read)."""
    if eta.unavailable or eta.expected_end is None or eta.remaining_seconds is None:
        return f"none: {eta.unavailable or 'not computed'}"
    rate = eta.steps_per_second or 0.0
    rate_text = f"{rate:.2f} steps/s" if rate >= 0.1 else f"{rate * 3600:,.0f} steps/h"
    end = eta.expected_end.astimezone(UTC)
    return (f"ends about {end:%Y-%m-%d %H:%M} UTC (in {duration_text(eta.remaining_seconds)}): "
            f"step {_count(eta.step or 0)} of {_count(eta.total or 0)} at {rate_text} over the last "
            f"{duration_text(eta.window_seconds or 0)}")


__all__ = ["duration_text", "eta_text", "ordinal", "queue_position_text"]
