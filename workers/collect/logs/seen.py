"""When an untimed log was first seen as it is now, remembered across reads (SPEC §11).

Ray's Jobs API gives no per-line time, so one read cannot tell an hour-old
last step from a fresh one. Each read of an untimed log records a digest of its
tail and when that tail was first seen, per run (its uid), in Redis — shared by
statuses, watches and the monitor. A later read with the same tail knows the log
has not moved since then, so "no new progress for 20 minutes" holds across
reads; a first read knows nothing and says so (the engine then reports the time
as unknown, never as recent).

The record is read back from Redis, so it is untrusted (SPEC §11): one that is not a digest and a
timezone-aware ISO time is ignored and counted (``taubot_untrusted_state_dropped_total
{kind="log_seen"}``), and so is one dated after ``now`` (the caller's clock): either is replaced
by a record of this read, as if none had been found, so a hung log is still found stalled later.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import datetime
from typing import Protocol

from workers.diagnosis.models import LogEvidence
from workers.plumbing.metrics import UNTRUSTED_DROPPED
from workers.records import keys

log = logging.getLogger(__name__)

KEY = keys.LOG_SEEN
TTL_SECONDS = 2 * 24 * 3600
TAIL = 20  # lines digested: a hung process's log keeps exactly these


class SeenStore(Protocol):
    """What is needed of Redis (a `redis.Redis`)."""

    def get(self, name: str) -> bytes | str | None: ...

    def set(self, name: str, value: str, ex: int | None = None) -> object: ...


def _digest(logs: LogEvidence) -> str:
    tail = "\n".join(text for _, text in logs.lines[-TAIL:])
    return hashlib.sha256(f"{len(logs.lines)}\0{tail}".encode()).hexdigest()[:32]


def _record(raw: bytes | str | None, now: datetime) -> tuple[str, datetime] | None:
    """The stored (digest, first seen) if it is well formed and not after ``now``; else None
    (counted, unless there was no record)."""
    if not raw:
        return None
    try:
        record = json.loads(raw)
        digest, at = record["digest"], datetime.fromisoformat(record["at"])
        if not isinstance(digest, str) or (at.tzinfo is None) != (now.tzinfo is None) or at > now:
            raise ValueError("not a first sighting before now")
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("ignored a malformed log-seen record (%s)", type(exc).__name__)
        UNTRUSTED_DROPPED.labels("log_seen").inc()
        return None
    return digest, at


def remember(store: SeenStore | None, run_uid: str | None, logs: LogEvidence, now: datetime) -> LogEvidence:
    """``logs`` with `unchanged_since` from the record of earlier reads (and the record updated);
    timed logs, unread logs and a store that fails are passed through unchanged."""
    untimed = logs.lines and all(t is None for t, _ in logs.lines[-TAIL:])
    if store is None or not run_uid or logs.unavailable is not None or not untimed:
        return logs
    key, digest = keys.log_seen_key(run_uid), _digest(logs)
    try:
        earlier = _record(store.get(key), now)
        if earlier and earlier[0] == digest:
            return logs.model_copy(update={"unchanged_since": earlier[1]})
        store.set(key, json.dumps({"digest": digest, "at": now.isoformat()}), ex=TTL_SECONDS)
    except Exception as exc:  # noqa: BLE001 - Redis down: the time stays unknown
        log.warning("log-seen record for %s unavailable: %s", run_uid, type(exc).__name__)
        return logs
    # The tail changed since an earlier read: the log moved between that read and now.
    return logs.model_copy(update={"unchanged_since": now}) if earlier else logs


__all__ = ["SeenStore", "remember"]
