"""What the monitor keeps of an object: the fields its rules and the engine read, nothing else.

The monitor's cache holds every Job, RayJob, Workload, RayCluster, Pod, ResourceClaim and Warning
Event of every watched namespace, and the cluster's ClusterQueues, for as long as it runs (SPEC §11:
20,000 runs in at most 1.5 GB). Most of a real object is never read — server-side-apply bookkeeping
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
those fields; a list applies it to each of its items). Null fields are left out (the engine reads
absent and null alike), and so are volumes that mount no claim. Keys and values that repeat are
shared between objects (a bounded table, not `sys.intern`: interned strings never die), since a
cache of 200,000 pods otherwise holds 200,000 copies of `"lastTransitionTime"`, `"True"` and the
image's digest.
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
KEPT_ANNOTATION_PREFIXES = ("taugrid.io/", "kueue.x-k8s.io/", "ray.io/", "training.kubeflow.org/")

META = {
    "name": ALL, "namespace": ALL, "uid": ALL, "generateName": ALL, "creationTimestamp": ALL,
    "deletionTimestamp": ALL, "resourceVersion": ALL, "generation": ALL, "labels": ALL,
    "ownerReferences": ALL,  # and the annotations `_annotations` keeps
}
# A pod's containers: what they run, not what they asked for (a Workload's pod sets say that, and
# only they are read for it: start_estimate.py).
CONTAINER = {"name": ALL, "image": ALL, "restartPolicy": ALL, "ports": ALL}
VOLUME = {"name": ALL, "persistentVolumeClaim": ALL, "ephemeral": ALL}  # `_claims`: those with a claim
POD_SPEC = {
    "nodeName": ALL, "containers": CONTAINER, "initContainers": CONTAINER, "schedulingGates": ALL,
    "nodeSelector": ALL, "resourceClaims": ALL, "volumes": VOLUME, "restartPolicy": ALL,
}
ASKED = {**CONTAINER, "resources": ALL}
POD_SET_TEMPLATE = {"metadata": {"labels": ALL},
                    "spec": {**POD_SPEC, "containers": ASKED, "initContainers": ASKED}}
CONTAINER_STATUS = {
    "name": ALL, "image": ALL, "imageID": ALL, "containerID": ALL, "ready": ALL, "started": ALL,
    "restartCount": ALL, "state": ALL, "lastState": ALL, "allocatedResourcesStatus": ALL,
}
TEMPLATE = {"metadata": {"labels": ALL}, "spec": POD_SPEC}
# A pod's conditions: every one but the kubelet's sandbox milestone (PodReadyToStartContainers),
# which nothing reads (the engine asks for PodScheduled, Initialized and Ready).
POD_CONDITION = {"type": ALL, "status": ALL, "reason": ALL, "message": ALL, "lastTransitionTime": ALL,
                 "lastProbeTime": ALL}
UNREAD_POD_CONDITIONS = frozenset({"PodReadyToStartContainers"})
RAY_GROUP = {"groupName": ALL, "replicas": ALL, "minReplicas": ALL, "maxReplicas": ALL,
             "numOfHosts": ALL, "rayStartParams": ALL, "template": TEMPLATE}
RAY_CLUSTER_SPEC = {"headGroupSpec": RAY_GROUP, "workerGroupSpecs": RAY_GROUP, "suspend": ALL,
                    "rayVersion": ALL, "enableInTreeAutoscaling": ALL}

KEEP: dict[str, dict[str, Any]] = {
    "Pod": {"spec": POD_SPEC, "status": {
        "phase": ALL, "reason": ALL, "message": ALL, "conditions": POD_CONDITION, "nominatedNodeName": ALL,
        "containerStatuses": CONTAINER_STATUS, "initContainerStatuses": CONTAINER_STATUS,
        "ephemeralContainerStatuses": CONTAINER_STATUS, "resourceClaimStatuses": ALL,
        "startTime": ALL, "podIP": ALL, "podIPs": ALL, "hostIP": ALL}},
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
                    "template": POD_SET_TEMPLATE}}, "status": ALL},
    # What the start estimate reads of a ClusterQueue (start_estimate.py, queue_position.py): its
    # quota, cohort and queueing strategy, what is reserved and admitted, how many wait in it, and
    # its Active condition — not its namespaceSelector, preemption or fair-sharing settings.
    "ClusterQueue": {"spec": {
        "cohortName": ALL, "cohort": ALL, "queueingStrategy": ALL,
        "resourceGroups": {"coveredResources": ALL, "flavors": {"name": ALL, "resources": {
            "name": ALL, "nominalQuota": ALL, "borrowingLimit": ALL, "lendingLimit": ALL}}}},
        "status": {"flavorsReservation": ALL, "flavorsUsage": ALL, "pendingWorkloads": ALL,
                   "reservingWorkloads": ALL, "admittedWorkloads": ALL, "conditions": ALL}},
}
TOP = {"apiVersion", "kind", "metadata", "spec", "status"}

SHARE_MAX = 200_000  # distinct strings shared between objects; past it, new ones are kept as they came
SHORT = 32  # short values ("True", "Running", "16", a time) repeat across objects
# Values of these fields repeat across objects (every pod of a run, every run of an image, every
# Workload waiting on one queue), however long they are.
REPEATED = frozenset({"image", "imageID", "message", "reason", "type", "status", "nodeName", "apiVersion",
                      "kind", "clusterQueue", "queueName", "key", "effect"})
_shared: dict[str, str] = {}


def _share(s: str) -> str:
    got = _shared.get(s)
    if got is not None:
        return got
    if len(_shared) < SHARE_MAX:
        _shared[s] = s
    return s


def _value(value: str, key: str, memo: dict[str, str]) -> str:
    """One string value, shared with other objects when it is likely to repeat, else within the
    object (a uid in a label, an owner reference and a template)."""
    if len(value) <= SHORT or key in REPEATED:
        return _share(value)
    return memo.setdefault(value, value)


def _copy(value: Any, key: str, memo: dict[str, str]) -> Any:
    """The value as it is (null and empty-mapping fields left out: the engine reads absent, null
    and `{}` alike, `(x.get(f) or {})`), its keys and repeated strings shared."""
    if isinstance(value, dict):
        return {_share(k) if isinstance(k, str) else k: _copy(v, k, memo) for k, v in value.items()
                if v is not None and v != {}}
    if isinstance(value, list):
        return [_copy(v, key, memo) for v in value]
    if isinstance(value, str):
        return _value(value, key, memo)
    return value


def _keep(value: Any, spec: Any, key: str, memo: dict[str, str]) -> Any:
    if spec is ALL:
        return _copy(value, key, memo)
    if isinstance(value, dict):
        out = {_share(k): _keep(v, spec[k], k, memo) for k, v in value.items() if k in spec and v is not None}
        if isinstance(out.get("volumes"), list) and not out["volumes"]:
            del out["volumes"]  # none mounted a claim
        ips = out.get("podIPs")
        if isinstance(ips, list) and ips == [{"ip": out.get("podIP")}]:
            del out["podIPs"]  # says only what `podIP` says (culprit.py reads either)
        return out
    if isinstance(value, list):
        return [_keep(v, spec, key, memo) for v in value
                if (spec is not VOLUME or _claims(v))
                and (spec is not POD_CONDITION or not isinstance(v, dict)
                     or v.get("type") not in UNREAD_POD_CONDITIONS)]
    return _copy(value, key, memo)


def _claims(volume: Any) -> bool:
    """A volume the engine reads: one that mounts a claim (a PVC, or an ephemeral volume's)."""
    return not isinstance(volume, dict) \
        or bool(volume.get("persistentVolumeClaim") or volume.get("ephemeral"))


def _annotations(notes: Any, memo: dict[str, str]) -> Any:
    if not isinstance(notes, dict):
        return notes  # wrong-typed: kept for the engine's shape check to name
    return {_share(k): _copy(v, k, memo) for k, v in notes.items()
            if k in KEPT_ANNOTATIONS or (isinstance(k, str) and k.startswith(KEPT_ANNOTATION_PREFIXES))}


def trim(obj: dict) -> dict:
    """A new, smaller object with what the monitor and the engine read of ``obj``.

    Kinds without a keep-spec (Events, LocalQueues, ResourceClaims: small, read nearly whole)
    lose only their metadata's bookkeeping. A field of the wrong type is kept as it came, so the
    engine still skips that object and names it, as it would the untrimmed one."""
    spec = KEEP.get(str(obj.get("kind")))
    memo: dict[str, str] = {}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key == "metadata" and isinstance(value, dict):
            meta = _keep(value, META, key, memo)
            if "annotations" in value:
                meta["annotations"] = _annotations(value["annotations"], memo)
            out["metadata"] = meta
        elif spec is None:
            out[_share(key)] = _copy(value, key, memo)
        elif key in spec:
            out[_share(key)] = _keep(value, spec[key], key, memo)
        elif key in TOP:
            out[_share(key)] = _copy(value, key, memo)
    return out


__all__ = ["KEEP", "KEPT_ANNOTATIONS", "trim"]
