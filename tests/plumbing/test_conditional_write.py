"""`commit_if_unchanged`: writes land only if the value is the bytes read and its lock is free.
Real Redis (the suite's own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis import Redis

from workers.plumbing.conditional_write import Recorder, commit_if_unchanged

KEY, LOCK, DUE = "cw-test:state", "cw-test:state:lock", "cw-test:due"


@pytest.fixture
def conn(redis_url: str) -> Iterator[Redis]:
    client = Redis.from_url(redis_url)
    client.delete(KEY, LOCK, DUE)
    yield client
    client.delete(KEY, LOCK, DUE)
    client.close()


def writes() -> Recorder:
    recorder = Recorder()
    recorder.set(KEY, '{"tick": 2}', ex=600)
    recorder.zadd(DUE, {"w-t2 {}": 1234.5})
    return recorder


def test_unchanged_and_unlocked_the_writes_land_together(conn: Redis) -> None:
    conn.set(KEY, '{"tick": 1}')
    assert commit_if_unchanged(conn, KEY, b'{"tick": 1}', LOCK, writes())
    assert conn.get(KEY) == b'{"tick": 2}' and 0 < conn.ttl(KEY) <= 600
    assert conn.zrange(DUE, 0, -1, withscores=True) == [(b"w-t2 {}", 1234.5)]


@pytest.mark.parametrize("meanwhile", ["changed", "locked", "gone"])
def test_a_changed_gone_or_locked_value_refuses_every_write(conn: Redis, meanwhile: str) -> None:
    conn.set(KEY, '{"tick": 1}')
    if meanwhile == "changed":
        conn.set(KEY, '{"tick": 1, "stopped": "Stop was pressed"}')
    elif meanwhile == "locked":
        conn.set(LOCK, "someone")
    else:
        conn.delete(KEY)
    before = conn.get(KEY)
    assert not commit_if_unchanged(conn, KEY, b'{"tick": 1}', LOCK, writes())
    assert conn.get(KEY) == before and conn.zcard(DUE) == 0
