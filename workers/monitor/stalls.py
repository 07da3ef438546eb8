"""When a run is stalled, and with whom it shares the cause: pure, from the objects and `now`.

Stalled = the answer stayed on the same phase or check with the same reason
past that reason's threshold (SPEC §7b). The moment a run entered its state
is read from the objects themselves — condition transition times, pod
creation, the Workload's own timestamps — so a restarted monitor reaches
the same verdict without any history of its own (the lesson of Botkube's
resync spam and Robusta's in-memory rate limits, shared/reference/stalls.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from workers.diagnosis.linkage import RunObjects, meta
from workers.diagnosis.models import Diagnosis, PhaseResult
from workers.diagnosis.podfacts import condition, is_scheduled, pod_created
from workers.diagnosis.registry import stall_rule
from workers.diagnosis.timeutil import parse_time


@dataclass(frozen=True)
class Thresholds:
    """Minutes per reason (settings `TAUBOT_STALL_*_MINUTES`)."""

    quota: int = 30
    admission_check: int = 30
    unschedulable: int = 10
    dra: int = 5
    image_pull: int = 5
    crash: int = 5
    not_ready: int = 15
    gated: int = 30
    pods_ready_wait: int = 45

    @classmethod
    def from_settings(cls, settings: object) -> Thresholds:
        return cls(**{f: getattr(settings, f"stall_{f}_minutes") for f in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Stall:
    run: str
    namespace: str
    kind: str
    phase: str
    layer: int
    reason: str
    since: datetime | None
    stalled: bool
    group: str | None  # a shared cause's key, or None
    group_label: str = ""


def _first_time(values: list[datetime | None]) -> datetime | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _workload_since(objs: RunObjects) -> datetime | None:
    times = []
    for wl in objs.workloads:
        qr = condition(wl, "QuotaReserved")
        times.append(parse_time((qr or {}).get("lastTransitionTime"))
                     or parse_time(meta(wl).get("creationTimestamp")))
    return _first_time(times) or parse_time(meta(objs.run or {}).get("creationTimestamp"))


def _pod_since(objs: RunObjects, reason: str) -> datetime | None:
    times = []
    for pod in objs.pods:
        if reason == "unschedulable":
            cond = condition(pod, "PodScheduled")
            if cond and cond.get("status") == "False":
                times.append(parse_time(cond.get("lastTransitionTime")) or pod_created(pod))
            continue
        ready = condition(pod, "Ready")
        if ready and ready.get("status") == "False":
            times.append(parse_time(ready.get("lastTransitionTime")) or pod_created(pod))
        elif not is_scheduled(pod) or ready is None:
            times.append(pod_created(pod))
    return _first_time(times)


def _answer(d: Diagnosis) -> PhaseResult | None:
    return next((p for p in [*d.phases, *d.checks] if p.name == d.first_incomplete), None)


def _since(objs: RunObjects, reason: str) -> datetime | None:
    """When the run entered its state, from the objects' own times (none for at-once rules)."""
    area = reason.partition(".")[0]
    if area in ("quota", "queue"):
        return _workload_since(objs)
    return (_pod_since(objs, "unschedulable" if area == "sched" else reason)
            or parse_time(meta(objs.run or {}).get("creationTimestamp")))


def _group(reason: str, cause: str | None) -> tuple[str | None, str]:
    """The shared-cause key and its header: one queue, one pool and message, one image (SPEC §7b).
    Built from the engine's reason and cause codes only, so a reworded summary changes nothing."""
    if not cause:
        return None, ""
    area = reason.partition(".")[0]
    if reason == "quota.waiting":
        return f"quota:{cause}", f"waiting for quota in {cause}"
    if area == "sched":
        pool = cause.split(": ", 1)[0]
        return f"{reason}:{cause}", f"unschedulable on {pool}"
    if area == "image":
        return f"{reason}:{cause}", f"pulling {cause} fails"
    return None, ""


def classify(d: Diagnosis, objs: RunObjects, now: datetime, thresholds: Thresholds) -> Stall | None:
    """The run's stall verdict; None for runs that are healthy, finished or not found.

    Which results can stall, and after how long, is the registry's `STALL_RULES`, keyed by
    the answer's reason code; a run's group is keyed by its reason and cause codes."""
    if objs.run is None or d.unreachable_from is not None:
        return None
    answer = _answer(d)
    if answer is None:
        return None
    rule = stall_rule(answer.reason)
    if rule is None or answer.state.value not in rule.states:
        return None
    limit = getattr(thresholds, rule.setting) if rule.setting else 0
    since = _since(objs, answer.reason) if rule.setting else None
    stalled = limit == 0 or (since is not None and now - since >= timedelta(minutes=limit))
    group, label = _group(answer.reason, answer.cause)
    return Stall(run=objs.name, namespace=objs.namespace or "", kind=objs.kind or "",
                 phase=d.first_incomplete or "", layer=d.layer, reason=answer.reason, since=since,
                 stalled=stalled, group=group, group_label=label)


def key_digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


__all__ = ["Stall", "Thresholds", "classify", "key_digest"]
