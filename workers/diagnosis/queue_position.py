"""A waiting run's place in its queue, from Kueue's visibility API (layer 4): pure.

Kueue answers "when will it start?" only partly: its on-demand visibility API
(`visibility.kueue.x-k8s.io/v1beta1`, `…/localqueues/<lq>/pendingworkloads`)
lists the pending Workloads of a queue with their 0-based
`positionInClusterQueue` and `positionInLocalQueue` (kueue
apis/visibility/v1beta1/types.go). It says nothing about what the Workloads
ahead ask for, nor when the running ones end, so this module states only
what the answers it is given prove: positions, how many are ahead, the GPUs
that the ones ahead ask for when their Workloads could be read (same
namespace), and never a start time — the running workloads' expected ends are
not known to Kueue.

`collect/queue.py` makes the reads (under the user's impersonation); this
module turns them into `QueuePosition` facts; the renderer words them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from .linkage import QUEUE_LABEL, labels, meta

GPU = "nvidia.com/gpu"
NO_START_TIME = "unknown: Kueue does not know when the running workloads end"
CAVEAT = "preemption, fair sharing and borrowing can change it"


class StartEstimate(BaseModel):
    """`queue_position.start_estimate` (SPEC §5b): ISO 8601 times or None, each with its basis
    (computed in start_estimate.py)."""

    earliest: str | None = Field(default=None, description="from ETAs or quota free now; None otherwise")
    latest: str | None = Field(default=None, description="from the holders' time limits (upper bounds)")
    basis: list[str] = Field(default_factory=list, description="one line per release used")
    unknown: list[str] = Field(default_factory=list, description="one line per holder without a time "
                               "limit or a readable ETA (and what else the answer could not see)")
    earliest_because: str | None = Field(default=None, description="the card's words for `earliest`")
    latest_because: str | None = None
    caveat: str = CAVEAT
    card: str = Field(default="", description="the card's first-screen words (estimate_text, short)")


class FlavorQuota(BaseModel):
    """One flavour's quota for one resource in the ClusterQueue: nominal against reserved."""

    flavor: str
    resource: str
    nominal: float = Field(description="spec.resourceGroups[].flavors[].resources[].nominalQuota")
    reserved: float = Field(description="status.flavorsReservation total (flavorsUsage when absent): "
                            "quota held by the Workloads that reserved it, borrowed included")
    borrowed: float = 0.0

    @property
    def free(self) -> float:
        """Nominal quota no Workload holds; never below 0 (a ClusterQueue may borrow past it)."""
        return max(self.nominal - self.reserved, 0.0)


class QueuePosition(BaseModel):
    """Where the run waits, 1-based; every number is None when it was not read (see `unavailable`)."""

    local_queue: str
    cluster_queue: str | None = None
    position_in_cluster_queue: int | None = Field(default=None, description="1 = next to be admitted")
    position_in_local_queue: int | None = None
    pending_in_local_queue: int | None = Field(default=None, description="pending Workloads the read listed")
    ahead_in_local_queue: list[str] = Field(default_factory=list, description="their Workloads, first first")
    gpus_ahead: int | None = Field(default=None, description="nvidia.com/gpu the ones ahead in the "
                                   "LocalQueue ask for; None when any of them could not be read")
    ahead_elsewhere: int | None = Field(default=None, description="ahead in the ClusterQueue from other "
                                        "LocalQueues (their requests are not visible to the user)")
    pending_in_cluster_queue: int | None = Field(
        default=None, description="pending Workloads in the ClusterQueue's own list (None: see "
        "cluster_queue_unavailable)")
    gpus_ahead_in_cluster_queue: int | None = Field(default=None, description="nvidia.com/gpu the ones "
                                                    "ahead in the ClusterQueue ask for, of those readable")
    unreadable_ahead: int = Field(default=0, description="ahead in the ClusterQueue whose Workloads the "
                                  "user may not read (other namespaces): gpus_ahead_in_cluster_queue is "
                                  "then a lower bound")
    cluster_queue_unavailable: str | None = Field(default=None, description="why the ClusterQueue's "
                                                  "pending list was not read (403, not served)")
    free_quota: list[FlavorQuota] = Field(default_factory=list, description="the run's resource in the "
                                          "flavours it can use")
    free_quota_unavailable: str | None = Field(default=None, description="why there is no free quota")
    cohort: str | None = Field(default=None, description="the ClusterQueue's cohort: it may borrow more")
    start_time: str = NO_START_TIME
    start_estimate: StartEstimate | None = Field(default=None, description="SPEC §5b: when it may start, "
                                                 "from the holders' time limits and ETAs; None: not computed")
    never_fits: str | None = Field(default=None, description="why the run can never be admitted or placed, "
                                   "with the numbers; None when it can")
    never_fits_owner: str | None = Field(default=None, description="queue-owner (the queue's limit) or "
                                         "researcher (a pod larger than any node of the flavour)")
    node_size: str | None = Field(
        default=None, description="a pod's size against the flavour's largest node when it was not checked: "
        "`unavailable: permission denied (list nodes)`, `not checked (…)`; None when checked (never_fits "
        "then says whether a pod is too big)")
    unavailable: str | None = Field(default=None, description="why there is no position (403, not "
                                    "served, not listed); the other fields are then empty")


def awaits_admission(run: dict) -> bool:
    """Kueue keeps a run it has not admitted suspended (`spec.suspend: true`, Jobs and RayJobs
    alike): only such a run can have a queue position, so only its status pays for the read."""
    return bool(labels(run).get(QUEUE_LABEL)) and (run.get("spec") or {}).get("suspend") is True


def workload_gpus(wl: dict) -> int:
    """GPUs a Workload asks for: each pod set's count × its containers' `nvidia.com/gpu`
    (requests, else limits — the device plugin requires them equal)."""
    total = 0
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        per_pod = 0
        for c in ((ps.get("template") or {}).get("spec") or {}).get("containers") or []:
            res = c.get("resources") or {}
            qty = (res.get("requests") or {}).get(GPU, (res.get("limits") or {}).get(GPU, 0))
            try:
                per_pod += int(str(qty))
            except ValueError:
                continue
        total += per_pod * int(ps.get("count") or 1)
    return total


def _mine(item: dict, run_uid: str, workload_names: set[str]) -> bool:
    md = meta(item)
    return md.get("name") in workload_names or any(
        ref.get("uid") == run_uid for ref in md.get("ownerReferences") or [])


def queue_position(local_queue: str, summary: dict[str, Any] | None, *, run_uid: str,
                   workload_names: set[str], cluster_queue: str | None = None,
                   namespace_workloads: list[dict] | None = None,
                   unavailable: str | None = None) -> QueuePosition:
    """The run's position from a LocalQueue's `PendingWorkloadsSummary`.

    ``namespace_workloads`` are the Workloads of the run's namespace when they could be listed
    (for what the ones ahead ask for); ``unavailable`` is why the summary could not be read.
    """
    if summary is None or unavailable:
        return QueuePosition(local_queue=local_queue, cluster_queue=cluster_queue,
                             unavailable=unavailable or "not read")
    items = [i for i in summary.get("items") or [] if isinstance(i, dict)]
    mine = next((i for i in items if _mine(i, run_uid, workload_names)), None)
    if mine is None:
        return QueuePosition(local_queue=local_queue, cluster_queue=cluster_queue,
                             pending_in_local_queue=len(items),
                             unavailable=f"the run's Workload is not among the {len(items)} pending "
                             f"in LocalQueue {local_queue} (Kueue has not queued it yet)")
    in_cq = int(mine.get("positionInClusterQueue") or 0)
    in_lq = int(mine.get("positionInLocalQueue") or 0)
    ahead = sorted((i for i in items if int(i.get("positionInLocalQueue") or 0) < in_lq),
                   key=lambda i: int(i.get("positionInLocalQueue") or 0))
    names = [meta(i).get("name") or "?" for i in ahead]
    gpus: int | None = None
    if namespace_workloads is not None:
        by_name = {meta(w).get("name"): w for w in namespace_workloads}
        if all(n in by_name for n in names):
            gpus = sum(workload_gpus(by_name[n]) for n in names)
    return QueuePosition(
        local_queue=local_queue, cluster_queue=cluster_queue,
        position_in_cluster_queue=in_cq + 1, position_in_local_queue=in_lq + 1,
        pending_in_local_queue=len(items), ahead_in_local_queue=names, gpus_ahead=gpus,
        ahead_elsewhere=max(in_cq - in_lq, 0),
    )


def workload_key(item: dict) -> tuple[str, str]:
    """(namespace, name) of a Workload or of a visibility list's PendingWorkload."""
    md = meta(item)
    return md.get("namespace") or "", md.get("name") or ""


def in_cluster_queue(qp: QueuePosition, summary: dict[str, Any], *, mine: tuple[str, str],
                     known: Mapping[tuple[str, str], dict | None]) -> QueuePosition:
    """Add the ClusterQueue's own `PendingWorkloadsSummary`: how many wait in all and what every
    one ahead asks for. ``known`` holds the Workloads read (None for one the user may not read):
    the GPUs of those are a lower bound, and how many were unreadable is said, never guessed."""
    if qp.unavailable:
        return qp
    items = [i for i in summary.get("items") or [] if isinstance(i, dict)]
    me = next((i for i in items if workload_key(i) == mine), None)
    if me is None:
        return qp.model_copy(update={"cluster_queue_unavailable": "the run's Workload is not in the "
                                     "ClusterQueue's pending list (it changed between the two reads)"})
    position = int(me.get("positionInClusterQueue") or 0)
    ahead = [workload_key(i) for i in items if int(i.get("positionInClusterQueue") or 0) < position]
    readable = [known[k] for k in ahead if known.get(k) is not None]
    return qp.model_copy(update={
        "position_in_cluster_queue": position + 1, "pending_in_cluster_queue": len(items),
        "gpus_ahead_in_cluster_queue": sum(workload_gpus(w) for w in readable if w is not None),
        "unreadable_ahead": len(ahead) - len(readable),
    })


# Kueue's flavorassigner (pkg/scheduler/flavorassigner/flavorassigner.go): the resource and the
# flavour a waiting Workload could not fit, e.g. "insufficient unused quota for nvidia.com/gpu in
# flavor h100, 8 more needed".
_WANTED = re.compile(r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>[^\s,]+)")
_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3, "k": 1e3, "M": 1e6,
           "G": 1e9, "T": 1e12}
_QUANTITY = re.compile(r"^(?P<n>[0-9.]+)(?P<s>Ki|Mi|Gi|Ti|m|k|M|G|T)?$")


def quantity(value: object) -> float | None:
    """A Kubernetes quantity (`64`, `"8"`, `500m`, `19531250Ki`) as a number; None when it is not one."""
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return None
    try:
        return float(match.group("n")) * _SUFFIX.get(match.group("s") or "", 1)
    except ValueError:
        return None


def _wanted(run_workloads: list[dict]) -> tuple[set[str], set[str]]:
    """(resources, flavours) the run's Workload could not fit, from its QuotaReserved message; the
    resource is nvidia.com/gpu when the message names none and the Workload asks for GPUs."""
    resources: set[str] = set()
    flavors: set[str] = set()
    for wl in run_workloads:
        for cond in (wl.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "QuotaReserved":
                for match in _WANTED.finditer(cond.get("message") or ""):
                    resources.add(match.group("resource"))
                    flavors.add(match.group("flavor"))
    if not resources and any(workload_gpus(wl) for wl in run_workloads):
        resources.add(GPU)
    return resources, flavors


def free_quota(cluster_queue: dict, run_workloads: list[dict]) -> tuple[list[FlavorQuota], str | None]:
    """The ClusterQueue's unreserved nominal quota for the run's resource in each flavour it may
    use (the one Kueue's message names, else every flavour of the resource group covering it),
    with why there is none. Reservation is what Kueue's scheduler counts against nominal quota."""
    resources, flavors = _wanted(run_workloads)
    if not resources:
        return [], "the run's Workload names no resource it waits for"
    status = cluster_queue.get("status") or {}
    held: dict[tuple[str, str], tuple[float, float]] = {}
    for fl in status.get("flavorsReservation") or status.get("flavorsUsage") or []:
        for res in fl.get("resources") or []:
            held[(fl.get("name") or "", res.get("name") or "")] = (
                quantity(res.get("total", 0)) or 0.0, quantity(res.get("borrowed", 0)) or 0.0)
    out: list[FlavorQuota] = []
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        for fl in group.get("flavors") or []:
            name = fl.get("name") or ""
            if flavors and name not in flavors:
                continue
            for res in fl.get("resources") or []:
                rname = res.get("name") or ""
                nominal = quantity(res.get("nominalQuota", 0))
                if rname in resources and nominal is not None:
                    reserved, borrowed = held.get((name, rname), (0.0, 0.0))
                    out.append(FlavorQuota(flavor=name, resource=rname, nominal=nominal, reserved=reserved,
                                           borrowed=borrowed))
    if not out:
        return [], f"the ClusterQueue has no quota for {', '.join(sorted(resources))}"
    return out, None


def cohort_of(cluster_queue: dict) -> str | None:
    """`spec.cohortName` (v1beta2) or `spec.cohort` (v1beta1): the queues it may borrow from."""
    spec = cluster_queue.get("spec") or {}
    return spec.get("cohortName") or spec.get("cohort") or None


__all__ = ["CAVEAT", "NO_START_TIME", "FlavorQuota", "QueuePosition", "StartEstimate", "awaits_admission",
           "cohort_of", "free_quota", "in_cluster_queue", "quantity", "queue_position", "workload_gpus",
           "workload_key"]
