"""The grouped post's next start (issue 35, SPEC §7b): "6 runs waiting on h100-shared; the next
start ≈ 14:20 UTC", from the monitor's own cache.

The monitor reads as the bot, in the namespaces the descriptors name, and caches the cluster's
ClusterQueues (`cache.CLUSTER_KINDS`). A group of runs waiting for quota in one ClusterQueue gets the
soonest start the engine gives one of them (`start_estimate.next_starts`) from the ClusterQueue, the
cached Workloads and LocalQueues of every watched namespace, and the ETAs of the running runs the
monitor judged: quota held in namespaces it does not watch is an unknown line, a pending Workload it
cannot see makes no time at all. Nothing here reads the API; nothing is said without a basis.

Each ClusterQueue is estimated once per sweep, for its first `GROUP_ESTIMATES` pending Workloads
(one pool, one walk each), whatever the number of groups and workspaces waiting on it: a 5,000-run
sweep must stay within its CPU (SPEC §7b). A group whose runs are all further back says no time.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from workers.diagnosis.linkage import RunObjects, meta
from workers.diagnosis.queue_position import StartEstimate
from workers.diagnosis.start_estimate import next_starts, soonest

from .cache import Cache


class NextStarts:
    """One sweep's next starts, computed from the cache when first asked, once per ClusterQueue."""

    def __init__(self, cache: Cache, now: datetime, etas: Mapping[str, datetime] | None = None) -> None:
        self.cache, self.now, self.etas = cache, now, etas
        self._read: tuple[dict[str, dict], list[dict], dict[tuple[str, str], str], list[dict]] | None = None
        self._by_queue: dict[str, dict[str, StartEstimate] | None] = {}

    def _objects(self) -> tuple[dict[str, dict], list[dict], dict[tuple[str, str], str], list[dict]]:
        if self._read is None:
            queues = {meta(q).get("name") or "": q for q in self.cache.cluster_objects("ClusterQueue")}
            local_queues = self.cache.of_kind("LocalQueue") if queues else []
            feeds = {(meta(q).get("namespace") or "", meta(q).get("name") or ""): cq for q in local_queues
                     if isinstance(cq := (q.get("spec") or {}).get("clusterQueue"), str)}
            self._read = (queues, local_queues, feeds, self.cache.of_kind("Workload") if queues else [])
        return self._read

    def of_group(self, runs: list[RunObjects]) -> StartEstimate | None:
        """The next start of the runs of one group, when they all wait in one ClusterQueue the cache
        holds and one of them has a start with a basis; else None (the post says no time)."""
        queues, local_queues, feeds, workloads = self._objects()
        members = [w for objs in runs for w in objs.workloads]
        named = {feeds.get((meta(w).get("namespace") or "", (w.get("spec") or {}).get("queueName") or ""))
                 for w in members}
        name = named.pop() if len(named) == 1 else None
        if name is None or name not in queues:
            return None
        if name not in self._by_queue:
            self._by_queue[name] = next_starts(queues[name], workloads=workloads, local_queues=local_queues,
                                               cluster_queues=list(queues.values()), now=self.now,
                                               etas=self.etas)
        starts = self._by_queue[name]
        if starts is None:
            return None
        return soonest(starts.get(f"{meta(w).get('namespace')}/{meta(w).get('name')}") for w in members)


__all__ = ["NextStarts"]
