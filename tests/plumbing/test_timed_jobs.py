"""Timed jobs (watch ticks) claimed on time by each worker's `TickMover` from the workers' own due
set, never lost to a dying worker (issue 28). Real Redis and rq; the movers' clock is injected."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job
from rq.registry import ScheduledJobRegistry

from workers.plumbing.jobqueue import RqQueue, tick_retry
from workers.plumbing.metrics import UNTRUSTED_DROPPED
from workers.plumbing.timed_jobs import (
    AHEAD_SECONDS,
    LEASE_SECONDS,
    TIMED_JOBS,
    TickMover,
    TimedJob,
    due_key,
    leased_key,
)

JOB = "workers.jobs.watch_tick"
# Every time here is on the movers' injected clock, anchored on a fixed instant (never the wall
# clock): a due set's scores are plain numbers to Redis, so any epoch serves.
EPOCH = datetime(2026, 11, 30, 10, 30, tzinfo=UTC).timestamp()
# The stand-ins for `watch_tick` below, allowed on the movers that run them (the default allow-list
# is taubot's own timed jobs only).
TEST_JOBS = TIMED_JOBS | {"tests.plumbing.test_timed_jobs.rendezvous", "tests.plumbing.test_timed_jobs.hold", "tests.plumbing.test_timed_jobs.boom"}


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    conn = Redis.from_url(redis_url)
    yield Queue("taubot-ticks-test", connection=conn)
    conn.close()


def test_a_due_tick_is_queued_at_its_time_once_with_rqs_retries_and_no_record_before(queue: Queue) -> None:
    jobs = RqQueue(queue)
    start = EPOCH
    jobs.enqueue_in(10, JOB, "w1", 3, job_id="w1-t3", exact=datetime.fromtimestamp(start + 10, UTC),
                    retry=tick_retry(5), on_failure="workers.jobs.on_tick_failure")
    # waiting, it is one member of the due set: no rq job record, nothing in rq's schedule
    assert not queue.connection.exists("rq:job:w1-t3") and ScheduledJobRegistry(queue=queue).get_job_ids() == []
    assert queue.connection.zscore(due_key(queue.name), TimedJob.parse(
        queue.connection.zrange(due_key(queue.name), 0, 0)[0]).member) == pytest.approx(start + 10)
    clock = [start + 9.9]
    movers = [TickMover(queue.connection, queue, now=lambda: clock[0]) for _ in range(2)]
    assert movers[0].move_due() == 0 and queue.job_ids == []  # not yet due
    assert 0 < movers[0].next_due_in() <= 0.1  # the claim also said when the next one is due
    clock[0] = start + 10.05
    assert [m.move_due() for m in movers] == [1, 0]  # one mover queues it; the other finds it claimed
    assert queue.job_ids == ["w1-t3"]
    job = Job.fetch("w1-t3", connection=queue.connection)
    assert job.args == ["w1", 3] or job.args == ("w1", 3)
    assert job.retries_left == 2 and job.failure_callback is not None
    assert queue.connection.zcard(due_key(queue.name)) == 0
    assert queue.connection.zcard(leased_key(queue.name)) == 0  # queued and unleased in one transaction
    for mover in movers:
        mover.stop()


def test_a_claim_whose_mover_died_is_due_again_when_its_lease_lapses(queue: Queue) -> None:
    """A claim leases the tick instead of dropping it: never lost, and never run twice while the
    lease holds."""
    now = EPOCH
    RqQueue(queue).enqueue_in(0, JOB, "w2", 1, job_id="w2-t1", exact=datetime.fromtimestamp(now, UTC))
    clock = [now + 1]
    dying = TickMover(queue.connection, queue, now=lambda: clock[0])
    claimed, _ = dying._claim(keys=[dying.key, dying.leased],
                              args=[repr(clock[0]), repr(clock[0] + LEASE_SECONDS), 10, repr(clock[0])])
    assert len(claimed) == 2  # one member and its due time ... and the mover dies here, before queueing it
    other = TickMover(queue.connection, queue, now=lambda: clock[0])
    assert other.move_due() == 0 and queue.job_ids == []
    clock[0] += LEASE_SECONDS - 1
    assert other.move_due() == 0  # the lease still holds
    clock[0] += 2
    assert other.move_due() == 1 and queue.job_ids == ["w2-t1"]
    for mover in (dying, other):
        mover.stop()


def test_a_cancelled_tick_is_not_queued_and_others_stay(queue: Queue) -> None:
    jobs = RqQueue(queue)
    for job_id in ("w3-t1", "w3-t10"):
        jobs.enqueue_in(0, JOB, "w3", 1, job_id=job_id, exact=datetime.fromtimestamp(EPOCH, UTC))
    jobs.cancel("w3-t1")
    mover = TickMover(queue.connection, queue, now=lambda: EPOCH + 1)
    assert mover.move_due() == 1 and queue.job_ids == ["w3-t10"]
    mover.stop()


def test_a_malformed_member_is_dropped_and_the_mover_goes_on(queue: Queue) -> None:
    now = EPOCH
    queue.connection.zadd(due_key(queue.name), {"junk not-json": now})
    RqQueue(queue).enqueue_in(0, JOB, "w4", 1, job_id="w4-t1", exact=datetime.fromtimestamp(now, UTC))
    mover = TickMover(queue.connection, queue, now=lambda: now + 1)
    assert mover.move_due() == 2 and queue.job_ids == ["w4-t1"]
    assert queue.connection.zcard(leased_key(queue.name)) == 0
    mover.stop()


def test_the_allow_list_is_what_taubot_schedules() -> None:
    from workers.flows.status import LINK_CHARTS_JOB
    from workers.flows.watch import TICK_FAILURE, TICK_JOB
    from workers.plumbing.timed_jobs import FAILURE_CALLBACKS

    assert TIMED_JOBS == {TICK_JOB, LINK_CHARTS_JOB} and FAILURE_CALLBACKS == {TICK_FAILURE}


def _dropped() -> float:
    return UNTRUSTED_DROPPED.labels("timed_job")._value.get()


@pytest.mark.parametrize("threads", [0, 4])
def test_a_forged_member_naming_any_other_function_is_dropped_counted_and_never_run(
        queue: Queue, tmp_path, threads: int) -> None:  # noqa: ANN001
    """SPEC §11: the due set is read back from Redis. A member written by anyone else, naming any
    importable function (here `os.mkdir`) or failure callback, is removed and never run or queued;
    taubot's own tick beside it runs as ever."""
    now = EPOCH
    made, also = tmp_path / "made", tmp_path / "also"
    forged = [TimedJob(id="evil-1", job="os.mkdir", args=(str(made),)),
              TimedJob(id="evil-2", job=JOB, args=("w5", 1), on_failure="os.mkdir"),
              TimedJob(id="evil-3", job="shutil.rmtree", args=(str(also),))]
    for job in forged:
        queue.connection.zadd(due_key(queue.name), {job.member: now})
    queue.connection.zadd(due_key(queue.name), {'evil-4 {"job":["os","mkdir"],"args":[],"timeout":1,'
                                                '"retries":0,"retry_interval":1,"on_failure":null,'
                                                '"description":""}': now})
    before = _dropped()
    mover = TickMover(queue.connection, queue, now=lambda: now + 1, threads=threads)
    assert mover.move_due() == 4
    mover.stop()  # waits for anything running
    assert not made.exists()
    assert queue.job_ids == [] and not queue.connection.exists("rq:job:evil-1", "rq:job:evil-2")
    assert queue.connection.zcard(due_key(queue.name)) == 0
    assert queue.connection.zcard(leased_key(queue.name)) == 0  # removed, not due again
    assert _dropped() - before == 4


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


def test_a_mover_with_threads_runs_due_ticks_at_the_same_time_and_then_drops_their_leases(
        queue: Queue, redis_url: str) -> None:
    """A tick waits on the API server and Slack most of its time: two due ticks overlap instead
    of one waiting for the other (they meet, which one thread could never let them do)."""
    now = EPOCH
    for me, other in (("a", "b"), ("b", "a")):
        _due(queue, "tests.plumbing.test_timed_jobs.rendezvous", redis_url, me, other, job_id=f"t-{me}", at=now)
    mover = TickMover(queue.connection, queue, now=lambda: now + 1, threads=2, jobs=TEST_JOBS)
    assert mover.move_due() == 2
    mover.stop()  # waits for the running ticks
    assert queue.connection.exists("ticks-test:met:a", "ticks-test:met:b") == 2
    assert queue.job_ids == [] and not queue.connection.exists("rq:job:t-a", "rq:job:t-b")  # never an rq job
    assert queue.connection.zcard(leased_key(queue.name)) == 0  # ran: nothing left to run again


def test_a_mover_claims_only_as_many_ticks_as_it_has_free_threads(queue: Queue, redis_url: str) -> None:
    now = EPOCH
    for me in ("a", "b"):
        _due(queue, "tests.plumbing.test_timed_jobs.hold", redis_url, me, job_id=f"h-{me}", at=now)
    mover = TickMover(queue.connection, queue, now=lambda: now + 1, threads=1, jobs=TEST_JOBS)
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
    now = EPOCH
    _due(queue, "tests.plumbing.test_timed_jobs.boom", job_id="x-t1", at=now)
    mover = TickMover(queue.connection, queue, now=lambda: now + 1, threads=2, jobs=TEST_JOBS)
    assert mover.move_due() == 1
    mover.stop()
    assert queue.job_ids == ["x-t1"] and queue.connection.zcard(leased_key(queue.name)) == 0


def test_a_mover_with_threads_claims_what_falls_due_soon_at_once_and_starts_each_at_its_time(
        queue: Queue, redis_url: str) -> None:
    """One claim takes the jobs due within `AHEAD_SECONDS` (not those due later) and the mover holds
    them until each one's time: a mover calls Redis a few times a second, not once for each tick."""
    now = EPOCH
    clock = [now]
    for me, at in (("a", now + AHEAD_SECONDS / 2), ("b", now + AHEAD_SECONDS / 4), ("c", now + 5)):
        _due(queue, "tests.plumbing.test_timed_jobs.hold", redis_url, me, job_id=f"s-{me}", at=at)
        queue.connection.rpush(f"ticks-test:go:{me}", 1)
    mover = TickMover(queue.connection, queue, now=lambda: clock[0], threads=4, jobs=TEST_JOBS)
    assert mover.move_due() == 2 and queue.connection.zcard(due_key(queue.name)) == 1
    assert mover.start_due() == 0  # neither is due yet
    clock[0] = now + AHEAD_SECONDS / 4 + 0.001  # (due times are kept to the microsecond)
    assert mover.start_due() == 1  # b's time
    clock[0] = now + AHEAD_SECONDS / 2 + 0.001
    assert mover.start_due() == 1  # a's time
    mover.stop()  # waits for the running ticks
    assert queue.connection.exists("ticks-test:running:a", "ticks-test:running:b") == 2
    assert not queue.connection.exists("ticks-test:running:c")
