"""Queueing a request by job name: the one thing a front end needs from the workers.

`RqQueue` is production (Redis + rq, retries with backoff, a failure callback
that always tells the user). `InlineQueue` runs the same job functions in
this process, with delayed jobs due on the services' clock — what `taubot
shell` uses when it has no worker. Jobs are named by dotted path (each
request class names its own), so nothing here imports worker code until a
job actually runs.
"""

from __future__ import annotations

import heapq
import importlib
import itertools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from rq import Callback, Queue, Retry

from workers.contracts.requests import Request
from workers.plumbing import timed_jobs

log = logging.getLogger(__name__)

# Seconds before each retry of a command whose job met an outage (Slack or Redis unreachable):
# 2 + 5 + 15 + 30 + 60 + 60 + 60 = 232 s, close to four minutes of Slack being away before the
# user is told through the command's response_url (valid 30 minutes). Other errors do not retry.
RETRY_INTERVALS = [2, 5, 15, 30, 60, 60, 60]
RESULT_TTL_SECONDS = 3600
FAILURE_TTL_SECONDS = 7 * 24 * 3600
FAILURE_CALLBACK = "workers.jobs.on_job_failure"


TICK_RETRIES = 2  # a watch tick: a failed refresh is tried again at the watch's own cadence


def retry_intervals(retries: int) -> list[int]:
    """One interval per retry, first to last. rq indexes its list from the end (by retries
    left), so a list longer than ``retries`` would skip the short first waits."""
    padded = RETRY_INTERVALS + [RETRY_INTERVALS[-1]] * max(retries - len(RETRY_INTERVALS), 0)
    return padded[:retries]


@dataclass(frozen=True)
class RetrySpec:
    """How a job kind is retried — the one home of that answer (issue 39): at most ``retries``
    more runs, after ``intervals`` seconds (first to last). What counts as worth a retry is the
    failure callback's (`workers/jobs.py`: an outage only; any other error spends the rest)."""

    retries: int = 0
    intervals: tuple[int, ...] = ()

    def rq(self) -> Retry | None:
        return Retry(max=self.retries, interval=list(self.intervals)) if self.retries > 0 else None


NEVER = RetrySpec()


def retry_for(request: Request, job_retries: int) -> RetrySpec:
    """A request's job: a command (`Request.retried`) rides out an outage — ``job_retries`` times
    (`TAUBOT_JOB_RETRIES`) after `RETRY_INTERVALS`; a press acts once and is never retried."""
    if not type(request).retried or job_retries <= 0:
        return NEVER
    return RetrySpec(job_retries, tuple(retry_intervals(job_retries)))


def tick_retry(interval: int) -> RetrySpec:
    """A watch tick: `TICK_RETRIES` more tries, each a watch interval later."""
    return RetrySpec(TICK_RETRIES, (interval,) * TICK_RETRIES)


class JobQueue(Protocol):
    def enqueue(self, job: str, *args: Any, job_id: str | None = None, timeout: int = 120,
                retry: RetrySpec = NEVER, meta: dict[str, Any] | None = None, description: str = "",
                on_failure: str | None = FAILURE_CALLBACK) -> str: ...

    def enqueue_in(self, delay: float, job: str, *args: Any, job_id: str, timeout: int = 120,
                   retry: RetrySpec = NEVER, description: str = "",
                   on_failure: str | None = None, pipeline: Any = None,
                   exact: datetime | None = None) -> str: ...

    def cancel(self, job_id: str) -> None: ...


def request_meta(request: Request) -> dict[str, Any]:
    """What the failure callback needs to tell the user, kept beside the job."""
    return {
        "channel": getattr(request, "channel", None),
        "user": request.user,
        "command": request.display(),
        "response_url": request.response_url,
    }


def enqueue_request(queue: JobQueue, request: Request, *, timeout: int = 120, job_retries: int = 0) -> str:
    """Queue ``request`` for the job its class names, retried as `retry_for` says; raises the
    queue's errors (Redis down)."""
    retry = retry_for(request, job_retries)
    meta = {**request_meta(request), "max_retries": retry.retries}
    return queue.enqueue(type(request).job, request.model_dump(mode="json"),
                         job_id=f"tau-{uuid.uuid4().hex}", timeout=timeout, retry=retry,
                         meta=meta, description=request.display())


class RqQueue:
    """Jobs in Redis for `taubot worker` (rq with its scheduler)."""

    def __init__(self, queue: Queue) -> None:
        self.rq = queue

    def enqueue(self, job: str, *args: Any, job_id: str | None = None, timeout: int = 120,
                retry: RetrySpec = NEVER, meta: dict[str, Any] | None = None, description: str = "",
                on_failure: str | None = FAILURE_CALLBACK) -> str:
        # One pipeline, so one round trip: without it rq sends two transactions (the queue's
        # registration, then the job and its push), and the ack waits for both (issue 16).
        with self.rq.connection.pipeline() as pipe:
            queued = self.rq.enqueue(
                job, *args, job_id=job_id, job_timeout=timeout,
                retry=retry.rq(),
                on_failure=Callback(on_failure) if on_failure else None,
                result_ttl=RESULT_TTL_SECONDS, failure_ttl=FAILURE_TTL_SECONDS,
                meta=meta or {}, description=description or job, pipeline=pipe,
            )
            pipe.execute()
        return str(queued.id)

    def enqueue_in(self, delay: float, job: str, *args: Any, job_id: str, timeout: int = 120,
                   retry: RetrySpec = NEVER, description: str = "",
                   on_failure: str | None = None, pipeline: Any = None, exact: datetime | None = None) -> str:
        """``exact``: a timed job (a watch tick's slot), due to the millisecond: it waits in the
        workers' own due set, not in rq's schedule, and a worker's `TickMover` claims it then
        (`workers/plumbing/timed_jobs.py`). Without ``exact``, rq's scheduler queues it after ``delay``."""
        if exact is not None:
            timed = timed_jobs.TimedJob(id=job_id, job=job, args=args, timeout=timeout, retries=retry.retries,
                                        retry_interval=retry.intervals[0] if retry.intervals else 5,
                                        on_failure=on_failure, description=description)
            timed_jobs.schedule(pipeline if pipeline is not None else self.rq.connection, self.rq.name, timed,
                           exact.timestamp())
            return job_id
        pipe = pipeline if pipeline is not None else self.rq.connection.pipeline()
        queued = self.rq.enqueue_in(
            timedelta(seconds=delay), job, *args,
            job_id=job_id, job_timeout=timeout,
            retry=retry.rq(),
            on_failure=Callback(on_failure) if on_failure else None,
            result_ttl=timed_jobs.RESULT_TTL_SECONDS, failure_ttl=timed_jobs.FAILURE_TTL_SECONDS,
            description=description or job, pipeline=pipe,
        )
        if pipeline is None:
            pipe.execute()
        return str(queued.id)

    def cancel(self, job_id: str) -> None:
        from rq.exceptions import NoSuchJobError
        from rq.job import Job

        timed_jobs.cancel(self.rq.connection, self.rq.name, job_id)
        try:
            Job.fetch(job_id, connection=self.rq.connection).delete()
        except NoSuchJobError:
            pass


def resolve(name: str) -> Callable[..., Any]:
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


@dataclass(order=True)
class _Due:
    at: datetime
    seq: int
    job_id: str = field(compare=False)
    job: str = field(compare=False)
    args: tuple[Any, ...] = field(compare=False)


class InlineQueue:
    """Runs jobs in this process when `run_due` is called: queued ones at once, delayed ones
    when the clock has reached their time (after the ack has been shown, as in Slack).

    A failed job is reported once through ``on_error`` (the shell prints it);
    nothing is retried — there is no other worker to hand a retry to.
    """

    def __init__(self, now: Callable[[], datetime], on_error: Callable[[str, BaseException], None]) -> None:
        self._now = now
        self._on_error = on_error
        self._due: list[_Due] = []
        self._seq = itertools.count()
        self._cancelled: set[str] = set()

    def enqueue(self, job: str, *args: Any, job_id: str | None = None, timeout: int = 120,
                retry: RetrySpec = NEVER, meta: dict[str, Any] | None = None, description: str = "",
                on_failure: str | None = FAILURE_CALLBACK) -> str:
        job_id = job_id or uuid.uuid4().hex
        heapq.heappush(self._due, _Due(self._now(), next(self._seq), job_id, job, args))
        return job_id

    def enqueue_in(self, delay: float, job: str, *args: Any, job_id: str, timeout: int = 120,
                   retry: RetrySpec = NEVER, description: str = "",
                   on_failure: str | None = None, pipeline: Any = None, exact: datetime | None = None) -> str:
        self._cancelled.discard(job_id)
        heapq.heappush(self._due, _Due(self._now() + timedelta(seconds=delay), next(self._seq),
                                       job_id, job, args))
        return job_id

    def cancel(self, job_id: str) -> None:
        self._cancelled.add(job_id)

    def next_due(self) -> datetime | None:
        while self._due and self._due[0].job_id in self._cancelled:
            heapq.heappop(self._due)
        return self._due[0].at if self._due else None

    def run_due(self) -> int:
        """Run every job whose time has come; returns how many ran."""
        ran = 0
        while (at := self.next_due()) is not None and at <= self._now():
            due = heapq.heappop(self._due)
            self._run(due.job, due.args, due.job_id)
            ran += 1
        return ran

    def _run(self, job: str, args: tuple[Any, ...], what: str) -> None:
        try:
            resolve(job)(*args)
        except Exception as exc:  # noqa: BLE001 - reported, like rq's failure callback would
            log.debug("inline job %s failed", what, exc_info=exc)
            self._on_error(what, exc)


__all__ = ["NEVER", "TICK_RETRIES", "InlineQueue", "JobQueue", "RetrySpec", "RqQueue", "enqueue_request",
           "request_meta", "resolve", "retry_for", "tick_retry"]
