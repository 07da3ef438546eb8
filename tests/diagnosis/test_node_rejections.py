"""SPEC §4's node-side rows: the kubelet rejected the pod on its node (node-pool-owner, layer 6
when the node's condition shows it), and a run's own claim that cannot bind (researcher).

Pod shapes: a pod the kubelet rejects at admission never starts a container; it keeps its node and
gets `status: {phase: Failed, reason, message: "Pod was rejected: …", startTime}` and nothing else
(kubelet pkg/kubelet/lifecycle/predicate.go and kubelet.go rejectPod). Messages, each with its
source in docs/reference/training-logs-ranks.md §5:
* UnexpectedAdmissionError — the device manager's `Allocate failed due to requested number of
  devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected`
  (kubelet cm/devicemanager; GKE's GPU time-sharing doc shows the same status shape);
* Evicted — `The node had condition: [DiskPressure].` (kubelet eviction admission; argo-workflows'
  and public runbooks' pastes);
* OutOfcpu — `Node didn't have enough resource: cpu, requested: …, used: …, capacity: …`
  (kubelet lifecycle/predicate.go).
The unbound claim: kube-scheduler's VolumeBinding reason `pod has unbound immediate
PersistentVolumeClaims` in the usual `0/N nodes are available: …` message.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.diagnosis.test_node_health import node, set_condition
from tests.fixtures import k8s
from workers.diagnosis.evaluate import evaluate

NOW = k8s.T0 + timedelta(minutes=30)
NODE = "aks-a100-38141759-vmss000001"


def rejected_pod(reason: str, message: str) -> list[dict]:
    j = k8s.job("llama-ft-7b", suspend=False, failed=1)
    pod = k8s.job_pod(j, node=NODE, phase="Running", containers=[k8s.running()])
    pod["status"] = {"phase": "Failed", "reason": reason, "message": f"Pod was rejected: {message}",
                     "startTime": k8s.ts(k8s.T0, 30)}
    return [j, k8s.workload(j, state="admitted"), pod]


REJECTIONS = [
    ("UnexpectedAdmissionError", "Allocate failed due to requested number of devices unavailable for "
     "nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected"),
    ("OutOfcpu", "Node didn't have enough resource: cpu, requested: 16000, used: 90000, capacity: 96000"),
    ("Evicted", "The node had condition: [DiskPressure]. "),
]


@pytest.mark.parametrize(("reason", "message"), REJECTIONS, ids=[r for r, _m in REJECTIONS])
def test_a_kubelet_rejection_is_the_node_pools(reason: str, message: str) -> None:
    d = evaluate(rejected_pod(reason, message), "llama-ft-7b", NOW)
    start = d.phase("Container start")
    assert start.state.value == "warning" and start.finding.owner == "node-pool-owner"
    assert start.reason.endswith("node.rejected") or "node.rejected" in start.reason
    assert reason in start.summary and NODE in start.summary
    assert d.owner == "node-pool-owner"


def test_disk_pressure_the_node_shows_makes_it_layer_6() -> None:
    pressured = set_condition(node(), "DiskPressure", "True", "KubeletHasDiskPressure",
                              "kubelet has disk pressure")
    d = evaluate(rejected_pod(*REJECTIONS[2]) + [pressured], "llama-ft-7b", NOW)
    assert d.first_incomplete == "GPU/node health" and d.layer == 6 and d.owner == "node-pool-owner"
    assert "DiskPressure=True" in d.phase("GPU/node health").summary


def test_a_crash_is_still_the_researchers() -> None:
    j = k8s.job("llama-ft-7b", suspend=False, failed=1)
    pod = k8s.job_pod(j, node=NODE, phase="Failed", containers=[k8s.terminated(exit_code=1)])
    d = evaluate([j, k8s.workload(j, state="admitted"), pod], "llama-ft-7b", NOW)
    assert d.phase("Container start").finding.owner == "researcher"


UNBOUND = ("0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/4 "
           "nodes are available: 4 Preemption is not helpful for scheduling.")


def pending_with_volume(volume: dict) -> list[dict]:
    j = k8s.job("llama-ft-7b", suspend=False, active=1)
    pod = k8s.job_pod(j, phase="Pending", containers=[k8s.waiting("trainer", reason="ContainerCreating")],
                      conditions=k8s.cond_unschedulable(UNBOUND))
    pod["spec"].pop("nodeName", None)
    pod["spec"].setdefault("volumes", []).append(volume)
    return [j, k8s.workload(j, state="admitted"), pod]


def test_the_runs_own_claim_that_cannot_bind_is_the_researchers() -> None:
    # A generic ephemeral volume (the pod's own claim) asking for a StorageClass that does not exist.
    own = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": "premium-ssd-v3",
        "resources": {"requests": {"storage": "2Ti"}}}}}}
    d = evaluate(pending_with_volume(own), "llama-ft-7b", NOW)
    sched = d.phase("Pod scheduling")
    assert sched.state.value == "warning" and sched.finding.owner == "researcher"
    assert "premium-ssd-v3" in d.next_action and d.owner == "researcher"


def test_a_platform_claim_that_cannot_bind_stays_the_platforms() -> None:
    shared = {"name": "data", "persistentVolumeClaim": {"claimName": "blob-training"}}
    objs = pending_with_volume(shared) + [k8s.pvc("blob-training", phase="Pending")]
    d = evaluate(objs, "llama-ft-7b", NOW)
    assert d.phase("Pod scheduling").finding.owner == "platform"
