"""A watch tick's first look: has anything the run's card rests on changed since the last full read?

Why (issue 28): a `--watch` tick used to repeat the whole status — the workspace, the run, its
Workloads, RayCluster, pods, nodes, log and queue reads, about seven requests and a render — every
15 s, although most ticks of a run find it exactly as it was. The API server has no conditional
GET (no ETag, no If-None-Match), but every object carries a `resourceVersion` that changes with
each write to it. So a tick reads, as the user and in one round, the objects through which a run
moves from phase to phase, and compares their versions with those the last full read saw:

* the run itself (RayJob or Job): admission flips its `spec.suspend`, and KubeRay and the Job
  controller write their progress into its status;
* while Kueue keeps it suspended, its Workloads (their conditions carry Kueue's changing message);
  once it runs, its pods (scheduling, pulls, restarts, readiness — each a pod write).

Any difference or a read that failed makes the tick a full status again; so does the read plan
(`workers/collect/plan.py` `tick_plan`) when the last full read is `watch_full_every_ticks` ticks
old or a waiting run's queue read `watch_queue_every_ticks` ticks old (what these reads do not
cover: the workspace's readiness, nodes, events, the log's progress, others moving in the queue,
and time itself — "waiting for 12 m"). An unchanged tick leaves the
card as the last full read made it, and the card's "last refreshed" time is that read's.

The reads are made exactly like the status's (impersonated, the same client): SPEC §7 holds.
"""

from __future__ import annotations

import asyncio
import hashlib

from pydantic import BaseModel

from workers.contracts.identity import Identity
from workers.diagnosis.linkage import RunObjects, labels, meta
from workers.diagnosis.queue_position import awaits_admission
from workers.kube.client import ClusterTarget, KubeClients
from workers.kube.reader import KubeReader, ReadError, resource_path

PAGE_SIZE = 2000


class ProbeRead(BaseModel):
    """One read of a probe: an object by name, or a list by label selector."""

    kind: str  # the kind of what it returns ("RayJob", "Job", "Workload", "Pod")
    path: str
    selector: str | None = None  # `key=value`: a list; None: a GET of the object at `path`
    name: str | None = None  # the object's name, for a GET


class Probe(BaseModel):
    """What an unchanged tick reads, and the fingerprint the last full read left."""

    reads: list[ProbeRead]
    fingerprint: str


def probe_reads(objs: RunObjects) -> list[ProbeRead] | None:
    """The reads for this run as the last full read found it; None when there is nothing to probe
    (the run was not found, its kind is unknown)."""
    run, ns = objs.run, objs.namespace
    if run is None or ns is None or objs.kind not in ("RayJob", "Job"):
        return None
    name = objs.name
    if objs.kind == "RayJob":
        reads = [ProbeRead(kind="RayJob", path=resource_path("ray.io", "v1", "rayjobs", ns, name), name=name)]
    else:
        reads = [ProbeRead(kind="Job", path=resource_path("batch", "v1", "jobs", ns, name), name=name)]
    if awaits_admission(run):
        uid = meta(run).get("uid") or ""
        # The version the full read found them at (a cluster that serves only v1beta1 answers there).
        served = next((str(w.get("apiVersion")).rpartition("/")[2] for w in objs.workloads
                       if str(w.get("apiVersion") or "").startswith("kueue.x-k8s.io/")), "v1beta2")
        reads.append(ProbeRead(kind="Workload", selector=f"kueue.x-k8s.io/job-uid={uid}",
                               path=resource_path("kueue.x-k8s.io", served, "workloads", ns)))
        return reads
    selector = (f"ray.io/cluster={objs.raycluster_name}" if objs.kind == "RayJob" and objs.raycluster_name
                else f"batch.kubernetes.io/job-name={name}")
    reads.append(ProbeRead(kind="Pod", selector=selector, path=resource_path("", "v1", "pods", ns)))
    return reads


def _matches(obj: dict, read: ProbeRead) -> bool:
    if obj.get("kind") != read.kind:
        return False
    if read.selector is None:
        return meta(obj).get("name") == read.name
    key, _, value = read.selector.partition("=")
    return labels(obj).get(key) == value


def fingerprint(reads: list[ProbeRead], objects: list[dict]) -> str:
    """The versions of what ``reads`` return, from any set of objects (a full read's, a probe's)."""
    parts: list[str] = []
    for i, read in enumerate(reads):
        versions = sorted(f"{meta(o).get('name')}@{meta(o).get('resourceVersion')}"
                          for o in objects if _matches(o, read))
        parts.append(f"{i}:{','.join(versions)}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def probe_of(objs: RunObjects, objects: list[dict]) -> Probe | None:
    """The probe a full read leaves for the next ticks: its reads and what they would return now."""
    reads = probe_reads(objs)
    if reads is None:
        return None
    return Probe(reads=reads, fingerprint=fingerprint(reads, objects))


async def unchanged(kube: KubeClients, target: ClusterTarget, identity: Identity, probe: Probe, *,
                    timeout: float) -> bool:
    """Whether the probe's reads, made now as ``identity``, find exactly the versions it keeps.
    A read that failed is a change: the full status says why."""
    api = await kube.user(target, identity)
    async with api:
        reader = KubeReader(api, timeout)
        got = await asyncio.gather(*(
            reader.get(r.path) if r.selector is None else reader.list(r.path, label_selector=r.selector,
                                                                      limit=PAGE_SIZE)
            for r in probe.reads))
    objects: list[dict] = []
    for read, result in zip(probe.reads, got, strict=True):
        if isinstance(result, ReadError):
            return False
        for obj in result if isinstance(result, list) else [result]:
            objects.append({**obj, "kind": obj.get("kind") or read.kind})
    return fingerprint(probe.reads, objects) == probe.fingerprint


__all__ = ["Probe", "ProbeRead", "fingerprint", "probe_of", "probe_reads", "unchanged"]
