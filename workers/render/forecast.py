"""Words for what comes next: a waiting run's queue position and a training run's ETA.

One wording for the card, the terminal tree and the shell; plain text (the card escapes it).
Only what the facts prove is said: a missing number is left out, a failed read is
`unavailable: …` with its reason, and no start time is ever guessed.
"""

from __future__ import annotations

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


__all__ = ["ordinal", "queue_position_text"]
