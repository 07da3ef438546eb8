"""`taubot worker`'s rq Worker: rq's, tuned for 5-second watch ticks and quick recovery.

rq's defaults suit long batch jobs. An idle worker blocks in BLPOP for
``worker_ttl - 15`` = 405 s, restarts a dead scheduler process only at its
maintenance tick (every 600 s), backs off up to 60 s after losing Redis, and
a scheduler killed with its worker keeps its lock for ``interval + 60`` s, so
a replacement worker cannot schedule anything for a minute. Watch ticks and
retries stood still for minutes after each of those faults while the card
promised a refresh every 5 s (issue 15.11).

Here the worker wakes every 5 s, retries Redis every 2 s at most, and at
each maintenance tick first releases a scheduler lock whose holder stopped
heart-beating (rq's scheduler writes ``last_heartbeat`` every second), so
its own scheduler takes over within one watch interval. The release is a
compare-and-delete on the holder's name: a live scheduler's lock is never
touched, and one that was only slow sees the take-over at its next heartbeat
and stops (rq's own lost-lock handling).

A job whose whole worker died is found by another worker only once the
job's heartbeat entry expires. rq's forking worker heart-beats every
``job_monitoring_interval`` (30 s) with 60 s to spare, so that took about
91 s, after which the user got an error card (issue 26.8). Here the parent
beats every 5 s with 15 s to spare: an abandoned job is found within about
25 s (`workers/jobs.py` then runs a plain status once more). The in-process
worker cannot beat during a job, so it keeps rq's bound (the job timeout).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import redis
from rq import SimpleWorker, Worker
from rq.job import Job
from rq.scheduler import RQScheduler
from rq.utils import utcparse

from workers.plumbing.timed_jobs import TickMover

log = logging.getLogger(__name__)

WORKER_TTL_SECONDS = 20  # BLPOP wakes every worker_ttl - 15 = 5 s
MAINTENANCE_INTERVAL_SECONDS = 5
STALE_SCHEDULER_SECONDS = 5  # five missed one-second heartbeats
JOB_MONITORING_INTERVAL_SECONDS = 5  # how often a forking worker's parent beats for its horse
HEARTBEAT_MARGIN_SECONDS = 15  # three missed beats before a job counts as abandoned
SCHEDULER_KEY = "rq:scheduler:{name}"  # rq.scheduler.SCHEDULER_KEY_TEMPLATE

_RELEASE_IF_HELD_BY = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def release_stale_scheduler_locks(conn: redis.Redis, queue_names: list[str], now: datetime) -> list[str]:
    """Release each queue's scheduler lock whose holder has not heart-beaten for
    `STALE_SCHEDULER_SECONDS` (or whose metadata expired); returns the queues released."""
    released = []
    for name in queue_names:
        key = RQScheduler.get_locking_key(name)
        holder = conn.get(key)
        if holder is None:
            continue
        beat = conn.hget(SCHEDULER_KEY.format(name=holder.decode()), "last_heartbeat")
        if beat is not None and now - utcparse(beat.decode()).replace(tzinfo=UTC) < timedelta(
                seconds=STALE_SCHEDULER_SECONDS):
            continue
        if conn.eval(_RELEASE_IF_HELD_BY, 1, key, holder):
            log.warning("released the scheduler lock of %s: its holder %s stopped heart-beating",
                        name, holder.decode())
            released.append(name)
    return released


def clear_engine_caches() -> None:
    """Drop the engine's per-object caches (built for the stall monitor, whose objects persist):
    a long-lived worker process would otherwise keep every status's pods alive up to their bound.
    After every job, and after every tick a mover thread runs."""
    from workers.diagnosis import podfacts, shapes

    podfacts.clear_cache()
    shapes.clear_cache()


PUBSUB_WAKE_SECONDS = 0.5  # how long the command listener may sleep before it sees a stop


class QuickStop:
    """Mixed into rq's worker classes: a worker that stops stops within half a second.

    rq 3 listens for its commands (stop, kill-horse) on a pub/sub thread that sleeps up to 60 s
    in one wait, and redis-py 8.2's `PubSubWorkerThread.stop()` joins that thread: when the
    unsubscribe confirmation wins the race with the stop, the wait starts again on a channel no
    longer subscribed and teardown blocks for the whole minute (measured: every `work(burst=True)`
    of the test suite, and a `taubot worker` outliving Kubernetes' 30 s grace period). The same
    listener, woken every `PUBSUB_WAKE_SECONDS`, costs a select() call per wake and no Redis
    traffic."""

    def subscribe(self) -> None:
        self.pubsub = self.connection.pubsub()  # type: ignore[attr-defined]
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})  # type: ignore[attr-defined]
        self.pubsub_thread = self.pubsub.run_in_thread(  # type: ignore[attr-defined]
            sleep_time=PUBSUB_WAKE_SECONDS, daemon=True,
            exception_handler=self._pubsub_exception_handler)  # type: ignore[attr-defined]


class _Recovering(QuickStop):
    """Mixed into rq's worker classes: quick wake-ups and the stale-lock release."""

    max_connection_wait_time = 2.0

    def __init__(self, *args: object, **kwargs: object) -> None:
        # Defaults here, not only in make_worker: rq's WorkerPool builds its workers itself.
        kwargs.setdefault("worker_ttl", WORKER_TTL_SECONDS)
        kwargs.setdefault("maintenance_interval", MAINTENANCE_INTERVAL_SECONDS)
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]

    def work(self, *args: object, **kwargs: object) -> bool:
        """rq's loop, with a `TickMover` per queue beside it: due watch ticks are queued to the
        millisecond, not at rq's once-a-second scheduler poll (`workers/plumbing/timed_jobs.py`)."""
        threads = 0
        if isinstance(self, SimpleWorker):  # in-process: ticks run on the mover threads
            from workers.services import current

            threads = current().settings.watch_tick_threads
        movers = [TickMover(self.connection, q, threads=threads,  # type: ignore[attr-defined]
                            after_tick=clear_engine_caches).start()
                  for q in self.queues]  # type: ignore[attr-defined]
        try:
            return super().work(*args, **kwargs)  # type: ignore[misc, no-any-return]
        finally:
            for mover in movers:
                mover.stop()

    def run_maintenance_tasks(self) -> None:
        try:
            release_stale_scheduler_locks(self.connection, self.queue_names(),  # type: ignore[attr-defined]
                                          datetime.now(UTC))
        except redis.RedisError as exc:
            log.warning("could not check the scheduler lock: %s", exc)
        super().run_maintenance_tasks()  # type: ignore[misc]


class TaubotWorker(_Recovering, Worker):
    """A forking worker (one work horse per job); its parent beats every 5 s for the horse."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("job_monitoring_interval", JOB_MONITORING_INTERVAL_SECONDS)
        super().__init__(*args, **kwargs)

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        """rq's TTL (the next beat's time plus 60 s) with `HEARTBEAT_MARGIN_SECONDS` instead."""
        return super().get_heartbeat_ttl(job, working_time) - 60 + HEARTBEAT_MARGIN_SECONDS


class TaubotSimpleWorker(_Recovering, SimpleWorker):
    """Runs jobs in its own process (`taubot worker --in-process`).

    A forking worker's horse takes each job's memory with it; here the process lives on, so the
    engine's per-object caches (built for the stall monitor, whose objects persist) are dropped
    after every job — they would otherwise keep every status's pods alive up to their bound."""

    def perform_job(self, *args: object, **kwargs: object) -> bool:  # rq 3: (job, queue, execution)
        try:
            return super().perform_job(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            clear_engine_caches()


def run_pool(queue: object, conn: redis.Redis, workers: int, *, in_process: bool = False,
             burst: bool = False) -> None:
    """`taubot worker --pool N`: rq's WorkerPool of N workers in one pod, each with its own work
    horses, so N latency-bound jobs (watch ticks waiting on the API server and Slack) overlap
    instead of queueing behind each other; one of them holds the scheduler."""
    from rq.worker_pool import WorkerPool

    release_stale_scheduler_locks(conn, [queue.name], datetime.now(UTC))  # type: ignore[attr-defined]
    cls = TaubotSimpleWorker if in_process else TaubotWorker
    WorkerPool([queue], connection=conn, num_workers=workers, worker_class=cls).start(burst=burst)  # type: ignore[list-item]


def make_worker(queue: object, conn: redis.Redis, *, in_process: bool = False) -> Worker:
    """The worker `taubot worker` runs; a dead holder's lock is released before it starts."""
    cls = TaubotSimpleWorker if in_process else TaubotWorker
    worker = cls([queue], connection=conn, worker_ttl=WORKER_TTL_SECONDS,
                 maintenance_interval=MAINTENANCE_INTERVAL_SECONDS)
    release_stale_scheduler_locks(conn, worker.queue_names(), datetime.now(UTC))
    return worker


__all__ = ["HEARTBEAT_MARGIN_SECONDS", "JOB_MONITORING_INTERVAL_SECONDS", "MAINTENANCE_INTERVAL_SECONDS",
           "PUBSUB_WAKE_SECONDS", "QuickStop",
           "TaubotSimpleWorker", "TaubotWorker", "WORKER_TTL_SECONDS", "make_worker",
           "release_stale_scheduler_locks", "run_pool"]
