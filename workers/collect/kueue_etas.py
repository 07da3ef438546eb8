"""The holders' training ETAs a waiting run's start estimate may use, live (issue 35, SPEC §5b).

SPEC §5b: a holder of the run's flavour releases its quota by its time limit (an upper bound) or,
"where the user can read that run's log", at taubot's own training ETA (§5a; an estimate). Reading
every holder's log during a waiting run's status would cost two rounds more (its pods, then its
log) and a request per holder; so taubot keeps the ETA each of its own reads computed — a status,
a watch's tick — per run (its uid), in Redis for `FRESH_SECONDS`, and a waiting run's status takes a
holder's ETA from there:

* only a fresh one (computed in the last `FRESH_SECONDS`, ending after now: an ETA already past
  with the run still holding its quota was wrong, and says nothing);
* only where the user may read that run's log: `get pods/log` in the holder's namespace, asked as
  the user (a SelfSubjectAccessReview; the run's own namespace's answer is the status's own log
  review, `LogAccess`), at most `MAX_NAMESPACES` namespaces — one request each, sent beside the GETs
  of the Workloads ahead (round 3), and only when some holder has a record;
* read back as untrusted input (SPEC §11): a record that does not validate, or is dated after now,
  is ignored and counted (``taubot_untrusted_state_dropped_total{kind="eta"}``).

A holder without a readable ETA is what it was before: a time limit, or an `unknown` line. So a lost,
stale or forged record costs an earlier estimate, never a time without a basis: the record only
says when taubot's own read expected that run to end, and the user could read the same log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError

from workers.diagnosis.linkage import labels, meta
from workers.kube.reader import KubeReader, ReadError
from workers.plumbing.metrics import UNTRUSTED_DROPPED
from workers.records import keys

log = logging.getLogger(__name__)

FRESH_SECONDS = 3600  # an ETA computed longer ago than this is not used (nor kept)
MAX_NAMESPACES = 8  # holders' namespaces whose `pods/log` access is reviewed for one status
MAX_LOOKUPS = 500  # holders whose record is looked up (a page of the holders' list)
JOB_UID = "kueue.x-k8s.io/job-uid"  # Kueue's label on a Workload: the uid of the job it was made for


class EtaStore(Protocol):
    """What is needed of Redis (a `redis.Redis`)."""

    def get(self, name: str) -> bytes | str | None: ...

    def set(self, name: str, value: str, ex: int | None = None) -> object: ...


class EtaRecord(BaseModel):
    """A run's training ETA as one of taubot's reads computed it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    end: AwareDatetime  # the expected end
    at: AwareDatetime  # when it was computed


@dataclass
class EtaRead:
    """The holders' ETAs this user may use (Workload namespace/name → end), and what could not be
    decided (a review that failed), for the estimate's `unknown` lines."""

    etas: dict[str, datetime] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)


def remember_eta(store: EtaStore | None, run_uid: str | None, end: datetime | None, now: datetime) -> None:
    """Keep the ETA a read computed for the run, for the start estimates of runs waiting behind it."""
    if store is None or not run_uid or end is None or end <= now:
        return
    try:
        store.set(keys.run_eta_key(run_uid), EtaRecord(end=end, at=now).model_dump_json(), ex=FRESH_SECONDS)
    except Exception as exc:  # noqa: BLE001 - Redis down: runs waiting behind it get no earlier estimate
        log.warning("ETA of %s not kept: %s", run_uid, type(exc).__name__)


def _recall(raw: bytes | str | None, now: datetime) -> datetime | None:
    if not raw:
        return None
    try:
        record = EtaRecord.model_validate_json(raw)
        if record.at > now:
            raise ValueError("dated after now")
    except (ValidationError, ValueError) as exc:
        log.warning("ignored a malformed ETA record (%s)", type(exc).__name__)
        UNTRUSTED_DROPPED.labels("eta").inc()
        return None
    fresh = now - record.at <= timedelta(seconds=FRESH_SECONDS)
    return record.end if fresh and record.end > now else None


def recorded(store: EtaStore | None, holders: list[dict], now: datetime) -> dict[str, tuple[str, datetime]]:
    """Workload namespace/name → (its namespace, the fresh ETA of its job) for the holders that have one."""
    if store is None:
        return {}
    wanted = [(w, uid) for w in holders[:MAX_LOOKUPS] if (uid := labels(w).get(JOB_UID))]
    if not wanted:
        return {}
    names = [keys.run_eta_key(uid) for _, uid in wanted]
    try:
        mget = getattr(store, "mget", None)  # one round trip to Redis when it can
        raws = list(mget(names)) if callable(mget) else [store.get(n) for n in names]
    except Exception as exc:  # noqa: BLE001 - Redis down: no holder's ETA, nothing else lost
        log.warning("holders' ETAs unavailable: %s", type(exc).__name__)
        return {}
    out: dict[str, tuple[str, datetime]] = {}
    for (wl, _uid), raw in zip(wanted, raws, strict=True):
        end = _recall(raw, now)
        if end is not None:
            md = meta(wl)
            out[f"{md.get('namespace')}/{md.get('name')}"] = (str(md.get("namespace") or ""), end)
    return out


LogReview = Callable[[], Awaitable[bool | ReadError]]


async def readable_etas(reader: KubeReader, store: EtaStore | None, holders: list[dict], now: datetime, *,
                        namespace: str, own_review: LogReview | None = None) -> EtaRead:
    """The recorded ETAs of ``holders`` that this user may use: those of runs whose log the user may
    read (``own_review`` answers for ``namespace``, the status's own; others are asked here, at once)."""
    found = recorded(store, holders, now)
    if not found:
        return EtaRead()
    spaces = sorted({ns for ns, _ in found.values()}, key=lambda ns: (ns != namespace, ns))
    asked = spaces[:MAX_NAMESPACES]
    reviews: list[Awaitable[bool | ReadError]] = [
        own_review() if ns == namespace and own_review is not None else
        reader.access_review("get", "pods", "", namespace=ns, subresource="log") for ns in asked]
    answers = dict(zip(asked, await asyncio.gather(*reviews), strict=True))
    read = EtaRead()
    for key, (ns, end) in found.items():
        if answers.get(ns) is True:
            read.etas[key] = end
    for ns, answer in answers.items():
        if isinstance(answer, ReadError):
            read.unknown.append(f"whether you may read the logs in {ns} (their runs' ETAs): access review "
                                f"{answer.describe()}")
    if len(spaces) > MAX_NAMESPACES:
        read.unknown.append(f"the ETAs of runs in {len(spaces) - MAX_NAMESPACES} more namespaces were not "
                            "reviewed")
    return read


__all__ = ["FRESH_SECONDS", "MAX_NAMESPACES", "EtaRead", "EtaRecord", "EtaStore", "readable_etas", "recorded",
           "remember_eta"]
