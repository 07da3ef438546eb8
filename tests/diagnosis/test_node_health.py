"""Layer 6, GPU/node health (SPEC §5a): case table of real Node shapes.

Node shapes follow shared/reference/node-health.md: kubelet condition
reasons/messages (kubernetes/api core/v1 types.go; `kubectl describe node`),
the node lifecycle controller's `NodeStatusUnknown` and unreachable taints
(well_known_taints.go), AKS node-problem-detector GPU conditions
(learn.microsoft.com/azure/aks/node-problem-detector), and capacity above
allocatable after an XID 94 (NVIDIA/gpu-operator#1065).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import k8s
from workers.diagnosis.evaluate import evaluate

NOW = k8s.T0 + timedelta(minutes=30)
NODE = "aks-a100-38141759-vmss000001"
BEAT = "2026-11-30T10:29:40Z"


def node(**changes: Any) -> dict[str, Any]:
    """A healthy AKS A100 node as `kubectl get node -o json` prints it."""
    obj: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "labels": {"kubernetes.azure.com/agentpool": "a100",
                                              "kubernetes.io/hostname": NODE,
                                              "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
        "spec": {"providerID": f"azure:///subscriptions/0/.../{NODE}",
                 "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "96", "memory": "1843313756Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "allocatable": {"cpu": "95", "memory": "1730000000Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available", "lastHeartbeatTime": BEAT},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure",
                 "message": "kubelet has no disk pressure", "lastHeartbeatTime": BEAT},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID",
                 "message": "kubelet has sufficient PID available", "lastHeartbeatTime": BEAT},
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status", "lastHeartbeatTime": BEAT},
                {"type": "GPUMissing", "status": "False", "reason": "NoGPUMissing",
                 "message": "Observed GPU count matches expected GPU count", "lastHeartbeatTime": BEAT},
                {"type": "XIDErrors", "status": "False", "reason": "NoXIDErrors",
                 "message": "No XID errors present in kernel logs", "lastHeartbeatTime": BEAT},
            ],
        },
    }
    for path, value in changes.items():
        target = obj
        *parents, last = path.split(".")
        for part in parents:
            target = target[part]
        target[last] = value
    if "metadata.name" in changes and "metadata.labels" not in changes:  # the kubelet's own label
        obj["metadata"]["labels"]["kubernetes.io/hostname"] = changes["metadata.name"]
    return obj


def set_condition(obj: dict, ctype: str, status: str, reason: str, message: str) -> dict:
    obj = copy.deepcopy(obj)
    for cond in obj["status"]["conditions"]:
        if cond["type"] == ctype:
            cond.update(status=status, reason=reason, message=message)
            return obj
    obj["status"]["conditions"].append({"type": ctype, "status": status, "reason": reason, "message": message})
    return obj


def run_objects(**pod_kw: Any) -> list[dict]:
    """A running, ready one-pod Job on NODE (tests/fixtures/k8s.py shapes)."""
    j = k8s.job("llama-ft-7b", suspend=False, active=1)
    pod = k8s.job_pod(j, node=NODE, phase="Running", containers=[k8s.running()], **pod_kw)
    return [j, k8s.workload(j, state="admitted"), pod]


UNREACHABLE = set_condition(node(), "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
UNREACHABLE["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                                  "timeAdded": "2026-11-30T10:20:11Z"},
                                 {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule",
                                  "timeAdded": "2026-11-30T10:20:06Z"}]
WITHDRAWN = node(**{"status.allocatable": {"cpu": "95", "memory": "1730000000Ki", "nvidia.com/gpu": "7"}})
HARDWARE_XID = set_condition(node(), "XIDErrors", "True", "XIDErrorsFound",
                             "XID errors present in kernel logs: Xid 79 (GPU has fallen off the bus)")
APP_XID = set_condition(node(), "XIDErrors", "True", "XIDErrorsFound",
                        "XID errors present in kernel logs: Xid 13 (Graphics Engine Exception)")
PRESSURE = set_condition(node(), "MemoryPressure", "True", "KubeletHasInsufficientMemory",
                         "kubelet has insufficient memory available")
CORDONED = node(**{"spec.unschedulable": True})
NO_GPU_CONDITIONS = node()
NO_GPU_CONDITIONS["status"]["conditions"] = [c for c in NO_GPU_CONDITIONS["status"]["conditions"]
                                             if c["type"] not in ("GPUMissing", "XIDErrors")]

CASES = [
    ("NotReady + unreachable taint", UNREACHABLE, "warning", "Ready=Unknown NodeStatusUnknown"),
    ("GPU gone from allocatable", WITHDRAWN, "warning", "capacity 8 > allocatable 7"),
    ("hardware XID condition", HARDWARE_XID, "warning", "XIDErrors=True"),
    ("MemoryPressure", PRESSURE, "warning", "MemoryPressure=True"),
    ("application XID is not a node fault", APP_XID, "done", "1/1 nodes healthy"),
    ("cordon alone is not a fault", CORDONED, "done", "cordoned: " + NODE),
    ("healthy", node(), "done", "1/1 nodes healthy"),
    ("absent GPU conditions are unknown, not healthy", NO_GPU_CONDITIONS, "done",
     "GPU problem conditions not reported"),
]


@pytest.mark.parametrize(("what", "node_obj", "state", "text"), CASES, ids=[c[0] for c in CASES])
def test_node_shapes(what: str, node_obj: dict, state: str, text: str) -> None:
    d = evaluate([*run_objects(), node_obj], "llama-ft-7b", NOW)
    check = d.phase("GPU/node health")
    assert check.state.value == state and check.layer == 6 and text in check.summary
    if state == "warning":
        assert d.first_incomplete == "GPU/node health" and d.owner == "node-pool-owner"
        assert d.transient is False and d.recovery is not None and d.recovery.action == "fix-then-resubmit"
    else:
        assert d.first_incomplete != "GPU/node health"


def test_healthy_nodes_leave_the_trees_answer_unchanged() -> None:
    crash = run_objects()
    crash[2] = k8s.job_pod(crash[0], node=NODE, phase="Running",
                           containers=[k8s.crash_loop(exit_code=1, reason="Error")])
    with_node = evaluate([*crash, node()], "llama-ft-7b", NOW)
    without = evaluate(crash, "llama-ft-7b", NOW)
    assert with_node.first_incomplete == without.first_incomplete == "Container start"
    # …but a node fault wins over what the pod then shows.
    assert evaluate([*crash, UNREACHABLE], "llama-ft-7b", NOW).first_incomplete == "GPU/node health"


def test_the_runs_node_absent_from_the_dump_is_unknown() -> None:
    other = node(**{"metadata.name": "aks-a100-38141759-vmss000009"})
    check = evaluate([*run_objects(), other], "llama-ft-7b", NOW).phase("GPU/node health")
    assert check.state.value == "skipped" and check.summary == "unavailable: absent from the dump (1/1 nodes)"


def test_unhealthy_allocated_device_on_the_pod_is_a_fault() -> None:
    objs = run_objects()
    objs[2]["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [
        {"name": "nvidia.com/gpu", "resources": [{"resourceID": "GPU-3b6e2a4c", "health": "Unhealthy"}]}]
    check = evaluate([*objs, node()], "llama-ft-7b", NOW).phase("GPU/node health")
    assert check.state.value == "warning" and "GPU-3b6e2a4c Unhealthy" in check.summary


def test_cli_dump_with_nodes_gets_the_check_in_json(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(k8s.kube_list(*run_objects(), UNREACHABLE)))
    done = subprocess.run([sys.executable, "-m", "workers.cli", "diagnose", "llama-ft-7b", "--from-file", str(dump),
                           "--now", "2026-11-30T10:30:00Z", "--format", "json"], capture_output=True, text=True,
                          timeout=60)
    doc = json.loads(done.stdout)
    assert doc["first_incomplete"] == "GPU/node health" and doc["layer"] == 6
    assert doc["checks"][0]["name"] == "GPU/node health" and doc["checks"][0]["owner"] == "node-pool-owner"


def test_dcgm_health_from_the_run_profile_makes_a_healthy_looking_node_a_fault() -> None:
    d = evaluate([*run_objects(), node()], "llama-ft-7b", NOW,
                 dcgm_health={NODE: ["GPU 3: XID 79 GPU has fallen off the bus"]})
    check = d.phase("GPU/node health")
    assert check.state.value == "warning" and "XID 79" in check.summary
    assert any("(dcgm-exporter)" in e for e in check.evidence)
