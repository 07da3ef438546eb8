"""Timed jobs (watch ticks) on time: kept in a sorted set of their own and claimed by each worker's
`TickMover` within ~50 ms of due, not at rq's once-a-second scheduler poll.

rq keeps scheduled jobs' due times in whole seconds (`ScheduledJobRegistry` scores) and moves them
once a second, so a tick could wait up to a second and then queue behind the second's other ticks:
with 1,000 watches on two workers, 12–13 % of ticks were more than 2 s late (issue 28). And each
tick of rq's cost a job record written (pickled call, a dozen fields), fetched and deleted: about
half of an unchanged tick's CPU. Here a timed job is one member of the due set (`due_key`): its id
and its call (`TimedJob`) as the member, its precise due time (epoch seconds, float) as the score.
Scheduling one is a ZADD, in the caller's own transaction (a watch saves its state and schedules
its next tick together).

Every worker process runs a `TickMover`: a thread that, in one script call per wake-up, claims the
due members (moving each to the lease set, `leased_key`, `LEASE_SECONDS` ahead), puts back any
lease that expired, and learns when the next one is due. A claim is atomic, so a mover on another
worker never takes the same tick. A forking worker's mover then queues each claimed job to rq (with
its retries and failure callback) and drops its lease in the same transaction; rq runs it in a work
horse. An in-process worker (`taubot worker --in-process`) runs it on one of
`TAUBOT_WATCH_TICK_THREADS` (8) threads instead, with no rq record at all: a tick spends most of its
time waiting (the API server, Redis, Slack), so eight overlap on one core, and a burst of changed
runs no longer makes every later tick late by the sum of theirs. Only as many ticks are claimed as
threads are free; the rest stay due for the next free thread or another worker's mover. A tick that
raises is queued to rq, whose retries and failure callback then apply as to any job. (A forking
worker does not run ticks on threads: a fork taken while tick threads hold locks could inherit
them held.)

Nothing is lost to a dying worker: a lease it held expires after `LEASE_SECONDS` and the job is due
again for any mover. A job that runs twice that way (or any stale tick) finds the watch at a later
tick number and does nothing (`workers/flows/watch/tick.py`).

A member is read back from Redis, so it is untrusted input (SPEC §11): one that does not parse, or
names a function or failure callback outside `TIMED_JOBS` / `FAILURE_CALLBACKS` (taubot's own timed
jobs: a watch tick, the chart link of a status card), is removed from the set, never run or queued,
and counted (`taubot_untrusted_state_dropped_total{kind="timed_job"}`).
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import redis
from rq import Callback, Queue, Retry
from rq.utils import import_attribute

from workers.plumbing.metrics import UNTRUSTED_DROPPED

log = logging.getLogger(__name__)

LEASE_SECONDS = 60  # a claimed job is due again this long after its claim unless it ran
POLL_SECONDS = 0.05  # the longest a mover sleeps before looking again
AHEAD_SECONDS = 0.2  # a mover with threads claims jobs due this soon, and holds them until due
CLAIM_EVERY_SECONDS = 0.1  # ... claiming this often (a job scheduled due sooner waits up to this)
BATCH = 200  # the most jobs one claim takes
RESULT_TTL_SECONDS = 60
FAILURE_TTL_SECONDS = 24 * 3600
# The only functions a timed job may name: what taubot itself schedules with ``exact=``
# (`workers.flows.watch.schedule.TICK_JOB`, `workers.flows.status.LINK_CHARTS_JOB`), and the failure
# callback of a watch tick (`workers.flows.watch.schedule.TICK_FAILURE`). Anything else in the due
# set was not written by taubot and is dropped.
TIMED_JOBS = frozenset({"workers.jobs.watch_tick", "workers.jobs.link_charts_job"})
FAILURE_CALLBACKS = frozenset({"workers.jobs.on_tick_failure"})

# KEYS: due, leased. ARGV: now, lease until, most to claim, claim those due up to. Puts expired
# leases back (due now), claims the due members (with their due times), and answers them with the
# earliest due time left ('' when none).
_CLAIM = """
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, member in ipairs(expired) do
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZADD', KEYS[1], ARGV[1], member)
end
local due = {}
if tonumber(ARGV[3]) > 0 then
  due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[4], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
  for i = 1, #due, 2 do
    redis.call('ZREM', KEYS[1], due[i])
    redis.call('ZADD', KEYS[2], ARGV[2], due[i])
  end
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {due, first[2] or ''}
"""


def due_key(queue_name: str) -> str:
    """The sorted set of timed jobs (`TimedJob.member`) by their precise due time."""
    return f"taubot:ticks:due:{queue_name}"


def leased_key(queue_name: str) -> str:
    """The sorted set of claimed jobs by the time their claim lapses."""
    return f"taubot:ticks:leased:{queue_name}"


@dataclass(frozen=True)
class TimedJob:
    """A job due at a time: what to call, and what rq needs should it be queued (retries, the
    failure callback). Its member string is its whole record: the id, a space, the call as JSON."""

    id: str
    job: str  # dotted path of the function
    args: tuple[Any, ...] = ()
    timeout: int = 120
    retries: int = 0
    retry_interval: int = 5
    on_failure: str | None = None
    description: str = ""

    @property
    def member(self) -> str:
        body = {"job": self.job, "args": list(self.args), "timeout": self.timeout, "retries": self.retries,
                "retry_interval": self.retry_interval, "on_failure": self.on_failure,
                "description": self.description}
        return f"{self.id} {json.dumps(body, separators=(',', ':'))}"

    @classmethod
    def parse(cls, member: str | bytes) -> TimedJob:
        text = member.decode() if isinstance(member, bytes) else member
        job_id, _, raw = text.partition(" ")
        body = json.loads(raw)
        return cls(id=job_id, job=body["job"], args=tuple(body["args"]), timeout=body["timeout"],
                   retries=body["retries"], retry_interval=body["retry_interval"],
                   on_failure=body["on_failure"], description=body["description"])

    def enqueue(self, queue: Queue, *, pipeline: Any) -> None:
        """Queue this job to rq now (a forking worker's tick, or one that raised on a thread)."""
        retry = Retry(max=self.retries, interval=[self.retry_interval]) if self.retries > 0 else None
        queue.enqueue(self.job, *self.args, job_id=self.id, job_timeout=self.timeout, retry=retry,
                      on_failure=Callback(self.on_failure) if self.on_failure else None,
                      result_ttl=RESULT_TTL_SECONDS, failure_ttl=FAILURE_TTL_SECONDS,
                      description=self.description or self.job, pipeline=pipeline)


def schedule(conn: redis.Redis | Any, queue_name: str, job: TimedJob, at: float) -> None:
    """Make ``job`` due at ``at`` (epoch seconds); ``conn`` may be the caller's pipeline."""
    conn.zadd(due_key(queue_name), {job.member: at})


def _glob_escaped(text: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def cancel(conn: redis.Redis, queue_name: str, job_id: str) -> int:
    """Drop the due job ``job_id`` (a watch stopped between ticks); how many were dropped. A scan:
    cancels are rare (a Stop press), and a stale tick left behind would only skip itself."""
    key = due_key(queue_name)
    members = list(conn.zscan_iter(key, match=f"{_glob_escaped(job_id)} *", count=1000))
    return int(conn.zrem(key, *(m for m, _ in members))) if members else 0


@lru_cache(maxsize=64)
def _function(name: str) -> Callable[..., Any]:
    """The job's function by its dotted path, as rq finds it (cached: a tick runs every few seconds)."""
    return import_attribute(name)  # type: ignore[no-any-return]


class TickMover:
    """Claims the due timed jobs of ``queue`` and queues or runs them (see the module docstring).

    A mover with threads claims `CLAIM_EVERY_SECONDS` apart, each time what falls due within
    `AHEAD_SECONDS`, and holds what it claimed ahead in a heap of its own until each job's time,
    when it hands it to a free thread: one script call a tenth of a second instead of one for every
    tick of every worker (a wake-up that claims nothing still costs one), and no tick starts before
    its time. Each claimed job holds a thread from its claim, so a mover never claims more than it
    can run; the rest stay due for another worker's mover."""

    def __init__(self, conn: redis.Redis, queue: Queue, *, now: Callable[[], float] = time.time,
                 threads: int = 0, after_tick: Callable[[], None] | None = None,
                 jobs: Collection[str] = TIMED_JOBS,
                 failure_callbacks: Collection[str] = FAILURE_CALLBACKS) -> None:
        # A client of its own: the worker's connection pool is not shared with a thread that may
        # hold one of its connections while the worker forks a work horse.
        conn = redis.Redis(connection_pool=redis.ConnectionPool(**conn.connection_pool.connection_kwargs))
        queue = Queue(queue.name, connection=conn, serializer=queue.serializer)
        self.conn, self.queue, self.now = conn, queue, now
        self.key, self.leased = due_key(queue.name), leased_key(queue.name)
        self._claim = conn.register_script(_CLAIM)
        self._next_due: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.threads = threads
        self.after_tick = after_tick
        self.jobs, self.failure_callbacks = frozenset(jobs), frozenset(failure_callbacks)
        self._runner = ThreadPoolExecutor(threads, thread_name_prefix="taubot-tick") if threads > 0 else None
        self._held: list[tuple[float, int, TimedJob, bytes | str]] = []  # claimed ahead, by due time
        self._seq = itertools.count()
        self._free = threads  # threads neither running nor promised to a held job
        self._free_lock = threading.Lock()
        self._slot_freed = threading.Event()

    def move_due(self) -> int:
        """Claim what is due (with threads: due within `AHEAD_SECONDS`), queue it to rq or hold it
        for a thread, and start what is due now; how many this mover claimed."""
        now = self.now()
        ahead = AHEAD_SECONDS if self._runner is not None else 0.0
        batch = BATCH if self._runner is None else self._free
        claimed, first = self._claim(keys=[self.key, self.leased], args=[
            repr(now), repr(now + LEASE_SECONDS), max(0, batch), repr(now + ahead)])
        self._next_due = float(first) if first not in (b"", "", None) else None
        for member, due in zip(claimed[::2], claimed[1::2], strict=True):
            job = self._trusted(member)
            if job is None:  # not ours: drop it rather than run it, or retry it forever
                self.conn.zrem(self.leased, member)
                continue
            if self._runner is not None:
                with self._free_lock:
                    self._free -= 1
                heapq.heappush(self._held, (float(due), next(self._seq), job, member))
            else:
                self._enqueue(job, member)
        self.start_due()
        return len(claimed) // 2

    def _trusted(self, member: bytes | str) -> TimedJob | None:
        """The claimed member as a job, if it parses and names one of taubot's own timed jobs (and
        failure callbacks); else None, counted."""
        try:
            job = TimedJob.parse(member)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("dropped a malformed timed job (%s)", type(exc).__name__)
            UNTRUSTED_DROPPED.labels("timed_job").inc()
            return None
        named = job.job if isinstance(job.job, str) else None
        callback = job.on_failure if isinstance(job.on_failure, str) or job.on_failure is None else ""
        if named not in self.jobs or (callback is not None and callback not in self.failure_callbacks):
            log.warning("dropped timed job %r: it names a function taubot does not schedule", job.id[:80])
            UNTRUSTED_DROPPED.labels("timed_job").inc()
            return None
        return job

    def start_due(self) -> int:
        """Hand each held job whose time has come to a thread; how many started."""
        started = 0
        now = self.now()
        while self._held and self._held[0][0] <= now and self._runner is not None:
            _, _, job, member = heapq.heappop(self._held)
            self._runner.submit(self._run, job, member)
            started += 1
        return started

    def _enqueue(self, job: TimedJob, member: bytes | str) -> None:
        with self.conn.pipeline() as pipe:
            job.enqueue(self.queue, pipeline=pipe)
            pipe.zrem(self.leased, member)
            pipe.execute()

    def _run(self, job: TimedJob, member: bytes | str) -> None:
        """Run a claimed job here, then drop its lease. One that raised goes to rq."""
        try:
            _function(job.job)(*job.args)
        except Exception as exc:  # noqa: BLE001 - rq's retries and failure callback take it from here
            log.warning("timed job %s raised %s; handing it to the queue", job.id, type(exc).__name__)
            try:
                self._enqueue(job, member)
            except Exception as again:  # noqa: BLE001 - its lease still holds it: due again then
                log.warning("timed job %s: could not queue it (%s); due again in %d s", job.id, again,
                            LEASE_SECONDS)
        else:
            try:
                self.conn.zrem(self.leased, member)
            except Exception as exc:  # noqa: BLE001 - the lease runs it again: its tick number is stale then
                log.warning("timed job %s ran; its lease could not be dropped: %s", job.id, exc)
        finally:
            if self.after_tick is not None:
                self.after_tick()
            with self._free_lock:
                self._free += 1
            self._slot_freed.set()

    def next_due_in(self) -> float:
        """Seconds until the earliest job is due, as the last claim saw it (at most `POLL_SECONDS`:
        a job scheduled since may be due sooner)."""
        if self._next_due is None:
            return POLL_SECONDS
        return max(0.0, min(POLL_SECONDS, self._next_due - self.now()))

    def _serve(self) -> None:
        if self._runner is None:
            self._serve_queueing()
        else:
            self._serve_threads()

    def _serve_queueing(self) -> None:
        """A forking worker's mover: claim each job at its due time and queue it to rq."""
        while not self._stop.is_set():
            try:
                self.move_due()
                wait = self.next_due_in()
            except Exception as exc:  # noqa: BLE001 - Redis away: the jobs wait in Redis
                log.warning("tick mover: %s", exc)
                wait = 1.0
            self._stop.wait(wait)

    def _serve_threads(self) -> None:
        """An in-process worker's mover: claim every `CLAIM_EVERY_SECONDS` while a thread is free,
        and start each held job at its time."""
        next_claim = 0.0
        while not self._stop.is_set():
            now = self.now()
            if now >= next_claim and self._free > 0:
                try:
                    self.move_due()
                    next_claim = now + CLAIM_EVERY_SECONDS
                except Exception as exc:  # noqa: BLE001 - Redis away: the jobs wait in Redis
                    log.warning("tick mover: %s", exc)
                    next_claim = now + 1.0
            self.start_due()
            now = self.now()
            wake = next_claim
            if self._held:
                wake = min(wake, self._held[0][0])
            if self._free <= 0:  # every thread running or promised: look again when one frees
                self._slot_freed.clear()
                if self._free <= 0:
                    self._slot_freed.wait(max(0.0, wake - now) if self._held else POLL_SECONDS)
                continue
            self._stop.wait(max(0.0, wake - now))

    def start(self) -> TickMover:
        self._thread = threading.Thread(target=self._serve, name="taubot-ticks", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop taking jobs and let those running finish; held ones run now (a job not finished in
        time is due again when its lease lapses: its tick number then tells it apart)."""
        self._stop.set()
        self._slot_freed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._runner is not None:
            while self._held:
                _, _, job, member = heapq.heappop(self._held)
                self._runner.submit(self._run, job, member)
            self._runner.shutdown(wait=True, cancel_futures=False)
        self.conn.close()


__all__ = ["AHEAD_SECONDS", "CLAIM_EVERY_SECONDS", "FAILURE_CALLBACKS", "LEASE_SECONDS", "TIMED_JOBS",
           "TickMover", "TimedJob", "cancel", "due_key", "leased_key", "schedule"]
