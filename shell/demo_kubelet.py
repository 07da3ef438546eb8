"""The demo cluster's kubelet: what a node does with a pod created on it through the API.

`cluster validate nodes` (and the *Validate these nodes* button) creates one pod per node,
pinned with `spec.nodeName`, as the caller. On a real cluster the node's kubelet then admits
or rejects it and runs it to its end; this plays that part for the demo, on the emulator's own
loop, one step per event (no timers, no sleeps), with the times of the demo's clock:

* **admission** as the kubelet's (`pkg/kubelet/lifecycle/predicate.go`): a pod asking for more
  of an extended resource than the node has free — `nvidia.com/gpu` held by the run's own pods —
  is rejected: phase `Failed`, reason `OutOfnvidia.com/gpu`, message `Pod was rejected: Node
  didn't have enough resource: nvidia.com/gpu, requested: 8, used: 8, capacity: 8`
  (`kubelet.go` `rejectPod`, `InsufficientResourceError`);
* **running**: `Running` with the container's `state.running`, then `Succeeded` (exit 0,
  `Completed`) or `Failed` (the exit code, `Error`), with the kubelet-stamped log;
* **the programs**: the container's `sh -c "a && b && c"` runs step by step as the node's GPUs
  answer. The demo's nodes have NVIDIA's tools: `nvidia-smi -L`, `nvidia-smi -q -d …` and
  `dcgmi diag -r 1` print what they print on an 8×A100 node, and on a node whose NPD condition
  `XIDErrors` names Xid 79 its last GPU has fallen off the bus (as its dcgm-exporter reports 7
  GPUs): `nvidia-smi` prints NVML's "GPU is lost" line and exits 15 ("The GPU has fallen off the
  bus or has otherwise become inaccessible", nvidia-smi(1) RETURN VALUE), so the `&&` chain
  stops there. Any other program is not in the demo's image: `sh: 1: prog: not found`, exit 127.

Pods the demo seeds (they carry a status already) and pods with no node are left alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .kube_emulator import KubeEmulator

GPU = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU feature discovery: `NVIDIA-A100-SXM4-80GB`
# The PCI bus ids of an 8×A100 SXM4 board (DGX A100 / Azure ND A100 v4), in nvidia-smi's order.
BUS_IDS = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")
DRIVER, CUDA, DCGM = "550.90.07", "12.4", "4.2.3"
A100_DEVICE_ID = "20b2"  # PCI device id of an A100-SXM4-80GB
EXIT_GPU_LOST = 15  # nvidia-smi(1): "The GPU has fallen off the bus or has otherwise become inaccessible"
EXIT_NOT_FOUND = 127  # sh: command not found
LOST_XIDS = ("Xid 79",)  # NPD's XIDErrors message naming a GPU that fell off the bus
CONTAINER_RUNTIME = "containerd://"


@dataclass(frozen=True)
class NodeGPUs:
    """A node's GPUs as its tools see them: how many, their name, which are lost."""

    node: str
    product: str
    count: int
    lost: frozenset[int]

    def bus(self, index: int) -> str:
        return f"00000000:{BUS_IDS[index % len(BUS_IDS)]}:00.0"

    def uuid(self, index: int) -> str:
        return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'{self.node}/gpu/{index}')}"


def node_gpus(node: dict[str, Any]) -> NodeGPUs:
    """The GPUs behind a demo Node: its capacity, its product label, and a GPU lost when its
    node-problem-detector condition `XIDErrors=True` names Xid 79 (the last one, as the demo's
    dcgm-exporter leaves it out)."""
    status = node.get("status") or {}
    count = int(str((status.get("capacity") or {}).get(GPU) or 0))
    label = ((node.get("metadata") or {}).get("labels") or {}).get(PRODUCT_LABEL, "NVIDIA-GPU")
    product = label.replace("-", " ", 1)  # GFD writes `NVIDIA-A100-SXM4-80GB` for `NVIDIA A100-SXM4-80GB`
    lost: frozenset[int] = frozenset()
    for cond in status.get("conditions") or []:
        if cond.get("type") == "XIDErrors" and cond.get("status") == "True" and count and \
                any(xid in str(cond.get("message") or "") for xid in LOST_XIDS):
            lost = frozenset({count - 1})
    name = (node.get("metadata") or {}).get("name", "")
    return NodeGPUs(node=name, product=product, count=count, lost=lost)


def _lost_line(gpus: NodeGPUs, index: int) -> str:
    # NVML_ERROR_GPU_IS_LOST as nvidia-smi reports it (its bus id with a 4-digit domain).
    return (f"Unable to determine the device handle for GPU {gpus.bus(index)[4:]}: GPU is lost.  "
            "Reboot the system to recover this GPU")


def nvidia_smi_list(gpus: NodeGPUs, _now: datetime) -> tuple[int, list[str]]:
    """`nvidia-smi -L`: one line per GPU; a lost one is NVML's error line, and exit 15."""
    lines = [_lost_line(gpus, i) if i in gpus.lost else f"GPU {i}: {gpus.product} (UUID: {gpus.uuid(i)})"
             for i in range(gpus.count)]
    return (EXIT_GPU_LOST if gpus.lost else 0), lines


# One GPU's part of `nvidia-smi -q -d ECC,ROW_REMAPPER` on an A100 with no error (driver 550).
ECC_AND_REMAPPED_ROWS = """\
    ECC Mode
        Current                           : Enabled
        Pending                           : Enabled
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 0
            DRAM Correctable              : 0
            DRAM Uncorrectable            : 0
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 0
        Pending                           : No
        Remapping Failure Occurred        : No"""


def nvidia_smi_query(gpus: NodeGPUs, now: datetime) -> tuple[int, list[str]]:
    """`nvidia-smi -q -d ECC,ROW_REMAPPER`: the NVSMI LOG with each GPU's ECC counters and remapped
    rows (all zero on a healthy A100)."""
    if gpus.lost:
        return EXIT_GPU_LOST, [_lost_line(gpus, min(gpus.lost))]
    lines = ["", "==============NVSMI LOG==============", "",
             f"Timestamp                                 : {now.strftime('%a %b %d %H:%M:%S %Y')}",
             f"Driver Version                            : {DRIVER}",
             f"CUDA Version                              : {CUDA}", "",
             f"Attached GPUs                             : {gpus.count}"]
    for i in range(gpus.count):
        lines += [f"GPU {gpus.bus(i)}", *ECC_AND_REMAPPED_ROWS.splitlines(), ""]
    return 0, lines


def dcgmi_diag(gpus: NodeGPUs, _now: datetime) -> tuple[int, list[str]]:
    """`dcgmi diag -r 1` (the quick, deployment-only level) as DCGM 4 prints its table (the shape of
    tests/slack/test_validate_nodes_button.py's failing row)."""
    rule = "+---------------------------+------------------------------------------------+"

    def row(name: str, result: str) -> str:
        return f"| {name:<25} | {result:<46} |"

    lost = sorted(gpus.lost)  # (the validation's `nvidia-smi -L` stops a chain before this on such a node)
    deployment = "Fail - GPU " + ", ".join(map(str, lost)) + ": DCGM_FR_GPU_LOST" if lost else "Pass"
    def part(title: str) -> str:
        return f"|-----  {title}  ".ljust(28, "-") + "+" + "-" * 48 + "|"

    ids = ",".join([A100_DEVICE_ID] * gpus.count)
    lines = ["Successfully ran diagnostic for group.", rule, row("Diagnostic", "Result"),
             rule.replace("-", "="), part("Metadata"), row("DCGM Version", DCGM),
             row("Driver Version Detected", DRIVER), row("GPU Device IDs Detected", ids[:46]),
             part("Deployment"), row("Deployment", deployment), rule]
    return (1 if lost else 0), lines  # a failed diagnostic exits non-zero


PROGRAMS: dict[str, Callable[[NodeGPUs, datetime], tuple[int, list[str]]]] = {
    "nvidia-smi -L": nvidia_smi_list,
    "nvidia-smi -q": nvidia_smi_query,
    "dcgmi diag": dcgmi_diag,
}


def run_script(script: str, gpus: NodeGPUs, now: datetime) -> tuple[int, list[str]]:
    """`sh -c script` for the `a && b && c` the validation runs: each step in turn, stopping at
    the first that fails; its exit code is the container's."""
    out: list[str] = []
    for step in (s.strip() for s in script.split("&&")):
        program = next((run for prefix, run in PROGRAMS.items() if step.startswith(prefix)), None)
        if program is None:
            out.append(f"sh: 1: {step.split()[0] if step.split() else step}: not found")
            return EXIT_NOT_FOUND, out
        code, lines = program(gpus, now)
        out += lines
        if code:
            return code, out
    return 0, out


def _script(container: dict[str, Any]) -> str:
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    if words[:2] == ["sh", "-c"] and len(words) > 2:
        return str(words[2])
    return " ".join(str(w) for w in words)


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _gpus_asked(pod: dict[str, Any]) -> int:
    """The pod's `nvidia.com/gpu` request (limits stand for requests of an extended resource)."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        total += int(str((res.get("requests") or {}).get(GPU) or (res.get("limits") or {}).get(GPU) or 0))
    return total


class DemoKubelet:
    """Every demo node's kubelet, in one: see the module docstring. ``now`` is the demo's clock."""

    def __init__(self, emulator: KubeEmulator, now: Callable[[], datetime]) -> None:
        self.emulator = emulator
        self.now = now

    def attach(self) -> None:
        self.emulator.on_change.append(self.on_change)

    def on_change(self, kind: str, obj: dict[str, Any]) -> None:
        """A new pod bound to a node and with no status yet is the kubelet's to admit."""
        if kind != "ADDED" or obj.get("kind") != "Pod" or (obj.get("status") or {}).get("phase"):
            return
        if (obj.get("spec") or {}).get("nodeName"):
            self.emulator.call_soon(self._admit, obj)

    def _objects(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.emulator.objects() if o.get("kind") == kind]

    def _admit(self, pod: dict[str, Any]) -> None:
        node_name = pod["spec"]["nodeName"]
        node = next((n for n in self._objects("Node") if n["metadata"]["name"] == node_name), None)
        if node is None:  # the API server accepts a nodeName with no such node; nothing ever runs it
            return
        asked = _gpus_asked(pod)
        if asked:
            capacity = int(str(((node.get("status") or {}).get("allocatable") or {}).get(GPU) or 0))
            used = sum(_gpus_asked(p) for p in self._objects("Pod")
                       if (p.get("spec") or {}).get("nodeName") == node_name
                       and p["metadata"]["uid"] != pod["metadata"].get("uid")
                       and (p.get("status") or {}).get("phase") in ("Pending", "Running"))
            if asked > capacity - used:
                pod["status"] = {"phase": "Failed", "reason": f"OutOf{GPU}", "qosClass": "BestEffort",
                                 "message": f"Pod was rejected: Node didn't have enough resource: {GPU}, "
                                            f"requested: {asked}, used: {used}, capacity: {capacity}"}
                self.emulator.upsert(pod)
                return
        started = self.now()
        container = pod["spec"]["containers"][0]
        container_id = f"{CONTAINER_RUNTIME}{uuid.uuid5(uuid.NAMESPACE_URL, pod['metadata']['uid']).hex}"
        running = {"running": {"startedAt": _stamp(started)}}
        pod["status"] = self._status(pod, node, "Running", started, running, container_id)
        self.emulator.upsert(pod)
        code, lines = run_script(_script(container), node_gpus(node), started)
        finished = self.now()
        self.emulator.pod_logs[(pod["metadata"]["namespace"], pod["metadata"]["name"], container["name"])] = \
            "".join(f"{finished.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z {line}\n" for line in lines)
        terminated = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                     "startedAt": _stamp(started), "finishedAt": _stamp(finished),
                                     "containerID": container_id}}
        pod["status"] = self._status(pod, node, "Succeeded" if code == 0 else "Failed", started, terminated,
                                     container_id)
        self.emulator.call_soon(self.emulator.upsert, pod)

    @staticmethod
    def _status(pod: dict[str, Any], node: dict[str, Any], phase: str, started: datetime,
                state: dict[str, Any], container_id: str) -> dict[str, Any]:
        """A pod's status as the kubelet writes it (`kubectl get pod -o json`)."""
        running = phase == "Running"
        ended = "" if running else ("PodCompleted" if phase == "Succeeded" else "PodFailed")
        at = _stamp(started)

        def cond(kind: str, ok: bool, reason: str = "") -> dict[str, Any]:
            return {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None,
                    "lastTransitionTime": at, **({"reason": reason} if reason else {})}

        container = pod["spec"]["containers"][0]
        host = next((a.get("address") for a in (node.get("status") or {}).get("addresses") or []
                     if a.get("type") == "InternalIP"), "10.224.0.10")
        return {
            "phase": phase, "hostIP": host, "podIP": "10.244.3.17", "startTime": at, "qosClass": "BestEffort",
            "conditions": [cond("PodReadyToStartContainers", running), cond("Initialized", True),
                           cond("Ready", running, ended), cond("ContainersReady", running, ended),
                           cond("PodScheduled", True)],
            "containerStatuses": [{"name": container["name"], "image": container["image"],
                                   "imageID": f"{container['image'].split(':')[0]}@sha256:"
                                              + uuid.uuid5(uuid.NAMESPACE_URL, container["image"]).hex * 2,
                                   "containerID": container_id, "ready": running, "started": running,
                                   "restartCount": 0, "state": state}],
        }


__all__ = ["DemoKubelet", "NodeGPUs", "node_gpus", "run_script"]
