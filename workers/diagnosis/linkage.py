"""Finding one run's objects in a snapshot, by the linkages real clusters have (SPEC §2).

No TauGrid-only label is required: Kueue links Workloads by controller
ownerReference and the `kueue.x-k8s.io/job-uid` label, KubeRay links its
RayCluster by `status.rayClusterName` and its pods by `ray.io/cluster`, batch
links pods by `batch.kubernetes.io/job-name`, DRA links claims through the pod
spec and status, and events name what they are about. Everything else in the
dump is ignored, so a whole-namespace dump is a fine input.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime

from .timeutil import parse_time

RUN_LABEL = "taugrid.io/run"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
SUBMITTED_BY_ANNOTATION = "taugrid.io/submitted-by"  # the platform writes it on every run (SPEC §8)


def group_of(obj: dict) -> str:
    api = obj.get("apiVersion") or ""
    return api.split("/", 1)[0] if "/" in api else ""


def meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def labels(obj: dict) -> dict:
    return meta(obj).get("labels") or {}


def ident(obj: dict) -> tuple[str, str]:
    m = meta(obj)
    return (m.get("namespace") or "", m.get("name") or "")


@dataclass(frozen=True)
class Event:
    """A core/v1 or events.k8s.io/v1 event, normalised to one shape."""

    kind: str
    name: str
    namespace: str
    uid: str
    field_path: str
    reason: str
    message: str
    type: str
    count: int
    last: datetime | None

    @classmethod
    def from_object(cls, obj: dict) -> Event | None:
        if group_of(obj) == "events.k8s.io":
            ref = obj.get("regarding") or {}
            message = obj.get("note") or ""
            series = obj.get("series") or {}
            count = int(series.get("count") or obj.get("deprecatedCount") or 1)
            last = (
                parse_time(series.get("lastObservedTime"))
                or parse_time(obj.get("deprecatedLastTimestamp"))
                or parse_time(obj.get("eventTime"))
            )
        else:
            ref = obj.get("involvedObject") or {}
            message = obj.get("message") or ""
            count = int(obj.get("count") or 1)
            last = (
                parse_time(obj.get("lastTimestamp"))
                or parse_time(obj.get("eventTime"))
                or parse_time(obj.get("firstTimestamp"))
            )
        if not ref.get("name"):
            return None
        return cls(
            kind=ref.get("kind") or "",
            name=ref.get("name") or "",
            namespace=ref.get("namespace") or meta(obj).get("namespace") or "",
            uid=ref.get("uid") or "",
            field_path=ref.get("fieldPath") or "",
            reason=obj.get("reason") or "",
            message=message,
            type=obj.get("type") or "",
            count=count,
            last=last,
        )

    def container(self) -> str | None:
        """The container an event is about, from `spec.containers{name}` field paths."""
        fp = self.field_path
        if "{" in fp and fp.endswith("}"):
            return fp[fp.index("{") + 1 : -1]
        return None


@dataclass
class RunObjects:
    """Everything the snapshot holds about one run, already linked."""

    name: str
    namespace: str | None
    kind: str | None = None
    run: dict | None = None
    workloads: list[dict] = field(default_factory=list)
    raycluster: dict | None = None
    raycluster_name: str | None = None
    submitter_job: dict | None = None
    pods: list[dict] = field(default_factory=list)
    claims: dict[str, dict] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    queues: list[dict] = field(default_factory=list)
    # The snapshot's objects by kind, as linked (not copied): what the run's queue holds beyond the
    # run — other Workloads (a preemptor to name, the holders of a flavour), ClusterQueues,
    # ResourceFlavors, Nodes (issue 35). Read lazily, so linking stays O(the run's objects).
    by_kind: dict[str, list[dict]] = field(default_factory=dict, repr=False)
    nodes: dict[str, dict] = field(default_factory=dict)  # the Node objects the run's pods are bound to
    pvcs: dict[str, dict] = field(default_factory=dict)  # the PersistentVolumeClaims the run's pods mount
    _events_by_name: dict[tuple[str, str], list[Event]] = field(default_factory=dict, repr=False)

    @property
    def found(self) -> bool:
        return self.run is not None

    @property
    def peer_workloads(self) -> list[dict]:
        """Every other Kueue Workload the snapshot holds, in any namespace: what the user could read."""
        mine = {id(w) for w in self.workloads}
        return [w for w in self.by_kind.get("Workload", [])
                if id(w) not in mine and group_of(w) == "kueue.x-k8s.io"]

    def of_kind(self, kind: str) -> list[dict]:
        """The snapshot's objects of one kind (ClusterQueue, LocalQueue, ResourceFlavor, Node)."""
        return self.by_kind.get(kind, [])

    def events_for(self, kind: str, name: str) -> list[Event]:
        return self._events_by_name.get((kind, name), [])

    def is_ray_pod(self, pod: dict) -> bool:
        return "ray.io/cluster" in labels(pod)

    def linked_names(self) -> set[tuple[str, str]]:
        """(kind, name) of every object linked to the run: what its events may name."""
        names: set[tuple[str, str]] = {(self.kind or "", self.name)} if self.run is not None else set()
        if self.run is not None:
            names.add((self.kind or "", meta(self.run).get("name") or self.name))
        names.update(("Workload", meta(w).get("name") or "") for w in self.workloads)
        names.update(("Pod", meta(p).get("name") or "") for p in self.pods)
        names.update(("ResourceClaim", n) for n in self.claims)
        if self.raycluster_name:
            names.add(("RayCluster", self.raycluster_name))
        if self.submitter_job is not None:
            names.add(("Job", meta(self.submitter_job).get("name") or ""))
        return names

    def with_events(self, event_objects: list[dict]) -> RunObjects:
        """A copy with more events linked (those naming the run's objects), without linking the
        rest again: the collector reads a few pods' events after it linked the run."""
        wanted = self.linked_names()
        events = list(self.events)
        index = {k: list(v) for k, v in self._events_by_name.items()}
        for obj in event_objects:
            if (meta(obj).get("namespace") or "") != (self.namespace or ""):
                continue
            ev = Event.from_object(obj)
            if ev is not None and (ev.kind, ev.name) in wanted:
                index.setdefault((ev.kind, ev.name), []).append(ev)
                events.append(ev)
        return replace(self, events=events, _events_by_name=index)


def _owned_by(obj: dict, uid: str | None, kind: str, name: str) -> bool:
    for ref in meta(obj).get("ownerReferences") or []:
        if uid and ref.get("uid") == uid:
            return True
        if not uid and ref.get("kind") == kind and ref.get("name") == name:
            return True
    return False


def _pick_run(candidates: list[dict]) -> dict | None:
    """A RayJob wins over a Job of the same name (KubeRay's submitter Job shares the name)."""
    for kind in ("RayJob", "Job"):
        for obj in candidates:
            if obj.get("kind") == kind:
                return obj
    return None


def run_names(objects: list[dict], namespace: str | None = None) -> list[str]:
    """The names of the runs (RayJobs, and Jobs no RayJob owns) among the objects, sorted."""
    names = set()
    for obj in objects:
        kind, m = obj.get("kind"), meta(obj)
        if namespace is not None and (m.get("namespace") or "") != namespace:
            continue
        if kind == "RayJob" or (kind == "Job" and not any(
                ref.get("kind") == "RayJob" for ref in m.get("ownerReferences") or [])):
            if isinstance(m.get("name"), str):
                names.add(m["name"])
    return sorted(names)


def find_run(objects: list[dict], name: str, namespace: str | None = None) -> RunObjects:
    """Link the run called `name` (optionally in `namespace`) to its objects."""
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for obj in objects:
        by_kind[obj.get("kind") or ""].append(obj)

    def in_ns(obj: dict, ns: str | None) -> bool:
        return ns is None or (meta(obj).get("namespace") or "") == ns

    candidates = [
        o
        for kind, grp in (("RayJob", "ray.io"), ("Job", "batch"))
        for o in by_kind.get(kind, [])
        if group_of(o) == grp
        and in_ns(o, namespace)
        and (meta(o).get("name") == name or labels(o).get(RUN_LABEL) == name)
    ]
    exact = [o for o in candidates if meta(o).get("name") == name]
    run = _pick_run(exact) or _pick_run(candidates)
    result = RunObjects(name=name, namespace=namespace)
    if run is None:
        return result
    ns = meta(run).get("namespace") or ""
    run_name = meta(run).get("name") or name
    run_uid = meta(run).get("uid")
    result.run, result.kind, result.namespace = run, run["kind"], ns

    same_ns = {k: [o for o in v if (meta(o).get("namespace") or "") == ns] for k, v in by_kind.items()}
    jobs = [o for o in same_ns.get("Job", []) if group_of(o) == "batch"]

    pods_all = same_ns.get("Pod", [])
    pods: list[dict] = []
    if result.kind == "RayJob":
        status = run.get("status") or {}
        rc_name = status.get("rayClusterName")
        clusters = [o for o in same_ns.get("RayCluster", []) if group_of(o) == "ray.io"]
        rc = next((c for c in clusters if rc_name and meta(c).get("name") == rc_name), None)
        if rc is None:
            rc = next((c for c in clusters if _owned_by(c, run_uid, "RayJob", run_name)), None)
        if rc is None:
            rc = next(
                (
                    c
                    for c in clusters
                    if labels(c).get("ray.io/originated-from-cr-name") == run_name
                    and labels(c).get("ray.io/originated-from-crd") == "RayJob"
                ),
                None,
            )
        result.raycluster = rc
        result.raycluster_name = meta(rc).get("name") if rc else rc_name
        rc_uid = meta(rc).get("uid") if rc else None
        submitter = next(
            (j for j in jobs if meta(j).get("name") == run_name and j is not run), None
        )
        if submitter is None:
            submitter = next((j for j in jobs if _owned_by(j, run_uid, "RayJob", run_name)), None)
        result.submitter_job = submitter
        sub_name = meta(submitter).get("name") if submitter else None
        sub_uid = meta(submitter).get("uid") if submitter else None
        for p in pods_all:
            lb = labels(p)
            if (result.raycluster_name and lb.get("ray.io/cluster") == result.raycluster_name) or (
                rc_uid and _owned_by(p, rc_uid, "RayCluster", "")
            ):
                pods.append(p)
            elif submitter is not None and (
                lb.get("batch.kubernetes.io/job-name") == sub_name
                or lb.get("job-name") == sub_name
                or _owned_by(p, sub_uid, "Job", sub_name or "")
            ):
                pods.append(p)
            elif lb.get(RUN_LABEL) == run_name:
                pods.append(p)
    else:
        for p in pods_all:
            lb = labels(p)
            if (
                lb.get("batch.kubernetes.io/job-name") == run_name
                or lb.get("job-name") == run_name
                or _owned_by(p, run_uid, "Job", run_name)
                or lb.get(RUN_LABEL) == run_name
            ):
                pods.append(p)
    result.pods = pods
    bound = {(p.get("spec") or {}).get("nodeName") for p in pods}
    result.nodes = {meta(n).get("name"): n for n in by_kind.get("Node", []) if meta(n).get("name") in bound}
    mounted = {((v.get("persistentVolumeClaim") or {}).get("claimName")
                or (f"{meta(p).get('name')}-{v.get('name')}" if v.get("ephemeral") else None))
               for p in pods for v in (p.get("spec") or {}).get("volumes") or [] if isinstance(v, dict)}
    result.pvcs = {meta(c).get("name"): c for c in same_ns.get("PersistentVolumeClaim", [])
                   if meta(c).get("name") in mounted}

    # One pass over the run's pods for what the rest links by (at 20,000 pods each extra pass
    # cost ~10 ms of cache misses, bench/bench_evaluate.py).
    pod_uids: set[str] = set()
    pod_names: set[str] = set()
    claim_names: set[str] = set()
    for p in pods:
        m = p.get("metadata") or {}
        if m.get("uid"):
            pod_uids.add(m["uid"])
        pod_names.add(m.get("name"))
        for rc_ref in (p.get("spec") or {}).get("resourceClaims") or []:
            if rc_ref.get("resourceClaimName"):
                claim_names.add(rc_ref["resourceClaimName"])
        for st in (p.get("status") or {}).get("resourceClaimStatuses") or []:
            if st.get("resourceClaimName"):
                claim_names.add(st["resourceClaimName"])
    workloads = []
    for wl in same_ns.get("Workload", []):
        if group_of(wl) != "kueue.x-k8s.io":
            continue
        if (
            _owned_by(wl, run_uid, result.kind, run_name)
            or (run_uid and labels(wl).get("kueue.x-k8s.io/job-uid") == run_uid)
            or any(ref.get("uid") in pod_uids for ref in meta(wl).get("ownerReferences") or [])
        ):
            workloads.append(wl)
    result.workloads = workloads
    result.by_kind = by_kind

    for claim in same_ns.get("ResourceClaim", []):
        if group_of(claim) != "resource.k8s.io":
            continue
        cname = meta(claim).get("name") or ""
        owners = {ref.get("uid") for ref in meta(claim).get("ownerReferences") or []}
        if cname in claim_names or owners & pod_uids:
            result.claims[cname] = claim

    queue_names = {(wl.get("spec") or {}).get("queueName") for wl in workloads}
    queue_names.add(labels(run).get(QUEUE_LABEL))
    cq_names = {((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") for wl in workloads}
    for lq in same_ns.get("LocalQueue", []):
        if meta(lq).get("name") in queue_names:
            result.queues.append(lq)
            cq_names.add((lq.get("spec") or {}).get("clusterQueue"))
    for cq in by_kind.get("ClusterQueue", []):
        if meta(cq).get("name") in cq_names:
            result.queues.append(cq)

    linked: set[tuple[str, str]] = {(result.kind, run_name)}
    linked.update(("Workload", meta(w).get("name")) for w in workloads)
    linked.update(("Pod", n) for n in pod_names)
    linked.update(("ResourceClaim", n) for n in result.claims)
    if result.raycluster_name:
        linked.add(("RayCluster", result.raycluster_name))
    if result.submitter_job is not None:
        linked.add(("Job", meta(result.submitter_job).get("name")))
    index: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for ev_obj in same_ns.get("Event", []):
        ev = Event.from_object(ev_obj)
        if ev is not None and (ev.kind, ev.name) in linked:
            index[(ev.kind, ev.name)].append(ev)
            result.events.append(ev)
    result._events_by_name = dict(index)
    return result
