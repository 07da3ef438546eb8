"""Layer 6: the health of the nodes the run's pods are bound to — the `GPU/node health` check.

Pure. Signals (shared/reference/node-health.md): the `Ready` and pressure
conditions; GPU problem conditions, whose polarity is inverted (`True` is
the problem: AKS node-problem-detector's `GPUMissing`, `XIDErrors`,
`NVLinkStatusInactive`, …); the `unreachable`/`not-ready` taints and any
`NoExecute` taint; `nvidia.com/gpu` capacity above allocatable (the device
plugin withdrew a GPU it marked unhealthy and never gives it back); and the
run's own pods' `allocatedResourcesStatus` (KEP-4680). A condition that is
absent is unknown, never healthy; a node nobody could read is never `done`.
XIDs the NVIDIA catalogue calls application errors are not node faults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import registry
from .linkage import meta
from .models import Finding, PhaseResult, PhaseState
from .phases.common import RunContext, clip, result
from .phases.container_failures import kubelet_rejection
from .podfacts import condition, is_terminal

NAME = registry.NODE_HEALTH.name
LAYER = registry.NODE_HEALTH.layer
GPU = "nvidia.com/gpu"
# AKS NPD GPU conditions (learn.microsoft.com/azure/aks/node-problem-detector) and common peers.
GPU_PROBLEM_CONDITIONS = ("GPUMissing", "XIDErrors", "GPUXIDErrors", "NVLinkStatusInactive",
                          "IBLinkFlapping",
                          "UnhealthyNvidiaDevicePlugin", "UnhealthyNvidiaDCGMServices", "GPUClockThrottling")
PRESSURE = ("MemoryPressure", "DiskPressure", "PIDPressure")
FAULT_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
# NVIDIA XID catalogue: application errors, not node faults (k8s-device-plugin internal/rm/health.go).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# XID numbers as they are quoted (SPEC §11 "Nodes"; node-health.md): the kernel's own line
# `NVRM: Xid (PCI:0000:3b:00): 79, pid=…` (older drivers: `Xid (0000:3b:00): 48`), dcgm-exporter's
# `DCGM_FI_DEV_XID_ERRORS{…,err_code="31",…} 31`, and the short forms `Xid 79`, `xid=79`, `Xid=94`.
_XID = re.compile(
    r"\bXid \((?:PCI:)?[0-9a-f:.]+\):\s*(?P<kernel>\d+)"
    r"|DCGM_FI_DEV_XID_ERRORS\{[^}]*?err_code=\"(?P<dcgm>\d+)\""
    r"|DCGM_FI_DEV_XID_ERRORS(?:\{[^}]*\})?\s+(?P<gauge>\d+)"
    r"|\bxid(?:s)?[\s=:]+(?P<short>\d+)",
    re.IGNORECASE)


def xids_in(message: str) -> set[int]:
    """Every XID number a node message quotes, in any of the formats above (0 is "No Error")."""
    found = set()
    for match in _XID.finditer(message):
        number = next(g for g in match.groups() if g is not None)
        if int(number):
            found.add(int(number))
    return found

NODE_FAULT = Finding(reason="node.fault", owner="node-pool-owner", transient=False,
                     next_action="A node the run's pods are bound to is unhealthy: the node-pool owner "
                     "drains and repairs it (`tau cluster validate nodes`); then resume the run on healthy "
                     "nodes.")
HEALTHY = Finding(reason="node.ok",
                  owner="node-pool-owner", transient=False, next_action="The run's nodes report healthy.")
UNREAD = Finding(reason="node.unread", owner="node-pool-owner", transient=None,
                 next_action="The run's nodes could not be read, so their health is not known.")


@dataclass(frozen=True)
class NodeFault:
    node: str
    reason: str


def _quantity(value: object) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def node_faults(node: dict) -> tuple[list[str], list[str], list[str]]:
    """(faults, notes, application XIDs) of one Node object."""
    name = meta(node).get("name") or "?"
    faults: list[str] = []
    notes: list[str] = []
    app_xids: list[str] = []
    ready = condition(node, "Ready")
    if ready is None:
        notes.append("Ready not reported")
    elif ready.get("status") != "True":
        faults.append(f"Ready={ready.get('status')} {ready.get('reason') or ''}: "
                      f"{clip(ready.get('message') or '', 160)}".rstrip(": "))
    for ctype in PRESSURE:
        cond = condition(node, ctype)
        if cond is not None and cond.get("status") == "True":
            faults.append(f"{ctype}=True {cond.get('reason') or ''}".rstrip())
    reported = False
    for ctype in GPU_PROBLEM_CONDITIONS:
        cond = condition(node, ctype)
        if cond is None:
            continue
        reported = True
        if cond.get("status") != "True":
            continue
        message = cond.get("message") or ""
        xids = xids_in(message)
        if "XID" in ctype.upper() and xids and xids <= APPLICATION_XIDS:
            app_xids.append(f"{name}: {ctype} {clip(message, 160)} (application XID, not a node fault)")
            continue
        faults.append(f"{ctype}=True {cond.get('reason') or ''}: {clip(message, 160)}".rstrip(": "))
    if not reported:
        notes.append("GPU problem conditions not reported")
    for taint in (node.get("spec") or {}).get("taints") or []:
        key, effect = taint.get("key") or "", taint.get("effect") or ""
        if key in FAULT_TAINTS or effect == "NoExecute":
            faults.append(f"taint {key}:{effect}")
    status = node.get("status") or {}
    capacity = _quantity((status.get("capacity") or {}).get(GPU))
    allocatable = _quantity((status.get("allocatable") or {}).get(GPU))
    if capacity is not None and allocatable is not None and capacity > allocatable:
        faults.append(f"{GPU} capacity {capacity} > allocatable {allocatable}: "
                      f"{capacity - allocatable} GPU(s) withdrawn as unhealthy")
    if (node.get("spec") or {}).get("unschedulable"):
        notes.append("cordoned")
    return faults, notes, app_xids


def _pod_device_faults(pods: list[dict]) -> list[str]:
    out = []
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            for entry in cs.get("allocatedResourcesStatus") or []:
                for res in entry.get("resources") or []:
                    if res.get("health") == "Unhealthy":
                        out.append(f"{meta(pod).get('name')}: {entry.get('name')} {res.get('resourceID')} "
                                   f"Unhealthy {clip(res.get('message') or '', 120)}".rstrip())
    return out


def gpu_node_health(ctx: RunContext, nodes: dict[str, dict], unread: dict[str, str],
                    dcgm: dict[str, list[str]] | None = None) -> PhaseResult | None:
    """The check for the nodes of the run's live pods; None when no pod is bound to a node.

    ``nodes`` are the Node objects that were read, ``unread`` the run's nodes
    that could not be (node → why: absent from the dump, permission denied).
    """
    bound = [p for p in ctx.objs.pods if (p.get("spec") or {}).get("nodeName")]
    # Live pods, and pods the kubelet rejected for their node (SPEC §4: layer 6 when the node's
    # condition shows it, e.g. DiskPressure).
    pods = [p for p in bound if not is_terminal(p) or kubelet_rejection(p) is not None]
    if not pods and ctx.terminal() != "succeeded":
        # Every pod ended and some failed: the nodes they ran on still explain it (SPEC §5a).
        pods = [p for p in bound if (p.get("status") or {}).get("phase") == "Failed"]
    names = sorted({(p.get("spec") or {}).get("nodeName") for p in pods})
    if not names:
        return None
    evidence: list[str] = []
    faulty: list[str] = []
    notes: dict[str, list[str]] = {}
    for name in names:
        node = nodes.get(name)
        if node is None:
            continue
        faults, node_notes, app_xids = node_faults(node)
        evidence += [f"{name}: {f}" for f in faults] + app_xids
        if faults:
            faulty.append(f"{name}: {faults[0]}")
        if node_notes:
            notes[name] = node_notes
    device = _pod_device_faults(pods)
    evidence += device
    faulty += device
    for name, faults in (dcgm or {}).items():  # --run-profile: the same scrape's DCGM health fields
        if name in names:
            evidence += [f"{name}: {f} (dcgm-exporter)" for f in faults]
            faulty += [f"{name}: {f}" for f in faults]
    missing = [n for n in names if n not in nodes]
    if faulty:
        more = f" (+{len(faulty) - 1} more)" if len(faulty) > 1 else ""
        return result(NAME, LAYER, PhaseState.WARNING, f"{faulty[0]}{more}", NODE_FAULT, evidence)
    if missing:
        why = sorted({unread.get(n, "not read") for n in missing})
        return result(NAME, LAYER, PhaseState.SKIPPED,
                      f"unavailable: {'; '.join(why)} ({len(missing)}/{len(names)} nodes)", UNREAD, evidence)
    cordoned = [n for n, ns in notes.items() if "cordoned" in ns]
    unknown = sorted({note for ns in notes.values() for note in ns if note != "cordoned"})
    summary = f"{len(names)}/{len(names)} nodes healthy"
    if cordoned:
        summary += f"; cordoned: {', '.join(cordoned[:3])}" + (" …" if len(cordoned) > 3 else "")
    if unknown:
        summary += f" ({'; '.join(unknown)})"
    return result(NAME, LAYER, PhaseState.DONE, summary, HEALTHY, evidence)


__all__ = ["APPLICATION_XIDS", "GPU_PROBLEM_CONDITIONS", "NAME", "gpu_node_health", "node_faults"]
