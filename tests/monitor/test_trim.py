"""The monitor's cache keeps only what is read (`workers/monitor/trim.py`, SPEC §11), and that
changes no verdict.

Every bundled example (workers/examples/: real Kueue, KubeRay and kubelet shapes, see its README)
is judged on its objects as they are and on the objects the cache keeps of them — also after
each object was given what a real API server and real clients add to it (managedFields as
server-side apply writes them, kubectl's last-applied-configuration, a pod's environment, probes,
mounts and its projected service-account token volume, as `kubectl get pod -o json
--show-managed-fields` prints them): the diagnosis, the stall verdict and the card are the same.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime
from importlib import resources

import pytest

from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.linkage import find_run
from workers.diagnosis.timeutil import parse_time
from workers.monitor.index import group_by_run
from workers.monitor.stalls import Thresholds, classify
from workers.monitor.trim import trim
from workers.render.cards import build_phase_card

EXAMPLES = sorted(p.name[:-5] for p in (resources.files("workers") / "examples").iterdir()
                  if p.name.endswith(".json"))

# Shapes from `kubectl get pod -o json --show-managed-fields` on Kubernetes 1.31 (kube-controller-
# manager's and the kubelet's entries, abridged).
MANAGED_FIELDS = [
    {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kube-controller-manager",
     "operation": "Update", "time": "2026-11-30T10:00:10Z",
     "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:job-name": {}},
                                 "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}},
                  "f:spec": {"f:containers": {"k:{\"name\":\"trainer\"}": {".": {}, "f:env": {}}}}}},
    {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubelet", "operation": "Update",
     "subresource": "status", "time": "2026-11-30T10:01:40Z",
     "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}}},
                               "f:containerStatuses": {}, "f:podIP": {}}}},
]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
ENV = [{"name": "HF_HOME", "value": "/cache/hf"}, {"name": "NCCL_DEBUG", "value": "INFO"},
       {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "key"}}}]
TOKEN_VOLUME = {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}


def _example(name: str) -> tuple[list[dict], str, datetime]:
    doc = json.loads((resources.files("workers") / "examples" / f"{name}.json").read_text())
    notes = doc["metadata"]["annotations"]
    now = parse_time(notes["taugrid.io/example-now"])
    assert now is not None
    return doc["items"], notes["taugrid.io/example-run"], now


def _pod_specs(obj: dict) -> list[dict]:
    """Every pod spec in the object: a Pod's own, a Job's template, a Workload's pod sets, a
    RayJob's or RayCluster's head and worker groups."""
    spec = obj.get("spec") or {}
    kind = obj.get("kind")
    if kind == "Pod":
        return [spec]
    if kind == "Job":
        return [((spec.get("template") or {}).get("spec") or {})]
    if kind == "Workload":
        return [((ps.get("template") or {}).get("spec") or {}) for ps in spec.get("podSets") or []]
    cluster = spec.get("rayClusterSpec") or spec if kind in ("RayJob", "RayCluster") else {}
    groups = [cluster.get("headGroupSpec") or {}, *(cluster.get("workerGroupSpecs") or [])]
    return [((g.get("template") or {}).get("spec") or {}) for g in groups]


def bloated(obj: dict) -> dict:
    """The object with what a real API server and real clients add and the engine never reads."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta["managedFields"] = copy.deepcopy(MANAGED_FIELDS)
    meta.setdefault("annotations", {})[LAST_APPLIED] = json.dumps(obj) + "\n"
    for spec in _pod_specs(out):
        spec.setdefault("volumes", []).append(copy.deepcopy(TOKEN_VOLUME))
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "agentpool", "operator": "In",
                                                         "values": ["gpua100"]}]}]}}}
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            c["env"] = copy.deepcopy(ENV)
            c["command"] = ["torchrun", "--nproc-per-node=8", "train.py"]
            c["volumeMounts"] = [{"name": "kube-api-access-x7k2p", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
            c["livenessProbe"] = {"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 10}
            c["securityContext"] = {"allowPrivilegeEscalation": False}
    if out.get("kind") == "Pod":
        out.setdefault("status", {})["qosClass"] = "Guaranteed"
    return out


def verdicts(objects: list[dict], run: str, now: datetime) -> tuple:
    """What the monitor decides of the run: its diagnosis, stall verdict, card and run grouping."""
    d = evaluate(objects, run, now)
    objs = find_run(objects, run, None)
    card = build_phase_card(d, workspace="vision", operator_hints_allowed=False)
    grouping = {r: sorted(f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}" for o in found)
                for r, found in group_by_run([o for o in objects if (o.get("metadata") or {})
                                              .get("namespace") == objs.namespace]).items()}
    return (d.model_dump(mode="json"), classify(d, objs, now, Thresholds()),
            card.model_dump(mode="json"), grouping)


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_gives_the_same_verdicts_on_what_the_cache_keeps(name: str) -> None:
    objects, run, now = _example(name)
    whole = verdicts(objects, run, now)
    assert verdicts([trim(o) for o in objects], run, now) == whole
    assert verdicts([trim(bloated(o)) for o in objects], run, now) == whole


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_cache_keeps_less_than_it_is_given(name: str) -> None:
    objects, _, _ = _example(name)
    for obj in objects:
        fat, kept = bloated(obj), trim(bloated(obj))
        assert len(json.dumps(kept)) < len(json.dumps(fat))
        meta = kept.get("metadata") or {}
        assert "managedFields" not in meta
        assert LAST_APPLIED not in (meta.get("annotations") or {})
        for spec in _pod_specs(kept):
            assert "affinity" not in spec
            for c in spec.get("containers") or []:
                assert not {"env", "command", "volumeMounts", "livenessProbe"} & set(c)
            assert all(v.get("name") != TOKEN_VOLUME["name"] for v in spec.get("volumes") or [])


def test_what_the_engine_reads_of_a_pod_is_kept() -> None:
    """A pod as the kubelet reports it (Kubernetes 1.31 `kubectl get pod -o json`, abridged): the
    engine's fields stay, the annotations it reads stay, the rest goes."""
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": "team-vision", "uid": "u-1",
                     "creationTimestamp": "2026-11-30T10:00:10Z", "labels": {"job-name": "llama"},
                     "annotations": {"taugrid.io/submitted-by": "alice@example.com",
                                     "kubectl.kubernetes.io/default-container": "trainer",
                                     "batch.kubernetes.io/job-completion-index": "0",
                                     "prometheus.io/scrape": "true", LAST_APPLIED: "{}"},
                     "ownerReferences": [{"kind": "Job", "name": "llama", "uid": "j-1", "controller": True}],
                     "managedFields": MANAGED_FIELDS},
        "spec": {"nodeName": "gpu-1", "restartPolicy": "Never", "nodeSelector": {"pool": "a100"},
                 "containers": [{"name": "trainer", "image": "train:1", "env": ENV,
                                 "resources": {"limits": {"nvidia.com/gpu": "8"}},
                                 "ports": [{"containerPort": 8265}]}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "blob-training"}},
                             TOKEN_VOLUME],
                 "dnsPolicy": "ClusterFirst", "serviceAccountName": "default"},
        "status": {"phase": "Running", "podIP": "10.244.1.180", "qosClass": "Guaranteed",
                   "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:01:40Z"}],
                   "containerStatuses": [{"name": "trainer", "ready": True, "restartCount": 2,
                                          "state": {"running": {"startedAt": "2026-11-30T10:01:00Z"}},
                                          "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                                          "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]},
    }
    kept = trim(pod)
    assert set(kept["metadata"]["annotations"]) == {"taugrid.io/submitted-by",
                                                    "kubectl.kubernetes.io/default-container",
                                                    "batch.kubernetes.io/job-completion-index"}
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["ownerReferences"] == pod["metadata"]["ownerReferences"]
    assert kept["spec"] == {"nodeName": "gpu-1", "restartPolicy": "Never", "nodeSelector": {"pool": "a100"},
                            "containers": [{"name": "trainer", "image": "train:1",
                                            "ports": [{"containerPort": 8265}]}],
                            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "blob-training"}}]}
    status = kept["status"]
    assert "qosClass" not in status and status["podIP"] == "10.244.1.180"
    assert status["containerStatuses"][0] == {k: v for k, v in pod["status"]["containerStatuses"][0].items()
                                              if k != "volumeMounts"}
    assert pod["metadata"]["managedFields"]  # the object it was given is left as it was


def test_a_wrong_typed_field_is_kept_for_the_engine_to_name_and_a_null_one_is_absent() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": "oops"},
           "spec": {"containers": "not-a-list"}, "status": {"conditions": None, "phase": 7}}
    assert trim(pod) == {**pod, "status": {"phase": 7}}
