"""Container failure evidence shared by Init containers and Container start.

Both phases read the same kubelet shapes — `CrashLoopBackOff` with
`lastState.terminated`, `CreateContainerConfigError`, a non-zero exit,
`OOMKilled` — and both hand them to the researcher; only the label differs
(`Init:fetch-data` as kubectl prints it, or the container's own name).
"""

from __future__ import annotations

import re

from ..models import Finding, PhaseState
from ..patterns import CONFIG_ACTION, CRASH_ACTION, OOM_ACTION
from ..podfacts import ContainerView, containers, describe_exit, exit_failed, where
from .common import PodVerdict, clip

CONFIG_ERRORS = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")

CRASH = Finding(reason="crash.exit", owner="researcher", transient=False, next_action=CRASH_ACTION)
OOM = Finding(reason="crash.oom", owner="researcher", transient=False, next_action=OOM_ACTION)
CONFIG = Finding(reason="crash.config", owner="researcher", transient=False, next_action=CONFIG_ACTION)


# Kubelet and runc texts (pkg/kubelet/kuberuntime, pkg/kubelet/volumemanager; runc's exec errors).
# Names are taken only as single-line, backtick-free runs: they end up inside a code span.
_MISSING_BINARY = re.compile(r'exec: "([^"`\s]{1,200})": executable file not found|'
                             r'exec: "?([^":`\s]{1,200})"?: no such file or directory|'
                             r'stat ([^:`\s]{1,200}): no such file or directory')
_MISSING_REF = re.compile(r'(secret|configmap) "([^"`\s]{1,253})" not found|'
                          r"couldn't find key ([^`\s]{1,253}) in (Secret|ConfigMap) ([^`\s/]{1,253})/"
                          r"([^`\s]{1,253})", re.IGNORECASE)
_MOUNT_VOLUMES = re.compile(r'unmounted volumes=\[([^\]`\n]{1,500})\]|for volume "([^"`\s]{1,253})"')


def config_finding(message: str) -> Finding:
    """Name what the container creation error names: a missing binary is not a missing Secret."""
    found = _MISSING_BINARY.search(message or "")
    if found:
        binary = next(g for g in found.groups() if g)
        return Finding(reason="crash.missing_binary", owner="researcher", transient=False, next_action=(
            f"The container's command `{binary}` is not in the image: fix the command/entrypoint in "
            "the run config or build it into the image, then resubmit (unchanged, it fails again)."))
    ref = _MISSING_REF.search(message or "")
    if ref:
        if ref.group(2):
            kind, name = ref.group(1).lower(), ref.group(2)
            label = "Secret" if kind == "secret" else "ConfigMap"
            what = f"{label} `{name}`, which does not exist in the namespace"
        else:
            what = f"key `{ref.group(3)}` of {ref.group(4)} `{ref.group(6)}`, which it does not have"
        return Finding(reason="crash.missing_reference", owner="researcher", transient=False, next_action=(
            f"The container references {what}: create it, or fix the reference in the run config."))
    return CONFIG


def volume_mount(pod: dict, message: str) -> Finding:
    """The mount failure's claim, from the pod's own volumes: the one in the event, not a guess."""
    found = _MOUNT_VOLUMES.search(message or "")
    names = (found.group(1) or "").replace(",", " ").split() if found and found.group(1) else (
        [found.group(2)] if found else [])
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or [] if isinstance(v, dict)}
    claims = [((volumes.get(n) or {}).get("persistentVolumeClaim") or {}).get("claimName") for n in names]
    claim = next((c for c in claims if c), None)
    if claim:
        target = f"PVC `{claim}` (`kubectl get pvc {claim} -n <namespace>`)"
    elif names:
        target = f"volume `{names[0]}` (its claim or storage)"
    else:
        target = "the pod's volumes (`kubectl describe pod` lists the failing one)"
    return Finding(reason="start.volume_mount", owner="platform", transient=False, next_action=(
        f"A volume could not be mounted: the platform checks {target} and its storage class."))


# The kubelet rejected the pod at admission on its node (SPEC §4): `status.phase: Failed` with one
# of these `status.reason`s and a `Pod was rejected: …` message (kubelet lifecycle/predicate.go,
# eviction/eviction_manager.go, cm/devicemanager; shapes in docs/reference/training-logs-ranks.md §5):
#   UnexpectedAdmissionError  `Allocate failed due to requested number of devices unavailable for
#                             nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected`
#   OutOfcpu / OutOfmemory / OutOfnvidia.com/gpu  `Node didn't have enough resource: cpu, …`
#   NodeAffinity              `Predicate NodeAffinity failed`
#   Evicted                   `The node had condition: [DiskPressure].` (admission) or
#                             `The node was low on resource: ephemeral-storage. …` (eviction)
#   NodeShutdown / Terminated `Pod was terminated in response to imminent node shutdown.`
_KUBELET_REJECTION = re.compile(r"^(?:UnexpectedAdmissionError|OutOf[\w./-]+|NodeAffinity|"
                                r"NodeSelectorMismatching|NodeShutdown|Evicted)$")
_NODE_CONDITION = re.compile(r"The node had condition: \[(?P<cond>[\w, ]+)\]|The node was low on resource: "
                             r"(?P<res>[\w./-]+)|imminent node shutdown", re.IGNORECASE)
NODE_REJECTED = Finding(
    reason="node.rejected", owner="node-pool-owner", transient=False,
    next_action="The kubelet rejected the pod on its node (device plugin allocation, node resources or a "
    "node condition such as DiskPressure): the node-pool owner repairs or drains that node; the run is "
    "then resubmitted (a Job's controller retries on another node while its backoff limit allows).")


def kubelet_rejection(pod: dict) -> tuple[str, str] | None:
    """(reason, message) when the kubelet rejected the pod at admission or evicted it for its node's
    condition; None otherwise. An `Evicted` pod counts only when the message names the node's
    condition or resource (Kueue's and the API's evictions have other wordings)."""
    status = pod.get("status") or {}
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "")
    if status.get("phase") != "Failed" or not _KUBELET_REJECTION.match(reason):
        return None
    if reason == "Evicted" and not _NODE_CONDITION.search(message):
        return None
    return reason, message


def node_condition_named(message: str) -> str | None:
    """The node condition (`DiskPressure`) or resource (`ephemeral-storage`) a rejection names."""
    found = _NODE_CONDITION.search(message or "")
    if found is None:
        return None
    return found.group("cond") or found.group("res") or "node shutdown"


def failure_finding(term: dict) -> Finding:
    return OOM if term.get("reason") == "OOMKilled" else CRASH


def container_failure(pod: dict, c: ContainerView, label: str) -> PodVerdict | None:
    """The container's failure evidence as a warning verdict, or None when it has none."""
    if c.waiting_reason == "CrashLoopBackOff":
        last = c.last_terminated or {}
        detail = describe_exit(last) if last else clip(c.waiting_message, 160)
        return PodVerdict(PhaseState.WARNING, failure_finding(last),
                          f"{label} CrashLoopBackOff, last {detail} ({c.restarts} restarts)",
                          f"{where(pod, c)}: CrashLoopBackOff; last {clip(detail)}")
    if c.waiting_reason in CONFIG_ERRORS:
        return PodVerdict(PhaseState.WARNING, config_finding(c.waiting_message),
                          f"{label} {c.waiting_reason}",
                          f"{where(pod, c)}: {c.waiting_reason}: {clip(c.waiting_message)}")
    if exit_failed(c.terminated):
        detail = describe_exit(c.terminated or {})
        return PodVerdict(PhaseState.WARNING, failure_finding(c.terminated or {}),
                          f"{label} {detail}", f"{where(pod, c)}: terminated {clip(detail)}")
    # Running again after a crash is judged by its current state (SPEC §3): it has recovered,
    # and the summary keeps its restarts (`restart_note`); Ready says whether it is ready.
    return None


def restart_note(pods: list[dict]) -> str:
    """`; 1 restart, last exit 137 (OOMKilled)` for containers that run again after crashing."""
    notes = []
    for pod in pods:
        for c in containers(pod, init=False):
            if c.running and c.restarts and c.last_terminated:
                last = c.last_terminated
                notes.append(f"{c.restarts} restart{'s' if c.restarts != 1 else ''}, last exit "
                             f"{last.get('exitCode')} ({last.get('reason') or 'Error'})")
    if not notes:
        return ""
    return f"; {notes[0]}" + (f" (+{len(notes) - 1} more containers)" if len(notes) > 1 else "")
