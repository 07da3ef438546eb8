"""One retry spec per job kind (issue 39): what rq stores for each kind of job, read back from Redis."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job

from workers.contracts.commands import StatusCommand
from workers.contracts.identity import Identity
from workers.contracts.requests import MuteRequest, StatusRequest
from workers.plumbing.jobqueue import NEVER, RETRY_INTERVALS, RqQueue, enqueue_request, retry_for, tick_retry

ALICE = Identity(user="alice@example.com", groups=("team-vision",))
STATUS = StatusRequest(identity=ALICE, channel="C012VISION", user="U012ALICE",
                       command=StatusCommand(run="train-a"), requested_at=datetime(2026, 12, 4, tzinfo=UTC))
MUTE = MuteRequest(record_id="mute-record-0123456789", user="U012ALICE", identity=ALICE, channel="C012VISION",
                   message_ts="1700000000.000100")


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    conn = Redis.from_url(redis_url)
    yield Queue("taubot-retry-test", connection=conn)
    conn.close()


def test_a_command_rides_out_an_outage_with_the_backoff_and_a_press_never_retries(queue: Queue) -> None:
    status_id = enqueue_request(RqQueue(queue), STATUS, job_retries=7)
    mute_id = enqueue_request(RqQueue(queue), MUTE, job_retries=7)
    status = Job.fetch(status_id, connection=queue.connection)
    mute = Job.fetch(mute_id, connection=queue.connection)
    assert (status.retries_left, status.retry_intervals, status.meta["max_retries"]) == (
        7, RETRY_INTERVALS, 7)
    assert (mute.retries_left, mute.meta["max_retries"]) == (None, 0)


@pytest.mark.parametrize(("retries", "intervals"), [(0, ()), (2, (2, 5)), (9, (2, 5, 15, 30, 60, 60, 60, 60, 60))])
def test_a_commands_waits_are_the_backoffs_first_ones(retries: int, intervals: tuple[int, ...]) -> None:
    """rq indexes its intervals from the end; the spec always starts with the short waits."""
    spec = retry_for(STATUS, retries)
    assert (spec.retries, spec.intervals) == (retries, intervals)
    assert retry_for(MUTE, retries) == NEVER


def test_a_watch_tick_is_tried_again_at_the_watchs_cadence(queue: Queue) -> None:
    spec = tick_retry(15)
    assert (spec.retries, spec.intervals) == (2, (15, 15))
    RqQueue(queue).enqueue_in(0, "workers.jobs.watch_tick", "w", 1, job_id="w-t1", retry=spec,
                              exact=datetime.fromtimestamp(1_700_000_000, UTC))
    [member] = queue.connection.zrange("taubot:ticks:due:taubot-retry-test", 0, -1)
    assert b'"retries":2' in member and b'"retry_interval":15' in member
