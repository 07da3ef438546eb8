"""Words for what comes next: a waiting run's queue position and a training run's ETA.

One wording for the card, the terminal tree and the shell; plain text (the card escapes it).
Only what the facts prove is said: a missing number is left out, a failed read is
`unavailable: …` with its reason, and no start time is ever guessed.
"""

from __future__ import annotations

import math
from datetime import UTC

from workers.diagnosis.eta import Eta
from workers.diagnosis.queue_position import QueuePosition
from workers.diagnosis.start_estimate import UNKNOWN_LISTED, listed


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st…"""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _gpus(n: int) -> str:
    return f"{n} GPU{'s' if n != 1 else ''}"


def _amount(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.2f}"


def quota_text(qp: QueuePosition) -> str:
    """`8 of 64 nvidia.com/gpu free in flavour h100` (one per flavour the run may use), or
    `free quota unavailable: …`; empty when there is nothing to say."""
    if qp.free_quota:
        return ", ".join(f"{_amount(q.free)} of {_amount(q.nominal)} {q.resource} free in flavour {q.flavor}"
                         for q in qp.free_quota)
    return f"free quota unavailable: {qp.free_quota_unavailable}" if qp.free_quota_unavailable else ""


def _ahead_text(qp: QueuePosition) -> str:
    """What the ones ahead ask for: the whole ClusterQueue's when its list was read, else the
    LocalQueue's (the others then have no visible requests)."""
    if qp.pending_in_cluster_queue is not None:
        ahead = (qp.position_in_cluster_queue or 1) - 1
        if not ahead:
            return ""
        ask = "asks" if ahead == 1 else "ask"
        gpus = qp.gpus_ahead_in_cluster_queue or 0
        if not qp.unreadable_ahead:
            return f"the {ahead} ahead of you {ask} for {_gpus(gpus)}"
        if qp.unreadable_ahead == ahead:
            return f"the {ahead} ahead of you are in namespaces whose Workloads you may not read"
        return (f"the {ahead} ahead of you {ask} for at least {_gpus(gpus)} ({qp.unreadable_ahead} of "
                "them in namespaces whose Workloads you may not read)")
    ahead = len(qp.ahead_in_local_queue)
    if not ahead:
        return ""
    asks = (f" ask{'s' if ahead == 1 else ''} for {_gpus(qp.gpus_ahead)}" if qp.gpus_ahead is not None
            else " (their requests could not be read)")
    return f"the {ahead} ahead of you in it{asks}"


BASIS_LISTED = 6  # releases named under the start in *Details* and the terminal; the rest counted


def start_text(qp: QueuePosition) -> str:
    """The start in one line (SPEC §5b, the card's): the estimate and its basis — the holders missing
    one counted, not listed — and the caveat once; or that it can never fit; empty when no estimate
    was made (then `start_lines` says why the start time is unknown)."""
    if qp.never_fits:
        return f"never: {qp.never_fits}"
    if qp.start_estimate is None:
        return ""
    return qp.start_estimate.card or qp.start_time


def start_lines(qp: QueuePosition) -> tuple[str, list[str]]:
    """The start for *Details* and the terminal: its one line, then the releases it walked and what
    it could not see, each bounded (`+N more`)."""
    est = qp.start_estimate
    head = start_text(qp) or f"unknown: {qp.start_time.removeprefix('unknown: ')}"
    if est is None or qp.never_fits:
        return head, []
    unknown = [f"unknown: {u}" for u in est.unknown[:UNKNOWN_LISTED]]
    if len(est.unknown) > UNKNOWN_LISTED:
        unknown.append(f"+{len(est.unknown) - UNKNOWN_LISTED} more unknown")
    return head, [*listed(est.basis, BASIS_LISTED), *unknown]


def queue_position_text(qp: QueuePosition, *, short: bool = False) -> str:
    """`3rd of 7 in ClusterQueue h100-shared (2nd of 3 in your LocalQueue team-a); the 2 ahead of
    you ask for 24 GPUs; 8 of 64 nvidia.com/gpu free in flavour h100`: the place, not the start
    (`start_text`, a line of its own). ``short`` (the card's first screen): the facts alone; why one
    is missing and the cohort are in the long form."""
    if qp.unavailable:
        return f"unavailable: {qp.unavailable.split('; ')[0] if short else qp.unavailable}"
    where = f"ClusterQueue {qp.cluster_queue}" if qp.cluster_queue else "its ClusterQueue"
    of = f" of {qp.pending_in_cluster_queue}" if qp.pending_in_cluster_queue is not None else ""
    parts = [f"{ordinal(qp.position_in_cluster_queue or 0)}{of} in {where} "
             f"({ordinal(qp.position_in_local_queue or 0)} of {qp.pending_in_local_queue} "
             f"in your LocalQueue {qp.local_queue})"]
    if ahead := _ahead_text(qp):
        parts.append(ahead)
    if qp.pending_in_cluster_queue is None and qp.ahead_elsewhere:
        parts.append(f"{qp.ahead_elsewhere} more ahead from other LocalQueues (their requests are not "
                     "visible to you)")
    quota = quota_text(qp)
    if short:  # the position first (the card's fallback keeps it alone), then the quota
        return "; ".join([*parts, *([quota] if qp.free_quota else [])])
    if qp.cluster_queue_unavailable:
        parts.append(f"the ClusterQueue's pending list unavailable: {qp.cluster_queue_unavailable}")
    if quota:
        parts.append(quota)
    if qp.cohort and qp.free_quota:
        parts.append(f"ClusterQueue is in cohort {qp.cohort}, which may lend more")
    if qp.node_size:
        parts.append(f"node size: {qp.node_size}")
    return "; ".join(parts)


DURATION_UNITS = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))


def duration_text(seconds: float) -> str:
    """The two largest units: `45 s`, `4 min 36 s`, `3 h 5 min`, `173 d 12 h`; `unknown` for a
    time no clock can state (NaN, ±inf)."""
    if not math.isfinite(seconds):
        return "unknown"
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


__all__ = ["duration_text", "eta_text", "ordinal", "queue_position_text", "quota_text",
           "start_lines", "start_text"]
