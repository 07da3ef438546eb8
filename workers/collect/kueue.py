"""The reads behind a waiting run's queue position (layer 4), under the user's impersonation.

Started with round 2 of a status, and only for a run Kueue keeps suspended:

* round 2, concurrently: Kueue's visibility API for the LocalQueue
  (`GET /apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/<ns>/localqueues/<lq>/pendingworkloads`),
  the LocalQueue itself (for its ClusterQueue's name) and the namespace's Workloads (for what
  the ones ahead ask for; a watch's re-read lists none and GETs the ones ahead instead) — and,
  when the ClusterQueue's name is known already, its own reads (below);
* once the ClusterQueue's name is known: its own pending list
  (`…/clusterqueues/<cq>/pendingworkloads`, which Kueue's kueue-pending-workloads-cq-viewer
  ClusterRole grants), the ClusterQueue object (its nominal quota and what is reserved), the
  Workloads holding its quota (`kueue_forecast.read_holders`) and, for a status, the cluster's
  ResourceFlavors (`kueue_nodes.read_flavors`);
* then, together: when Workloads of other namespaces are ahead, a GET of each (at most
  `MAX_AHEAD_READS`), which a team's RBAC usually denies — then their requests are said to be
  unreadable, never guessed; the nodes of the run's flavour by its node labels, for never-fits by
  node size (`kueue_nodes.read_flavor_nodes`); and, when a holder has a recorded training ETA, the
  user's `pods/log` review in its namespace (`kueue_etas.readable_etas`).

The name is known early in two ways, so the whole answer takes three rounds at most (issue 35):
a hint (`ClusterQueueNames`, in the process and in Redis), which the user's own LocalQueue read
in round 2 must confirm; or, with no hint, the user's own read of the descriptor's LocalQueue
sent with round 1 (`read_local_queue`, passed in as ``local_queue_object``).

Kueue's visibility API is `v1beta1` since Kueue v0.9 (`v1beta2` too since v0.15) and was
`v1alpha1` in v0.6–v0.9 (removed in v0.10, kubernetes-sigs/kueue#3499): a 404 for the group
version (the API server's "the server could not find the requested resource", not a NotFound
of the queue) is asked again at `v1alpha1`. A 403 or a Kueue that serves neither is said as such.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel

from workers.collect.kueue_etas import EtaRead
from workers.collect.kueue_forecast import PreemptorRead, read_holders, with_estimate
from workers.collect.kueue_nodes import FlavorNodes, read_flavor_nodes, read_flavors
from workers.diagnosis.preemption import Preemption
from workers.diagnosis.queue_position import (
    QueuePosition,
    cohort_of,
    free_quota,
    in_cluster_queue,
    queue_position,
    workload_key,
)
from workers.kube.reader import KubeReader, ReadError, resource_path
from workers.plumbing.metrics import UNTRUSTED_DROPPED
from workers.records import keys

log = logging.getLogger(__name__)

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
# Newest first: v1beta1 is served by every Kueue since v0.9; v1alpha1 by v0.6–v0.9.
VISIBILITY_VERSIONS = ("v1beta1", "v1alpha1")
VISIBILITY = (VISIBILITY_GROUP, VISIBILITY_VERSIONS[0])
KUEUE = ("kueue.x-k8s.io", "v1beta2")
KUEUE_V1BETA1 = ("kueue.x-k8s.io", "v1beta1")
PAGE_SIZE = 2000
MAX_AHEAD_READS = 8  # GETs of Workloads ahead in other namespaces; past this they count as unread
# The API server's 404 for a path it does not serve (an APIService not registered), as opposed to
# a NotFound Status naming the object (`localqueue.kueue.x-k8s.io "x" not found`).
UNSERVED = "the server could not find the requested resource"


@dataclass
class QueueRead:
    """What the reads returned (each an answer or a ReadError; None: not read)."""

    local_queue: str
    summary: dict | ReadError
    queue_object: dict | ReadError
    workloads: list[dict] | ReadError
    visibility_version: str = VISIBILITY_VERSIONS[0]
    cluster_summary: dict | ReadError | None = None
    cluster_queue_object: dict | ReadError | None = None
    ahead: dict[tuple[str, str], dict | ReadError] = field(default_factory=dict)
    # The Workloads holding the ClusterQueue's quota, cluster-wide (`kueue_forecast.read_holders`),
    # read with the ClusterQueue's own reads: what the start estimate walks (issue 35).
    holders: list[dict] | ReadError | None = None
    # A preempted run's preemptor, read with the ClusterQueue's reads (None: not read here).
    preemptor: PreemptorRead | None = None
    # The cluster's ResourceFlavors (with the ClusterQueue's reads) and the nodes of the run's flavour
    # (after them), for never-fits by node size (`kueue_nodes`); None: not read.
    flavors: list[dict] | ReadError | None = None
    nodes: FlavorNodes | None = None
    # The holders' recorded training ETAs this user may use (`kueue_etas`), read after the holders.
    etas: EtaRead | None = None


class QueueMemo(BaseModel):
    """A waiting run's last queue read, which a watch keeps between ticks: the position it gave,
    the version of the run's Workloads it was read at, and the ClusterQueue (so a re-read starts
    the ClusterQueue's reads at once). ``fresh``: read by this status, not reused."""

    workload_version: str
    position: QueuePosition
    cluster_queue: str | None = None
    fresh: bool = True
    preemption: Preemption | None = None  # a preempted run's preemptor as last read (issue 35)


class ClusterQueueNames:
    """Which ClusterQueue each LocalQueue feeds, as this process last read it (bounded, newest kept).

    A LocalQueue's ``spec.clusterQueue`` rarely changes, and knowing it up front lets a status send
    the ClusterQueue's reads with the LocalQueue's, one round instead of two (issue 28). It is only
    a hint: every status still reads the LocalQueue under its own user, and the hinted answers are
    used only when that read names the same ClusterQueue, so a user who may not read the
    LocalQueue, or a LocalQueue moved to another ClusterQueue, gets nothing from it. The hinted
    reads themselves carry that user's impersonation, like every other read.

    The hint is also kept in Redis (``shared``, a day), so a worker's first status of a waiting run
    — a fresh process, another replica — has it too: only a deployment's very first read of a
    LocalQueue pays the round that learns it. What Redis answers is untrusted (SPEC §11): a hint
    that is not a ClusterQueue's name (`valid_name`) is ignored and counted
    (``taubot_untrusted_state_dropped_total{kind="cluster_queue_hint"}``), never read from.
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._names: OrderedDict[tuple[str, str, str], str] = OrderedDict()

    def get(self, cluster: str, namespace: str, local_queue: str, *,
            shared: SharedHints | None = None) -> str | None:
        """The hint this process keeps, else the one ``shared`` (Redis) keeps for every process:
        a worker's first status of a waiting run needs no round of its own to learn it."""
        key = (cluster, namespace, local_queue)
        known = self._names.get(key)
        if known is not None or shared is None:
            return known
        try:
            raw = shared.get(shared_key(*key))
        except Exception:  # noqa: BLE001 - Redis away: no hint, one more round
            return None
        if raw is None or raw in (b"", ""):
            return None
        try:
            named = raw.decode() if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            named = None
        if not isinstance(named, str) or not valid_name(named):
            log.warning("ignored a malformed ClusterQueue hint for LocalQueue %r", local_queue[:80])
            UNTRUSTED_DROPPED.labels("cluster_queue_hint").inc()
            return None
        self._remember(key, named)
        return named

    def forget(self) -> None:
        """Forget every hint this process keeps (what Redis keeps stays): a fresh process's state."""
        self._names.clear()

    def learn(self, cluster: str, namespace: str, local_queue: str, queue_object: dict | ReadError, *,
              shared: SharedHints | None = None) -> None:
        """Keep what the user's own read of the LocalQueue (``queue_object``) names, for later statuses."""
        named = named_cluster_queue(queue_object)
        key = (cluster, namespace, local_queue)
        if isinstance(named, str) and valid_name(named):
            if shared is not None and self._names.get(key) != named:
                try:
                    shared.set(shared_key(*key), named, ex=SHARED_TTL_SECONDS)
                except Exception:  # noqa: BLE001 - a hint not shared costs a round elsewhere, nothing else
                    pass
            self._remember(key, named)
        elif isinstance(queue_object, dict):  # the LocalQueue, read, names none: forget the hint
            self._names.pop(key, None)
            if shared is not None:
                with contextlib.suppress(Exception):  # an empty hint is none
                    shared.set(shared_key(*key), "", ex=SHARED_TTL_SECONDS)

    def _remember(self, key: tuple[str, str, str], named: str) -> None:
        self._names[key] = named
        self._names.move_to_end(key)
        while len(self._names) > self.size:
            self._names.popitem(last=False)


class SharedHints(Protocol):
    """What the hints need of Redis (a `redis.Redis`)."""

    def get(self, name: str) -> bytes | str | None: ...

    def set(self, name: str, value: str, ex: int | None = None) -> object: ...


SHARED_KEY = keys.CLUSTER_QUEUE_OF
SHARED_TTL_SECONDS = 24 * 3600
# A Kubernetes object name (a DNS-1123 subdomain, as Kueue's ClusterQueue names are).
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def valid_name(name: str) -> bool:
    """Whether ``name`` can be a ClusterQueue's name: a hint that is not is never read from."""
    return len(name) <= 253 and _NAME.fullmatch(name) is not None


def shared_key(cluster: str, namespace: str, local_queue: str) -> str:
    """The Redis key of a LocalQueue's ClusterQueue hint, shared by the monitor and every worker."""
    digest = hashlib.sha256("\0".join((cluster, namespace, local_queue)).encode()).hexdigest()[:32]
    return keys.cluster_queue_of_key(digest)


def share_cluster_queues(conn: Any, cluster: str, namespace: str, local_queues: list[dict]) -> int:
    """Write the hint of each LocalQueue in ``local_queues`` (as the stall monitor's cache holds
    them) for every worker: a deployment's first status of a waiting run then sends the
    ClusterQueue's reads with the LocalQueue's too — two rounds, not three (issue 28). The monitor
    reads as the bot, but a hint only decides which reads a status sends, as its own user, early:
    their answers count only when that user's own LocalQueue read names the same ClusterQueue
    (`read_queue`), so nothing the bot read reaches anyone. How many were written."""
    written = 0
    with conn.pipeline(transaction=False) as pipe:
        for lq in local_queues:
            name = (lq.get("metadata") or {}).get("name")
            named = (lq.get("spec") or {}).get("clusterQueue")
            if isinstance(name, str) and name and isinstance(named, str) and valid_name(named):
                pipe.set(shared_key(cluster, namespace, name), named, ex=SHARED_TTL_SECONDS)
                written += 1
        if written:
            pipe.execute()
    return written

CLUSTER_QUEUE_NAMES = ClusterQueueNames()  # per process: a warm worker keeps it across jobs


def workload_version(workloads: list[dict]) -> str:
    """The run's Workloads' names and resourceVersions: Kueue writes a waiting Workload's status
    (its QuotaReserved message, requeue state, …) whenever its standing changes."""
    return ",".join(sorted(f"{(w.get('metadata') or {}).get('name')}="
                           f"{(w.get('metadata') or {}).get('resourceVersion')}" for w in workloads))


def named_cluster_queue(queue_object: dict | ReadError | None) -> str | None:
    """The ClusterQueue a LocalQueue read names (`spec.clusterQueue`); None when it was not read."""
    if not isinstance(queue_object, dict):
        return None
    named = (queue_object.get("spec") or {}).get("clusterQueue")
    return named if isinstance(named, str) and named else None


async def read_local_queue(reader: KubeReader, namespace: str, local_queue: str) -> dict | ReadError:
    """The LocalQueue, as the user may read it (its `spec.clusterQueue` names the ClusterQueue)."""
    return await reader.get(resource_path(*KUEUE, "localqueues", namespace, local_queue))


async def _given(value: Any) -> Any:
    return value


def unserved(got: object) -> bool:
    """A 404 for the group version itself: this Kueue does not serve that API version."""
    return isinstance(got, ReadError) and got.kind == "not_found" and got.message == UNSERVED


async def _pending(reader: KubeReader, version: str, plural: str, namespace: str | None,
                   name: str) -> dict | ReadError:
    return await reader.get(resource_path(VISIBILITY_GROUP, version, plural, namespace, name,
                                          "pendingworkloads"))


async def _cluster_queue(reader: KubeReader, name: str) -> dict | ReadError:
    got = await reader.get(resource_path(*KUEUE, "clusterqueues", name=name))
    if unserved(got):  # a Kueue that serves only v1beta1 (before v0.15)
        got = await reader.get(resource_path(*KUEUE_V1BETA1, "clusterqueues", name=name))
    return got


EtaLookup = Callable[[list[dict]], Awaitable[EtaRead]]


async def read_queue(reader: KubeReader, namespace: str, local_queue: str, *,
                     cluster_queue: str | None = None, run_uid: str = "",
                     list_namespace: bool = True,
                     local_queue_object: dict | ReadError | None = None,
                     run_workloads: Awaitable[list[dict] | ReadError] | None = None,
                     etas: EtaLookup | None = None) -> QueueRead:
    """The LocalQueue's pending Workloads, the LocalQueue and the namespace's Workloads at once;
    then the ClusterQueue's pending list and quota; then the Workloads ahead in other namespaces.

    ``cluster_queue``, when the caller already knows it (a watch's earlier read), starts the
    ClusterQueue's reads with the others, so a re-read costs one round fewer; the LocalQueue's
    answer still decides which ClusterQueue is meant (a hint that no longer holds is re-read).
    ``local_queue_object``: the LocalQueue as this user's status already read it (round 1): it is
    not read again, and the ClusterQueue it names is read at once, as certainly meant.

    With ``run_workloads`` (the run's own Workloads, read beside) the ResourceFlavors go with the
    ClusterQueue's reads and the nodes of the run's flavour with the GETs of the Workloads ahead, for
    never-fits by node size (`kueue_nodes`); ``etas`` looks up the holders' recorded ETAs there too
    (`kueue_etas`). Neither adds a round to a status that has the Workloads ahead to read.

    Without ``list_namespace`` (a watch's re-read) the namespace's Workloads are not listed: those
    ahead in the LocalQueue are read by name with the ones ahead elsewhere, bounded together by
    `MAX_AHEAD_READS`. A watch re-reads every few ticks, and listing every Workload of a namespace
    with a thousand waiting runs each time made the watches' cost grow with the square of the runs
    (bench_watch, issue 28); a status, which a person waits for, keeps its round."""
    calls = [_pending(reader, VISIBILITY_VERSIONS[0], "localqueues", namespace, local_queue),
             _given(local_queue_object) if local_queue_object is not None else
             read_local_queue(reader, namespace, local_queue)]
    if list_namespace:
        calls.append(reader.list(resource_path(*KUEUE, "workloads", namespace), limit=PAGE_SIZE))
    cluster_queue = named_cluster_queue(local_queue_object) or (
        cluster_queue if local_queue_object is None else None)
    node_size = run_workloads is not None
    if cluster_queue:
        calls += [_pending(reader, VISIBILITY_VERSIONS[0], "clusterqueues", None, cluster_queue),
                  _cluster_queue(reader, cluster_queue), read_holders(reader, cluster_queue),
                  read_flavors(reader) if node_size else _given(None)]
    answers = await asyncio.gather(*calls)
    summary, lq = answers[0], answers[1]
    workloads: list[dict] | ReadError = answers[2] if list_namespace else []
    hinted = answers[3:] if list_namespace else answers[2:]
    version = VISIBILITY_VERSIONS[0]
    if unserved(summary):
        version = VISIBILITY_VERSIONS[1]
        summary = await _pending(reader, version, "localqueues", namespace, local_queue)
    read = QueueRead(local_queue, summary, lq, workloads, visibility_version=version)
    named = named_cluster_queue(lq)
    local_ahead = ([] if list_namespace or not isinstance(summary, dict)
                   else _local_ahead_keys(summary, run_uid)[:MAX_AHEAD_READS])
    if not named or isinstance(summary, ReadError):  # no position: the ClusterQueue would add nothing
        read.workloads = await _workloads(reader, local_ahead) if local_ahead else workloads
        return read
    if hinted and named == cluster_queue and version == VISIBILITY_VERSIONS[0]:
        read.cluster_summary, read.cluster_queue_object, read.holders, read.flavors = hinted
    else:
        read.cluster_summary, read.cluster_queue_object, read.holders, read.flavors = await asyncio.gather(
            _pending(reader, version, "clusterqueues", None, named), _cluster_queue(reader, named),
            read_holders(reader, named), read_flavors(reader) if node_size else _given(None))
    if isinstance(read.cluster_summary, dict):
        local = {workload_key(w) for w in workloads} if isinstance(workloads, list) else set()
        others = [k for k in _ahead_keys(read.cluster_summary, summary, run_uid)
                  if k not in local and k not in local_ahead]
        wanted = [*local_ahead, *others][:MAX_AHEAD_READS]
    else:
        wanted = local_ahead
    # Beside the GETs of the Workloads ahead: the nodes of the run's flavour and the holders' ETAs.
    nodes = _flavor_nodes(reader, read, run_workloads) if node_size else _given(None)
    eta_call = etas(_holders_read(read)) if etas is not None else _given(None)
    answers, read.nodes, read.etas = await asyncio.gather(asyncio.gather(*(
        reader.get(resource_path(*KUEUE, "workloads", ns, name)) for ns, name in wanted)), nodes, eta_call)
    got = dict(zip(wanted, answers, strict=True))
    if not list_namespace:
        read.workloads = [w for k in local_ahead if isinstance(w := got.get(k), dict)]
    read.ahead = {k: v for k, v in got.items() if k not in local_ahead}
    return read


async def _flavor_nodes(reader: KubeReader, read: QueueRead,
                        run_workloads: Awaitable[list[dict] | ReadError] | None) -> FlavorNodes | None:
    if run_workloads is None or not isinstance(read.cluster_queue_object, dict):
        return None
    return await read_flavor_nodes(reader, read.cluster_queue_object, await run_workloads, read.flavors)


def _holders_read(read: QueueRead) -> list[dict]:
    """The Workloads holding the ClusterQueue's quota as the user read them: cluster-wide when allowed,
    else the namespace's."""
    seen: dict[tuple[str, str], dict] = {}
    for listed in (read.workloads, read.holders):
        for w in listed if isinstance(listed, list) else []:
            if ((w.get("status") or {}).get("admission") or {}).get("clusterQueue"):
                seen[workload_key(w)] = w
    return list(seen.values())


def _local_ahead_keys(summary: dict, run_uid: str) -> list[tuple[str, str]]:
    """(namespace, name) of the LocalQueue's pending Workloads ahead of the run's own (found by its
    ownerReferences); none when the run's own is not among them."""
    items = [i for i in summary.get("items") or [] if isinstance(i, dict)]
    own = next((i for i in items if run_uid and any(
        ref.get("uid") == run_uid for ref in (i.get("metadata") or {}).get("ownerReferences") or [])), None)
    if own is None:
        return []
    mine = int(own.get("positionInLocalQueue") or 0)
    ahead = sorted((i for i in items if int(i.get("positionInLocalQueue") or 0) < mine),
                   key=lambda i: int(i.get("positionInLocalQueue") or 0))
    return [workload_key(i) for i in ahead]


async def _workloads(reader: KubeReader, keys: list[tuple[str, str]]) -> list[dict]:
    """The Workloads at ``keys`` that could be read (one the user may not read is left out: the
    position then says what it asks for is unknown, never a guess)."""
    got = await asyncio.gather(*(reader.get(resource_path(*KUEUE, "workloads", ns, name))
                                 for ns, name in keys))
    return [w for w in got if isinstance(w, dict)]


def _ahead_keys(cluster_summary: dict, local_summary: dict | ReadError,
                run_uid: str) -> list[tuple[str, str]]:
    """(namespace, name) of the pending Workloads ahead of the run's (the one whose
    ownerReferences name ``run_uid``; Kueue copies them into the visibility answer,
    pkg/visibility/storage/utils.go). Without it, ahead of the deepest of the LocalQueue's list:
    an over-read, bounded by `MAX_AHEAD_READS`."""
    items = [i for i in cluster_summary.get("items") or [] if isinstance(i, dict)]
    own = [i for i in items if run_uid and any(
        ref.get("uid") == run_uid for ref in (i.get("metadata") or {}).get("ownerReferences") or [])]
    mine = {workload_key(i) for i in (local_summary.get("items") or [] if isinstance(local_summary, dict)
                                      else []) if isinstance(i, dict)}
    deepest = max((int(i.get("positionInClusterQueue") or 0)
                   for i in (own or [i for i in items if workload_key(i) in mine])), default=-1)
    return [workload_key(i) for i in items if int(i.get("positionInClusterQueue") or 0) < deepest]


def _why(summary: ReadError, queue_object: dict | ReadError, plural: str = "localqueues") -> str:
    viewer = "lq" if plural == "localqueues" else "cq"
    if summary.kind == "forbidden":
        return (f"permission denied (get {plural}/pendingworkloads in {VISIBILITY_GROUP}); the "
                f"queue owner grants it (Kueue's kueue-pending-workloads-{viewer}-viewer ClusterRole)")
    if summary.kind == "not_found":
        if isinstance(queue_object, ReadError) and queue_object.kind == "not_found":
            return "the LocalQueue does not exist" if plural == "localqueues" else \
                "the ClusterQueue does not exist"
        if unserved(summary):
            return (f"this cluster's Kueue does not serve its visibility API ({VISIBILITY_GROUP} "
                    f"{' or '.join(VISIBILITY_VERSIONS)}: Kueue before v0.6, or VisibilityOnDemand off)")
        return f"the {plural[:-1]} is not known to the visibility API ({summary.message or 'not found'})"
    return f"visibility API {summary.describe()}"


def _local_queue_why(got: ReadError) -> str:
    if got.kind == "forbidden":
        return "permission denied (get localqueues in kueue.x-k8s.io)"
    return got.describe()


def _quota_why(got: ReadError) -> str:
    if got.kind == "forbidden":
        return "permission denied (get clusterqueues in kueue.x-k8s.io)"
    if got.kind == "not_found":
        return "the ClusterQueue does not exist"
    return f"ClusterQueue {got.describe()}"


def position_from(read: QueueRead, *, run_uid: str, workload_names: set[str],
                  run_workloads: list[dict] | None = None, now: datetime | None = None) -> QueuePosition:
    """The reads as position facts; a failed read is `unavailable` with its reason, never a guess.
    With ``now`` (the caller's clock) also the start estimate and never-fits (SPEC §5b) from the
    ClusterQueue, the Workloads holding its quota and those ahead."""
    cq = None
    if isinstance(read.queue_object, dict):
        cq = (read.queue_object.get("spec") or {}).get("clusterQueue")
    if isinstance(read.summary, ReadError):
        return queue_position(read.local_queue, None, run_uid=run_uid, workload_names=workload_names,
                              cluster_queue=cq, unavailable=_why(read.summary, read.queue_object))
    workloads = read.workloads if isinstance(read.workloads, list) else None
    qp = queue_position(read.local_queue, read.summary, run_uid=run_uid, workload_names=workload_names,
                        cluster_queue=cq, namespace_workloads=workloads)
    if qp.unavailable:
        return qp
    mine = next((workload_key(w) for w in run_workloads or [] if meta_name(w) in workload_names),
                None)
    if read.cluster_summary is None:
        if isinstance(read.queue_object, ReadError):  # which ClusterQueue is unknown: say why
            why = f"not read (the LocalQueue could not be read: {_local_queue_why(read.queue_object)})"
        else:
            why = "not read (the LocalQueue names no ClusterQueue)" if cq is None else "not read"
        qp = qp.model_copy(update={"cluster_queue_unavailable": why})
    elif isinstance(read.cluster_summary, ReadError):
        qp = qp.model_copy(update={"cluster_queue_unavailable": _why(
            read.cluster_summary, read.cluster_queue_object or {}, "clusterqueues")})
    elif mine is not None:
        known: dict[tuple[str, str], dict | None] = {workload_key(w): w for w in workloads or []}
        for key, got in read.ahead.items():
            known[key] = got if isinstance(got, dict) else None
        qp = in_cluster_queue(qp, read.cluster_summary, mine=mine, known=known)
    if isinstance(read.cluster_queue_object, dict):
        quota, why = free_quota(read.cluster_queue_object, run_workloads or [])
        qp = qp.model_copy(update={"free_quota": quota, "free_quota_unavailable": why,
                                   "cohort": cohort_of(read.cluster_queue_object)})
        if now is not None and run_workloads:
            qp = with_estimate(qp, read.cluster_queue_object, run_workloads=run_workloads,
                               namespace_workloads=workloads, holders=read.holders,
                               ahead={k: v for k, v in read.ahead.items() if isinstance(v, dict)} | {
                                   workload_key(w): w for w in workloads or []},
                               ahead_keys=_ahead_in_order(read, run_uid), now=now,
                               etas=read.etas.etas if read.etas else None,
                               eta_unknown=read.etas.unknown if read.etas else (), nodes=read.nodes)
    elif isinstance(read.cluster_queue_object, ReadError):
        qp = qp.model_copy(update={"free_quota_unavailable": _quota_why(read.cluster_queue_object)})
    else:
        qp = qp.model_copy(update={"free_quota_unavailable": "not read"})
    return qp


def _ahead_in_order(read: QueueRead, run_uid: str) -> list[tuple[str, str]]:
    """(namespace, name) of the Workloads ahead of the run in Kueue's order: the ClusterQueue's list
    when it was read, else the LocalQueue's."""
    if isinstance(read.cluster_summary, dict):
        items = sorted((i for i in read.cluster_summary.get("items") or [] if isinstance(i, dict)),
                       key=lambda i: int(i.get("positionInClusterQueue") or 0))
        order = [workload_key(i) for i in items]
        ahead = set(_ahead_keys(read.cluster_summary, read.summary, run_uid))
        return [k for k in order if k in ahead]
    return _local_ahead_keys(read.summary, run_uid) if isinstance(read.summary, dict) else []


def meta_name(obj: dict) -> str:
    return (obj.get("metadata") or {}).get("name") or ""


__all__ = ["MAX_AHEAD_READS", "QueueMemo", "QueueRead", "VISIBILITY_VERSIONS", "named_cluster_queue",
           "position_from", "read_local_queue", "read_queue", "shared_key", "unserved", "valid_name",
           "workload_version"]
