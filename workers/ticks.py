"""Watch ticks on time: a worker moves each due tick to the queue itself, within ~50 ms of due.

rq's scheduler moves due jobs once a second, and rq keeps their due times in whole seconds
(`ScheduledJobRegistry` scores), so a tick could wait up to a second in the registry and then
queue behind the second's other ticks: with 1,000 watches on two workers, 12–13 % of ticks were
more than 2 s late (issue 28). Here every worker process runs a `TickMover`: a thread that keeps
the precise due time of each tick in a sorted set of its own (`due_key`) and, when one is due,
claims it and pushes it onto the queue, where the next free worker takes it at once.

An in-process worker (`taubot worker --in-process`) goes further: its mover runs a due tick itself,
on one of `TAUBOT_WATCH_TICK_THREADS` (8) threads, instead of queueing it behind the worker's one
job at a time. A tick spends most of its time waiting (the API server, Redis, Slack), so eight
overlap on one core; a burst of changed runs (half of 1,000 watched runs admitted at once, each
tick editing a card and replying) no longer makes every later tick late by the sum of theirs. Only
as many ticks are claimed as threads are free; the rest stay due for the next free thread or another
worker's mover, and rq's fallback still queues any that nobody claimed in time. A tick that raises is
handed to rq (queued), whose retries and failure callback then apply as to any tick. A forking
worker keeps queueing ticks: its process forks a work horse per job, and a fork taken while
tick threads hold locks could inherit them held.

rq stays the durable record. A tick is also scheduled with rq itself, `FALLBACK_SECONDS` after
its due time: if no mover is alive, rq's scheduler still runs it, only later. A claim is one Lua
script (a mover on another worker sees it claimed): it takes the tick out of the due set and
pushes rq's own schedule of it `LEASE_SECONDS` ahead instead of removing it; the job is then
queued with rq's API and its schedule removed. A mover that dies between the two leaves the tick
to rq's scheduler after the lease — never lost. In the rare case that both rq's scheduler and a
mover queue the same tick, the second run finds the watch at a later tick number and does nothing
(`workers/flows/watch.py`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import redis
from rq import Queue
from rq.job import Job
from rq.registry import ScheduledJobRegistry

log = logging.getLogger(__name__)

FALLBACK_SECONDS = 3  # rq's own schedule of a tick: this long after due (a mover normally wins)
LEASE_SECONDS = 60  # a claimed tick's rq schedule is pushed this far ahead until it is queued
POLL_SECONDS = 0.05  # the longest a mover sleeps before looking again
BATCH = 200

_CLAIM = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) == false then return 0 end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
"""


def due_key(queue_name: str) -> str:
    """The sorted set of tick job ids by their precise due time (epoch seconds, float)."""
    return f"taubot:ticks:due:{queue_name}"


class TickMover:
    """Moves due ticks of ``queue`` from rq's schedule to the queue (see the module docstring)."""

    def __init__(self, conn: redis.Redis, queue: Queue, *, now: Callable[[], float] = time.time,
                 threads: int = 0, after_tick: Callable[[], None] | None = None) -> None:
        # A client of its own: the worker's connection pool is not shared with a thread that may
        # hold one of its connections while the worker forks a work horse.
        conn = redis.Redis(connection_pool=redis.ConnectionPool(**conn.connection_pool.connection_kwargs))
        queue = Queue(queue.name, connection=conn, serializer=queue.serializer)
        self.conn, self.queue, self.now = conn, queue, now
        self.registry = ScheduledJobRegistry(queue=queue)
        self.key = due_key(queue.name)
        self._claim = conn.register_script(_CLAIM)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.threads = threads
        self.after_tick = after_tick
        self._runner = ThreadPoolExecutor(threads, thread_name_prefix="taubot-tick") if threads > 0 else None
        self._free = threads
        self._free_lock = threading.Lock()
        self._slot_freed = threading.Event()

    def move_due(self) -> int:
        """Queue (or, with threads, start) every tick that is due now; how many this mover took."""
        now = self.now()
        moved = 0
        batch = BATCH if self._runner is None else self._free
        if batch <= 0:
            return 0
        for raw in self.conn.zrangebyscore(self.key, "-inf", now, start=0, num=batch):
            job_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            if not self._claim(keys=[self.key, self.registry.key], args=[job_id, int(now) + LEASE_SECONDS]):
                continue  # another mover has it, or rq's scheduler already queued it
            job = Job.fetch(job_id, connection=self.conn, serializer=self.queue.serializer)
            if self._runner is not None:
                with self._free_lock:
                    self._free -= 1
                self._runner.submit(self._run, job)
            else:
                self._enqueue(job)
            moved += 1
        return moved

    def _enqueue(self, job: Job) -> None:
        with self.conn.pipeline() as pipe:
            self.queue._enqueue_job(job, pipeline=pipe)  # what rq's scheduler does with a due job
            self.registry.remove(job.id, pipeline=pipe)
            pipe.execute()

    def _run(self, job: Job) -> None:
        """Run a claimed tick here; its rq record goes once it ran. One that raised goes to rq."""
        try:
            job.func(*job.args, **job.kwargs)
        except Exception as exc:  # noqa: BLE001 - rq's retries and failure callback take it from here
            log.warning("tick %s raised %s; handing it to the queue", job.id, type(exc).__name__)
            try:
                self._enqueue(job)
            except Exception as again:  # noqa: BLE001 - rq's own schedule (the lease) still holds it
                log.warning("tick %s: could not queue it (%s); rq's schedule runs it later", job.id, again)
        else:
            try:
                with self.conn.pipeline() as pipe:
                    self.registry.remove(job.id, pipeline=pipe)
                    pipe.delete(job.key)
                    pipe.execute()
            except Exception as exc:  # noqa: BLE001 - the lease runs it again: its tick number is stale then
                log.warning("tick %s ran; its record could not be removed: %s", job.id, exc)
        finally:
            if self.after_tick is not None:
                self.after_tick()
            with self._free_lock:
                self._free += 1
            self._slot_freed.set()

    def next_due_in(self) -> float:
        """Seconds until the earliest tick is due (at most `POLL_SECONDS`)."""
        first = self.conn.zrange(self.key, 0, 0, withscores=True)
        if not first:
            return POLL_SECONDS
        return max(0.0, min(POLL_SECONDS, float(first[0][1]) - self.now()))

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self.move_due()
                wait = self.next_due_in()
            except Exception as exc:  # noqa: BLE001 - Redis away, a job gone: rq's schedule still holds it
                log.warning("tick mover: %s", exc)
                wait = 1.0
            if self._runner is not None and self._free <= 0:
                self._slot_freed.clear()
                if self._free <= 0:
                    self._slot_freed.wait(wait)  # every thread busy: look again when one frees
                continue
            self._stop.wait(wait)

    def start(self) -> TickMover:
        self._thread = threading.Thread(target=self._serve, name="taubot-ticks", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop taking ticks and let those running finish (a tick not finished in time is run
        again from rq's schedule after its lease: its tick number then tells it apart)."""
        self._stop.set()
        self._slot_freed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._runner is not None:
            self._runner.shutdown(wait=True, cancel_futures=False)
        self.conn.close()


__all__ = ["FALLBACK_SECONDS", "LEASE_SECONDS", "TickMover", "due_key"]
