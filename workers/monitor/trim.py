"""What the monitor keeps of an object: the fields its rules and the engine read, nothing else.

The monitor's cache holds every Job, RayJob, Workload, RayCluster, Pod, ResourceClaim and Warning
Event of every watched namespace for as long as it runs (SPEC §11: 20,000 runs in at most
1.5 GB). Most of a real object is never read — server-side-apply bookkeeping
(`metadata.managedFields`), kubectl's copy of the applied manifest, a pod's environment, probes,
mounts and projected token volumes, a Job's or RayJob's whole pod template — so each object is
trimmed as it arrives, before it is stored, as client-go's informers do with `SetTransform`
(`cache.TransformStripManagedFields` and its kin).

What is kept was found by reading the engine (`workers/diagnosis/`: linkage, podfacts, phases,
later_evidence, nodes, culprit, preemption, start_estimate; `shapes.py` lists the types it
checks), the monitor (`index.py`, `stalls.py`) and the log reads a sweep makes
(`workers/collect/logs/sources.py`), with a margin: a whole small mapping is kept rather than
picked apart (labels, conditions, a Workload's or RayJob's status), and every field the engine's
shape check names stays. `tests/monitor/test_trim.py` holds the proof: every bundled example
gives the same diagnosis on the trimmed objects as on the whole ones.

A keep-spec is `ALL` (the value as it is) or a mapping of field → keep-spec (a mapping keeps only
those fields; a list applies it to each of its items). Strings of kept keys and short values are
shared between objects (a bounded table, not `sys.intern`: interned strings never die), since a
cache of 200,000 pods otherwise holds 200,000 copies of `"lastTransitionTime"` and `"True"`.
"""

from __future__ import annotations

from typing import Any

ALL: Any = True

# Annotations the engine, the cards and the log reads read; every other one is dropped (kubectl's
# last-applied-configuration alone is often the biggest part of an object).
KEPT_ANNOTATIONS = frozenset({
    "taugrid.io/submitted-by",  # who submitted the run (SPEC §8): escalations, offers, cards
    "kueue.x-k8s.io/admission-gated-by",  # phases/admission.py
    "kueue.x-k8s.io/job-owner-name",  # preemption.py: the preemptor's job
    "batch.kubernetes.io/job-completion-index",  # culprit.py: a pod's rank
    "kubectl.kubernetes.io/default-container",  # collect/logs/sources.py: whose log to read
})
# Margin: whole families that name what the engine is about, should a rule start reading one.
KEPT_ANNOTATION_PREFIXES = ("taugrid.io/", "kueue.x-k8s.io/", "ray.io/", "batch.kubernetes.io/",
                            "training.kubeflow.org/")

META = {
    "name": ALL, "namespace": ALL, "uid": ALL, "generateName": ALL, "creationTimestamp": ALL,
    "deletionTimestamp": ALL, "resourceVersion": ALL, "generation": ALL, "labels": ALL,
    "ownerReferences": ALL,  # and the annotations `_annotations` keeps
}
CONTAINER = {"name": ALL, "image": ALL, "restartPolicy": ALL, "resources": ALL, "ports": ALL}
VOLUME = {"name": ALL, "persistentVolumeClaim": ALL, "ephemeral": ALL}
POD_SPEC = {
    "nodeName": ALL, "containers": CONTAINER, "initContainers": CONTAINER, "schedulingGates": ALL,
    "nodeSelector": ALL, "resourceClaims": ALL, "volumes": VOLUME, "restartPolicy": ALL,
    "priority": ALL, "priorityClassName": ALL, "schedulerName": ALL, "tolerations": ALL,
}
CONTAINER_STATUS = {
    "name": ALL, "image": ALL, "imageID": ALL, "containerID": ALL, "ready": ALL, "started": ALL,
    "restartCount": ALL, "state": ALL, "lastState": ALL, "allocatedResourcesStatus": ALL,
}
TEMPLATE = {"metadata": {"labels": ALL}, "spec": POD_SPEC}
RAY_GROUP = {"groupName": ALL, "replicas": ALL, "minReplicas": ALL, "maxReplicas": ALL,
             "numOfHosts": ALL, "rayStartParams": ALL, "template": TEMPLATE}
RAY_CLUSTER_SPEC = {"headGroupSpec": RAY_GROUP, "workerGroupSpecs": RAY_GROUP, "suspend": ALL,
                    "rayVersion": ALL, "enableInTreeAutoscaling": ALL}

KEEP: dict[str, dict[str, Any]] = {
    "Pod": {"spec": POD_SPEC, "status": {
        "phase": ALL, "reason": ALL, "message": ALL, "conditions": ALL, "nominatedNodeName": ALL,
        "containerStatuses": CONTAINER_STATUS, "initContainerStatuses": CONTAINER_STATUS,
        "ephemeralContainerStatuses": CONTAINER_STATUS, "resourceClaimStatuses": ALL,
        "startTime": ALL, "podIP": ALL, "podIPs": ALL, "hostIP": ALL, "hostIPs": ALL}},
    "Job": {"spec": {
        "suspend": ALL, "parallelism": ALL, "completions": ALL, "completionMode": ALL,
        "backoffLimit": ALL, "backoffLimitPerIndex": ALL, "activeDeadlineSeconds": ALL,
        "podFailurePolicy": ALL, "managedBy": ALL, "template": TEMPLATE}, "status": ALL},
    "RayJob": {"spec": {
        "suspend": ALL, "shutdownAfterJobFinishes": ALL, "submissionMode": ALL, "backoffLimit": ALL,
        "activeDeadlineSeconds": ALL, "jobId": ALL, "clusterSelector": ALL, "managedBy": ALL,
        "rayClusterSpec": RAY_CLUSTER_SPEC}, "status": ALL},
    "RayCluster": {"spec": RAY_CLUSTER_SPEC, "status": ALL},
    "Workload": {"spec": {
        "queueName": ALL, "active": ALL, "priority": ALL, "priorityClassName": ALL,
        "priorityClassSource": ALL, "maximumExecutionTimeSeconds": ALL,
        "podSets": {"name": ALL, "count": ALL, "minCount": ALL, "topologyRequest": ALL,
                    "template": TEMPLATE}}, "status": ALL},
}
TOP = {"apiVersion", "kind", "metadata", "spec", "status"}

SHARE_MAX = 200_000  # distinct strings shared; past it, new ones are kept as they came
SHARE_LEN = 64  # longer values (messages, uids of other objects) are rarely repeated
_shared: dict[str, str] = {}


def _share(s: str) -> str:
    got = _shared.get(s)
    if got is not None:
        return got
    if len(_shared) < SHARE_MAX:
        _shared[s] = s
    return s


def _copy(value: Any) -> Any:
    """The value as it is, with its keys and short strings shared."""
    if isinstance(value, dict):
        return {_share(k) if isinstance(k, str) else k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if isinstance(value, str) and len(value) <= SHARE_LEN:
        return _share(value)
    return value


def _keep(value: Any, spec: Any) -> Any:
    if spec is ALL:
        return _copy(value)
    if isinstance(value, dict):
        return {_share(k): _keep(v, spec[k]) for k, v in value.items() if k in spec}
    if isinstance(value, list):
        return [_keep(v, spec) for v in value]
    return _copy(value)


def _annotations(notes: Any) -> Any:
    if not isinstance(notes, dict):
        return notes  # wrong-typed: kept for the engine's shape check to name
    return {_share(k): _copy(v) for k, v in notes.items()
            if k in KEPT_ANNOTATIONS or (isinstance(k, str) and k.startswith(KEPT_ANNOTATION_PREFIXES))}


def trim(obj: dict) -> dict:
    """A new, smaller object with what the monitor and the engine read of ``obj``.

    Kinds without a keep-spec (Events, LocalQueues, ResourceClaims: small, read nearly whole)
    lose only their metadata's bookkeeping. A field of the wrong type is kept as it came, so the
    engine still skips that object and names it, as it would the untrimmed one."""
    spec = KEEP.get(str(obj.get("kind")))
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key == "metadata" and isinstance(value, dict):
            meta = _keep(value, META)
            if "annotations" in value:
                meta["annotations"] = _annotations(value["annotations"])
            out["metadata"] = meta
        elif spec is None:
            out[_share(key)] = _copy(value)
        elif key in spec:
            out[_share(key)] = _keep(value, spec[key])
        elif key in TOP:
            out[_share(key)] = _copy(value)
    return out


__all__ = ["KEEP", "KEPT_ANNOTATIONS", "trim"]
