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

from typing import Any

from pydantic import BaseModel, Field

from .linkage import QUEUE_LABEL, labels, meta

GPU = "nvidia.com/gpu"
NO_START_TIME = "unknown: Kueue does not know when the running workloads end"


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
    start_time: str = NO_START_TIME
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


__all__ = ["NO_START_TIME", "QueuePosition", "awaits_admission", "queue_position", "workload_gpus"]
