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
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from workers.diagnosis.linkage import RunObjects, meta
from workers.diagnosis.models import Diagnosis, PhaseState
from workers.diagnosis.podfacts import all_containers, condition, is_scheduled, pod_created
from workers.diagnosis.timeutil import parse_time

POOL_LABELS = ("kubernetes.azure.com/agentpool", "cloud.google.com/gke-nodepool",
               "node.kubernetes.io/instance-type")


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


def _reason(d: Diagnosis) -> tuple[str, int] | None:
    """(reason, which threshold) of the answer, or None when it is no stall candidate."""
    first = d.first_incomplete
    if first is None:
        return None
    phase = d.phase(first)
    state, summary = phase.state, phase.summary
    if first == "Kueue admission":
        if state is PhaseState.PENDING and "reason=NoWorkload" not in summary:
            return "waiting-for-quota", 0
        if state is PhaseState.ACTIVE:
            return "admission-check", 1
        if state is PhaseState.WARNING:
            reason = re.search(r"reason=(\w+)", summary)
            return f"admission-{(reason.group(1) if reason else 'warning').lower()}", -1
        return None
    if state is not PhaseState.WARNING and not (first == "Ready" and state is PhaseState.ACTIVE):
        return None
    cause = first
    if first == "RayCluster":
        cause = next((n for n in ("Pod scheduling", "DRA allocation", "Image pull", "Init containers",
                                  "Container start", "Ready") if f": {n}: " in summary), "RayCluster")
    return {
        "Pod scheduling": ("unschedulable", 2), "DRA allocation": ("dra-unallocated", 3),
        "Image pull": ("image-pull", 4), "Init containers": ("crash", 5), "Container start": ("crash", 5),
        "Ready": ("not-ready", 6), "RayCluster": ("raycluster", 6), "GPU/node health": ("node-fault", -1),
        "Runtime progress": ("no-progress", -1), "RayJob status": ("rayjob-failed", -1),
        "Submitted": ("invalid-spec", -1),
    }.get(cause)


def _group(d: Diagnosis, objs: RunObjects, reason: str, queue_to_cluster: dict[str, str]
           ) -> tuple[str | None, str]:
    if reason == "waiting-for-quota":
        queues = {(wl.get("spec") or {}).get("queueName") for wl in objs.workloads} - {None}
        lq = sorted(queues)[0] if queues else None
        cq = queue_to_cluster.get(lq or "") or (f"LocalQueue {lq}" if lq else None)
        return (f"quota:{cq}", f"waiting for quota in ClusterQueue {cq}") if cq else (None, "")
    if reason == "unschedulable":
        phase = d.phase(d.first_incomplete or "")
        message = re.sub(r"\d+", "N", phase.summary.split(": ", 1)[-1])[:200]
        pools = {(p.get("spec") or {}).get("nodeSelector", {}).get(k) for p in objs.pods for k in POOL_LABELS}
        pool = ",".join(sorted(x for x in pools if x)) or "any pool"
        return f"unschedulable:{pool}:{message}", f"unschedulable on {pool}"
    if reason == "image-pull":
        images = sorted({c.image for p in objs.pods for c in all_containers(p)
                         if c.waiting_reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")})
        return (f"image:{images[0]}", f"pulling {images[0]} fails") if images else (None, "")
    return None, ""


def classify(d: Diagnosis, objs: RunObjects, now: datetime, thresholds: Thresholds,
             queue_to_cluster: dict[str, str] | None = None) -> Stall | None:
    """The run's stall verdict; None for runs that are healthy, finished or not found."""
    if objs.run is None or d.unreachable_from is not None:
        return None
    found = _reason(d)
    if found is None:
        return None
    reason, which = found
    minutes = [thresholds.quota, thresholds.admission_check, thresholds.unschedulable, thresholds.dra,
               thresholds.image_pull, thresholds.crash, thresholds.not_ready]
    limit = 0 if which < 0 else minutes[which]
    if reason.startswith(("waiting-for-quota", "admission")):
        since = _workload_since(objs)
    elif reason in ("node-fault", "no-progress", "rayjob-failed", "invalid-spec"):
        since = None
    else:
        since = _pod_since(objs, reason) or parse_time(meta(objs.run).get("creationTimestamp"))
    stalled = limit == 0 or (since is not None and now - since >= timedelta(minutes=limit))
    group, label = _group(d, objs, reason, queue_to_cluster or {})
    return Stall(run=objs.name, namespace=objs.namespace or "", kind=objs.kind or "",
                 phase=d.first_incomplete or "", layer=d.layer, reason=reason, since=since, stalled=stalled,
                 group=group, group_label=label)


def key_digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


__all__ = ["Stall", "Thresholds", "classify", "key_digest"]
