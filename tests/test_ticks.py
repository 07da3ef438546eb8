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
