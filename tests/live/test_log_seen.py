"""SPEC §11: Ray's Jobs API gives no per-line time, so when a progress line was first seen is
remembered per run in Redis across reads: a RayJob that hangs without printing an error becomes a
stall after 20 minutes of an unchanged log, and a single read never claims progress is recent.

The lines are what Ray's Jobs API returns for a driver (untimed text, Ray 2.x dashboard
job_head.py), the record lives in the suite's own Redis, and the RayJob is KubeRay v1's shape
(tests/fixtures/k8s.py).
"""

from __future__ import annotations

from datetime import timedelta

import redis

from tests.fixtures import k8s
from workers.collect.logs.seen import remember
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import LogEvidence

NOW = k8s.T0 + timedelta(minutes=30)
# Hugging Face Trainer dicts as a Ray driver prints them (untimed, as the Jobs API returns them).
HUNG = [(None, "{'loss': 1.2, 'grad_norm': 0.9, 'learning_rate': 4e-05, 'epoch': 0.3}"),
        (None, "{'loss': 1.1, 'grad_norm': 0.9, 'learning_rate': 4e-05, 'epoch': 0.4}")]


def _judge(logs: LogEvidence, now):  # noqa: ANN001, ANN202
    rj = k8s.rayjob("ray-pretrain-13b", job_status="RUNNING", deployment_status="Running")
    return evaluate([rj], "ray-pretrain-13b", now, k8s.NS, logs=logs).phase("Runtime progress")


def test_an_unchanged_untimed_log_becomes_a_stall_across_reads_and_one_read_claims_nothing(
        redis_url: str) -> None:
    conn = redis.Redis.from_url(redis_url)
    uid = "4f1c2a7e-rayjob-uid"
    first = remember(conn, uid, LogEvidence(lines=HUNG, source="ray-dashboard"), NOW)
    assert first.unchanged_since is None
    assert "time of the last progress line unknown" in _judge(first, NOW).summary
    later = NOW + timedelta(minutes=25)
    second = remember(conn, uid, LogEvidence(lines=HUNG, source="ray-dashboard"), later)
    assert second.unchanged_since == NOW
    check = _judge(second, later)
    assert (check.state.value, check.reason) == ("warning", "progress.stalled")


def test_a_log_that_moved_between_reads_is_progress_and_redis_down_keeps_the_time_unknown(
        redis_url: str) -> None:
    conn = redis.Redis.from_url(redis_url)
    remember(conn, "uid-2", LogEvidence(lines=HUNG, source="ray-dashboard"), NOW)
    moved = [*HUNG, (None, "{'loss': 1.0, 'grad_norm': 0.8, 'learning_rate': 4e-05, 'epoch': 0.5}")]
    later = NOW + timedelta(minutes=25)
    read = remember(conn, "uid-2", LogEvidence(lines=moved, source="ray-dashboard"), later)
    assert read.unchanged_since == later and _judge(read, later).state.value == "active"
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)  # nothing listens on port 1
    assert remember(down, "uid-3", LogEvidence(lines=HUNG), later).unchanged_since is None


def test_a_future_or_malformed_first_sighting_is_ignored_counted_and_the_stall_still_found(
        redis_url: str) -> None:
    """SPEC §11: the record is read back from Redis. One dated after the caller's clock (which would
    hold off the stall until then) or not a record at all is ignored and counted, replaced by this
    read's: 25 minutes later the unchanged log is a stall."""
    import json

    from workers.collect.logs.seen import KEY, _digest
    from workers.plumbing.metrics import UNTRUSTED_DROPPED

    conn = redis.Redis.from_url(redis_url)
    logs = LogEvidence(lines=HUNG, source="ray-dashboard")
    forged = [json.dumps({"digest": _digest(logs), "at": (NOW + timedelta(days=365)).isoformat()}),
              json.dumps({"digest": _digest(logs), "at": "yesterday"}),
              json.dumps({"digest": _digest(logs), "at": NOW.replace(tzinfo=None).isoformat()}),
              json.dumps(["not", "a", "record"]), b"\xff\xfe"]
    for n, record in enumerate(forged):
        uid = f"uid-forged-{n}"
        conn.set(KEY + uid, record)
        before = UNTRUSTED_DROPPED.labels("log_seen")._value.get()
        first = remember(conn, uid, logs, NOW)
        assert first.unchanged_since is None, record  # as on a first read: the time is unknown
        assert UNTRUSTED_DROPPED.labels("log_seen")._value.get() == before + 1
        later = NOW + timedelta(minutes=25)
        second = remember(conn, uid, logs, later)
        assert second.unchanged_since == NOW
        check = _judge(second, later)
        assert (check.state.value, check.reason) == ("warning", "progress.stalled"), record
