"""The reads behind a waiting run's queue position (layer 4), under the user's impersonation.

Three concurrent requests, started with round 2 of a status (so a waiting-for-quota
status stays at two rounds) and only for a run Kueue keeps suspended:

* Kueue's visibility API for the LocalQueue
  (`GET /apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/<ns>/localqueues/<lq>/pendingworkloads`);
* the LocalQueue itself, for its ClusterQueue's name;
* the namespace's Workloads, for what the ones ahead in the LocalQueue ask for.

The ClusterQueue's own pending list and free quota would need its name first — a third
round — so they are not read by a status. A 403 or a Kueue that does not serve the
visibility API (before v0.9, or the `VisibilityOnDemand` gate off) is said as such.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from workers.diagnosis.queue_position import QueuePosition, queue_position
from workers.kube.reader import KubeReader, ReadError, resource_path

VISIBILITY = ("visibility.kueue.x-k8s.io", "v1beta1")
KUEUE = ("kueue.x-k8s.io", "v1beta2")
PAGE_SIZE = 2000


@dataclass
class QueueRead:
    """What the three reads returned (each an answer or a ReadError)."""

    local_queue: str
    summary: dict | ReadError
    queue_object: dict | ReadError
    workloads: list[dict] | ReadError


async def read_queue(reader: KubeReader, namespace: str, local_queue: str) -> QueueRead:
    """The LocalQueue's pending Workloads, the LocalQueue and the namespace's Workloads, at once."""
    summary, lq, workloads = await asyncio.gather(
        reader.get(resource_path(*VISIBILITY, "localqueues", namespace, local_queue, "pendingworkloads")),
        reader.get(resource_path(*KUEUE, "localqueues", namespace, local_queue)),
        reader.list(resource_path(*KUEUE, "workloads", namespace), limit=PAGE_SIZE),
    )
    return QueueRead(local_queue, summary, lq, workloads)


def _why(summary: ReadError, queue_object: dict | ReadError) -> str:
    if summary.kind == "forbidden":
        return (f"permission denied (get localqueues/pendingworkloads in {VISIBILITY[0]}); the "
                "queue owner grants it (Kueue's kueue-pending-workloads-lq-viewer ClusterRole)")
    if summary.kind == "not_found":
        if isinstance(queue_object, ReadError) and queue_object.kind == "not_found":
            return "the LocalQueue does not exist"
        return (f"this cluster's Kueue does not serve its visibility API ({'/'.join(VISIBILITY)}: "
                "Kueue before v0.9, or VisibilityOnDemand off)")
    return f"visibility API {summary.describe()}"


def position_from(read: QueueRead, *, run_uid: str, workload_names: set[str]) -> QueuePosition:
    """The reads as position facts; a failed read is `unavailable` with its reason, never a guess."""
    cq = None
    if isinstance(read.queue_object, dict):
        cq = (read.queue_object.get("spec") or {}).get("clusterQueue")
    if isinstance(read.summary, ReadError):
        return queue_position(read.local_queue, None, run_uid=run_uid, workload_names=workload_names,
                              cluster_queue=cq, unavailable=_why(read.summary, read.queue_object))
    workloads = read.workloads if isinstance(read.workloads, list) else None
    return queue_position(read.local_queue, read.summary, run_uid=run_uid, workload_names=workload_names,
                          cluster_queue=cq, namespace_workloads=workloads)


__all__ = ["QueueRead", "position_from", "read_queue"]
