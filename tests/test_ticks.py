"""Watch ticks queued on time by a worker's `TickMover`, with rq's schedule as the durable record
(issue 28). Real Redis, rq's own registries; the movers' clock is injected."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from redis import Redis
from rq import Queue
from rq.registry import ScheduledJobRegistry

from workers.queue import RqQueue
from workers.ticks import FALLBACK_SECONDS, LEASE_SECONDS, TickMover, due_key

JOB = "workers.jobs.watch_tick"


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    conn = Redis.from_url(redis_url)
    yield Queue("taubot-ticks-test", connection=conn)
    conn.close()


def test_a_due_tick_is_queued_at_its_time_once_and_rq_keeps_its_fallback(queue: Queue) -> None:
    jobs = RqQueue(queue)
    start = time.time()
    jobs.enqueue_in(10, JOB, "w1", 3, job_id="w1-t3", exact=datetime.fromtimestamp(start + 10, UTC))
    registry = ScheduledJobRegistry(queue=queue)
    # rq's own schedule of it is the fallback, later than its due time
    assert registry.get_scheduled_time("w1-t3").timestamp() >= int(start) + 10 + FALLBACK_SECONDS - 1
    clock = [start + 9.9]
    movers = [TickMover(queue.connection, queue, now=lambda: clock[0]) for _ in range(2)]
    assert movers[0].move_due() == 0 and queue.job_ids == []  # not yet due
    assert 0 < movers[0].next_due_in() <= 0.1
    clock[0] = start + 10.05
    assert [m.move_due() for m in movers] == [1, 0]  # one mover queues it; the other sees it claimed
    assert queue.job_ids == ["w1-t3"]
    assert registry.get_job_ids() == []  # rq's scheduler will not queue it a second time
    assert queue.connection.zcard(due_key(queue.name)) == 0
    for mover in movers:
        mover.stop()


def test_a_claim_whose_mover_died_leaves_the_tick_to_rqs_scheduler(queue: Queue) -> None:
    """The claim pushes rq's schedule a lease ahead instead of dropping it: never lost."""
    jobs = RqQueue(queue)
    jobs.enqueue_in(0, JOB, "w2", 1, job_id="w2-t1", exact=datetime.now(UTC))
    now = time.time() + 1
    mover = TickMover(queue.connection, queue, now=lambda: now)
    registry = ScheduledJobRegistry(queue=queue)
    assert mover._claim(keys=[mover.key, registry.key], args=["w2-t1", int(now) + LEASE_SECONDS]) == 1
    # ... and the mover dies here, before queueing it
    assert queue.job_ids == [] and mover.move_due() == 0
    assert registry.get_job_ids() == ["w2-t1"]
    assert registry.get_scheduled_time("w2-t1").timestamp() == int(now) + LEASE_SECONDS
    mover.stop()


def test_a_cancelled_tick_is_not_queued(queue: Queue) -> None:
    jobs = RqQueue(queue)
    jobs.enqueue_in(0, JOB, "w3", 1, job_id="w3-t1", exact=datetime.now(UTC))
    jobs.cancel("w3-t1")
    mover = TickMover(queue.connection, queue, now=lambda: time.time() + 1)
    assert mover.move_due() == 0 and queue.job_ids == []
    mover.stop()


# ------------------------------------------------ ticks run on the mover's threads (in-process workers)
# The jobs below stand in for `watch_tick`: rq imports them by name, as it does the real one.


def rendezvous(redis_url: str, me: str, other: str) -> None:
    """Arrive, then wait (at most 10 s) for ``other`` to arrive: only two ticks running at the same
    time both get past this."""
    conn = Redis.from_url(redis_url)
    conn.rpush(f"ticks-test:arrived:{me}", 1)
    if conn.blpop([f"ticks-test:arrived:{other}"], timeout=10) is None:
        raise TimeoutError(f"{me} waited alone")
    conn.set(f"ticks-test:met:{me}", 1)


def hold(redis_url: str, me: str) -> None:
    """Run until the test lets this tick go."""
    conn = Redis.from_url(redis_url)
    conn.set(f"ticks-test:running:{me}", 1)
    conn.blpop([f"ticks-test:go:{me}"], timeout=10)


def boom() -> None:
    raise RuntimeError("the API server went away")


def _due(queue: Queue, func: str, *args: object, job_id: str, at: float) -> None:
    RqQueue(queue).enqueue_in(0, func, *args, job_id=job_id, exact=datetime.fromtimestamp(at, UTC))


def test_a_mover_with_threads_runs_due_ticks_at_the_same_time_and_then_drops_their_records(
        queue: Queue, redis_url: str) -> None:
    """A tick waits on the API server and Slack most of its time: two due ticks overlap instead
    of one waiting for the other (they meet, which one thread could never let them do)."""
    now = time.time()
    for me, other in (("a", "b"), ("b", "a")):
        _due(queue, "tests.test_ticks.rendezvous", redis_url, me, other, job_id=f"t-{me}", at=now)
    mover = TickMover(queue.connection, queue, now=lambda: now + 1, threads=2)
    assert mover.move_due() == 2
    mover.stop()  # waits for the running ticks
    assert queue.connection.exists("ticks-test:met:a", "ticks-test:met:b") == 2
    assert queue.job_ids == [] and ScheduledJobRegistry(queue=queue).get_job_ids() == []
    assert not queue.connection.exists("rq:job:t-a", "rq:job:t-b")  # ran: rq's fallback has nothing left


def test_a_mover_claims_only_as_many_ticks_as_it_has_free_threads(queue: Queue, redis_url: str) -> None:
    now = time.time()
    for me in ("a", "b"):
        _due(queue, "tests.test_ticks.hold", redis_url, me, job_id=f"h-{me}", at=now)
    mover = TickMover(queue.connection, queue, now=lambda: now + 1, threads=1)
    assert mover.move_due() == 1 and mover.move_due() == 0  # its one thread is busy
    assert queue.connection.zcard(due_key(queue.name)) == 1  # the other stays due, for anyone free
    queue.connection.rpush("ticks-test:go:a", 1)
    queue.connection.rpush("ticks-test:go:b", 1)
    assert mover._slot_freed.wait(10)
    assert mover.move_due() == 1
    mover.stop()
    assert queue.connection.zcard(due_key(queue.name)) == 0
    assert queue.connection.exists("ticks-test:running:a", "ticks-test:running:b") == 2


def test_a_tick_that_raises_on_a_movers_thread_is_handed_to_rq(queue: Queue) -> None:
    """rq's retries and the watch's failure callback then apply as to any tick."""
    now = time.time()
    _due(queue, "tests.test_ticks.boom", job_id="x-t1", at=now)
    mover = TickMover(queue.connection, queue, now=lambda: now + 1, threads=2)
    assert mover.move_due() == 1
    mover.stop()
    assert queue.job_ids == ["x-t1"] and ScheduledJobRegistry(queue=queue).get_job_ids() == []
