"""When a watch's next tick runs: its slot on the watch's own cadence, written with its state.

A tick is a timed job in the workers' due set (`workers/plumbing/timed_jobs.py`), claimed by a
worker's `TickMover` when due, to the millisecond. The state and the next tick are written in
one transaction (`advance`), or, for a tick that took no lock, in one script call that lands
only if the state is as it was read (`advance_unlocked`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from workers.plumbing.conditional_write import Recorder, commit_if_unchanged
from workers.plumbing.jobqueue import tick_retry
from workers.services import Services

from .state import WatchState, lock_name, save_state, state_key, tick_job_id

if TYPE_CHECKING:
    from redis.client import Pipeline

TICK_JOB = "workers.jobs.watch_tick"
TICK_FAILURE = "workers.jobs.on_tick_failure"
# A paced card takes a slot of its own up to this long before its next tick would be due (the next
# tick recomputes the card anyway, so a later slot is of no use to this one); a run's last card
# (it finished) may wait this long for one.
RESERVE_MARGIN_SECONDS = 1.0
FINAL_RESERVE_SECONDS = 60.0


def schedule_tick(services: Services, state: WatchState, now: datetime, *,
                  pipeline: Pipeline | Recorder | None = None) -> str:
    """The next tick, due at ``state.next_due``: a timed job in the workers' due set, which a
    worker's `TickMover` claims then, to the millisecond (`workers/plumbing/timed_jobs.py`)."""
    due = state.next_due or now + timedelta(seconds=state.interval)
    delay = max(0.0, (due - now).total_seconds())
    return services.queue.enqueue_in(
        delay, TICK_JOB, state.id, state.tick, job_id=tick_job_id(state.id, state.tick),
        timeout=services.settings.job_timeout_seconds, retry=tick_retry(state.interval),
        on_failure=TICK_FAILURE, exact=due,
        description=f"watch {state.request.command.run} in {state.request.channel} #{state.tick}",
        pipeline=pipeline)


def retry_tick(services: Services, state: WatchState, delay: float, now: datetime) -> None:
    """Run the same tick again in ``delay`` seconds (its card update was paced), with the state
    saved in the same transaction, as `advance` does for the next one."""
    with services.redis.pipeline(transaction=True) as pipe:
        save_state(pipe, state, now)
        services.queue.enqueue_in(
            delay, TICK_JOB, state.id, state.tick,
            job_id=f"{tick_job_id(state.id, state.tick)}-d{state.deferrals}",
            timeout=services.settings.job_timeout_seconds, retry=tick_retry(state.interval),
            on_failure=TICK_FAILURE, exact=now + timedelta(seconds=delay),
            description=f"watch {state.request.command.run} in {state.request.channel} #{state.tick} (paced)",
            pipeline=pipe)
        pipe.execute()


def advance(services: Services, state: WatchState, now: datetime) -> None:
    """Save the state and schedule its next tick in one Redis transaction.

    Two separate writes would let a worker killed between them leave a state
    whose next tick was never scheduled (the watch silently stops), or a tick
    that finds the state one number behind and skips itself as stale.
    """
    # Anchored to the watch's own cadence: a tick that took 0.4 s does not push every later one
    # back by 0.4 s; one that ran late is followed at once, never twice in one slot.
    _next_slot(state, now)
    with services.redis.pipeline(transaction=True) as pipe:
        save_state(pipe, state, now)
        schedule_tick(services, state, now, pipeline=pipe)
        pipe.execute()


def _next_slot(state: WatchState, now: datetime) -> None:
    previous = state.next_due or state.started_at
    state.next_due = max(previous + timedelta(seconds=state.interval), now)


def advance_unlocked(services: Services, state: WatchState, read: bytes, now: datetime) -> bool:
    """`advance` for a tick that read ``read`` without the watch's lock: the state and the next
    tick are written only if the state is still those bytes and nobody holds the lock (one
    script call instead of the lock's two round trips around the transaction,
    `workers/plumbing/conditional_write.py`). False: nothing was written."""
    _next_slot(state, now)
    writes = Recorder()
    save_state(writes, state, now)
    schedule_tick(services, state, now, pipeline=writes)
    return commit_if_unchanged(services.redis, state_key(state.id), read, lock_name(state.id), writes)


def reserve_horizon(state: WatchState, now: datetime, *, final: bool) -> float:
    """How far ahead this tick's card may reserve a slot: until shortly before the next tick,
    which recomputes the card anyway; a last card (the run finished) has no next tick."""
    if final:
        return FINAL_RESERVE_SECONDS
    due = state.next_due or state.started_at
    return max(0.0, (due + timedelta(seconds=state.interval) - now).total_seconds() - RESERVE_MARGIN_SECONDS)
