"""The Redis pace of Slack writes (workers/surfaces/pacing.py) on the suite's own Redis, with an
injected clock: grants, refusals, and the reservations that let cards changing together each
have a slot of the tier-3 budget instead of all retrying at the same instant."""

from __future__ import annotations

import redis

from workers.surfaces.pacing import Rate, SlackPacer


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def pacer(conn: redis.Redis, clock: Clock) -> SlackPacer:
    # 12 edits a minute with no burst (one every 5 s); the channel allows far more.
    return SlackPacer(conn, "ws1", update_rate=Rate(12 / 60.0, burst=1), channel_rate=Rate(100.0, burst=100),
                      now=clock)


def test_reservations_get_successive_slots_and_count_against_the_budget(conn: redis.Redis) -> None:
    clock = Clock()
    pace = pacer(conn, clock)
    assert pace.reserve("chat.update", "C1", within=30) == (0.0, True)  # free now: granted
    assert pace.reserve("chat.update", "C2", within=30) == (5.0, True)  # the next slot is this one's
    assert pace.reserve("chat.update", "C3", within=30) == (10.0, True)  # and the one after
    assert pace.reserve("chat.update", "C4", within=12) == (15.0, False)  # beyond the horizon: nothing held
    assert pace.try_acquire("chat.update", "C5") == 15.0  # the refusal took no slot either
    clock.t += 15
    assert pace.try_acquire("chat.update", "C5") == 0.0


def test_a_refused_call_changes_nothing_and_a_granted_one_is_counted(conn: redis.Redis) -> None:
    clock = Clock()
    pace = pacer(conn, clock)
    assert pace.try_acquire("chat.update", "C1") == 0.0
    for _ in range(3):
        assert pace.try_acquire("chat.update", "C1") == 5.0
    clock.t += 5
    assert pace.try_acquire("chat.update", "C1") == 0.0


def test_a_busy_channel_holds_the_slot_back_on_both_keys(conn: redis.Redis) -> None:
    """The channel allows one a second; the workspace is free: the reservation is for when the
    channel allows it, and the workspace's slot is taken for that same time."""
    clock = Clock()
    pace = SlackPacer(conn, "ws1", update_rate=Rate(1.0, burst=1), channel_rate=Rate(0.5, burst=1), now=clock)
    assert pace.reserve("chat.update", "C1", within=10) == (0.0, True)
    assert pace.reserve("chat.update", "C1", within=10) == (2.0, True)  # the channel's pace
    assert pace.reserve("chat.update", "C2", within=10) == (3.0, True)  # the workspace's, after that one


def test_waiting_callers_each_sleep_once_to_a_slot_of_their_own(conn: redis.Redis) -> None:
    """`acquire` reserves, then sleeps to the reserved slot: three callers waiting together sleep
    0, 5 and 10 s (one each, no polling), and one that cannot have a slot in time neither sleeps
    nor takes one."""
    clock, slept = Clock(), []
    pace = SlackPacer(conn, "ws1", update_rate=Rate(12 / 60.0, burst=1), channel_rate=Rate(100.0, burst=100),
                      now=clock, sleep=slept.append)
    assert [pace.acquire("chat.update", f"C{i}", max_wait=15) for i in range(3)] == [True, True, True]
    assert slept == [5.0, 10.0]
    assert pace.acquire("chat.update", "C9", max_wait=12) is False
    assert slept == [5.0, 10.0]
    assert pace.try_acquire("chat.update", "C9") == 15.0  # the refusal held nothing
