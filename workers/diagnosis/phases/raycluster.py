"""RayCluster (layer 5, RayJob only): is the job's Ray cluster up?

Done once KubeRay reports it ready, and still done when KubeRay deleted it
after the job finished. When it is not ready because of something a pod
phase can see (head pod unschedulable, image pull, crash), the owner is that
pod failure's owner — the most specific evidence wins (SPEC §4). KubeRay's
`HeadPodReady` condition carries the head container's own reason when the pod
is `ContainersNotReady` (kuberay utils/util.go, reference/kuberay-status.md).
"""

from __future__ import annotations

from .. import registry
from ..linkage import meta
from ..models import Finding, PhaseResult, PhaseState
from ..podfacts import condition
from . import image_pull
from .common import RunContext, clip, result
from .pods import POD_PHASE_MODULES

NAME = registry.RAYCLUSTER.name
LAYER = registry.RAYCLUSTER.layer


HEALTHY = Finding(reason="raycluster.ok",
                  owner="node-pool-owner", transient=False, next_action="RayCluster is ready.")
PROVISIONING = Finding(
    reason="raycluster.provisioning",
    owner="node-pool-owner",
    transient=False,
    next_action="KubeRay is still bringing up the Ray pods; no failure reported so far.",
)
REPLICA_FAILURE = Finding(
    reason="raycluster.replica_failure",
    owner="platform",
    transient=False,
    next_action="KubeRay could not create or delete Ray pods (ReplicaFailure): the platform "
    "checks the operator's message (quota, admission webhook, RBAC).",
)
HEAD_FAILING = Finding(
    reason="crash.head",
    owner="researcher",
    transient=False,
    next_action="The Ray head container is failing: read its log and fix the image or "
    "entrypoint in the run config.",
)
HEAD_ERROR_REASONS = {
    "CrashLoopBackOff", "Error", "OOMKilled", "CreateContainerConfigError",
    "CreateContainerError", "RunContainerError", "ErrImagePull", "ImagePullBackOff",
    "InvalidImageName", "ContainerCannotRun",
}


def _is_true(obj: dict, ctype: str) -> bool:
    cond = condition(obj, ctype)
    return bool(cond and cond.get("status") == "True")


def evaluate(ctx: RunContext, earlier: dict[str, PhaseResult]) -> PhaseResult:
    objs = ctx.objs
    if objs.run is None:
        return result(NAME, LAYER, PhaseState.PENDING, "run not found", HEALTHY)
    if objs.kind != "RayJob":
        return result(NAME, LAYER, PhaseState.SKIPPED, "not a RayJob", HEALTHY)
    rc = objs.raycluster
    if rc is None:
        if ctx.terminal():
            text = ("deleted by KubeRay after the job finished" if objs.raycluster_name
                    else "never created: the run ended before it needed one")
            return result(NAME, LAYER, PhaseState.DONE, text, HEALTHY)
        admission = earlier.get(registry.ADMISSION.name)
        if admission is not None and not admission.state.finished:
            return result(NAME, LAYER, PhaseState.PENDING,
                          "not created yet (waiting on Kueue admission)", PROVISIONING)
        return result(NAME, LAYER, PhaseState.PENDING,
                      f"RayCluster {objs.raycluster_name or ''} not created yet".replace("  ", " "),
                      PROVISIONING)
    status = rc.get("status") or {}
    name = meta(rc).get("name")
    workers = (f"{status.get('readyWorkerReplicas', 0)}/{status.get('desiredWorkerReplicas', 0)} "
               "workers ready")
    evidence: list[str] = []
    failure = condition(rc, "ReplicaFailure")
    if failure and failure.get("status") == "True":
        msg = f"{failure.get('reason')}: {clip(failure.get('message') or '')}"
        return result(NAME, LAYER, PhaseState.WARNING, f"{name}: ReplicaFailure {msg}",
                      REPLICA_FAILURE, [f"RayCluster {name}: ReplicaFailure={msg}"])
    ray_pods = [p for p in objs.pods if objs.is_ray_pod(p)]
    for module in POD_PHASE_MODULES:
        phase = module.evaluate_pods(ctx, ray_pods) if ray_pods else None
        if phase is not None and phase.state is PhaseState.WARNING:
            return result(NAME, LAYER, PhaseState.WARNING,
                          f"{name} not ready: {phase.name}: {phase.summary}", phase.finding,
                          phase.evidence, cause=phase.cause, via=phase.name)
    head = condition(rc, "HeadPodReady")
    if head and head.get("status") == "False" and head.get("reason") in HEAD_ERROR_REASONS:
        msg = f"HeadPodReady=False reason={head.get('reason')}: {clip(head.get('message') or '')}"
        finding = HEAD_FAILING  # KubeRay's own evidence, not a pod phase's: no `via`
        if head.get("reason") in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName"):
            finding = image_pull.classify(head.get("reason") or "", head.get("message") or "")[1]
        return result(NAME, LAYER, PhaseState.WARNING, f"{name} not ready: {msg}", finding, [msg])
    if status.get("state") == "ready" or (
        _is_true(rc, "RayClusterProvisioned") and _is_true(rc, "HeadPodReady")
    ):
        return result(NAME, LAYER, PhaseState.DONE, f"{name} ready ({workers})", HEALTHY)
    if status.get("state") == "suspended" or _is_true(rc, "RayClusterSuspended"):
        return result(NAME, LAYER, PhaseState.PENDING, f"{name} suspended", PROVISIONING)
    if head:
        evidence.append(f"HeadPodReady={head.get('status')} reason={head.get('reason')}")
    return result(NAME, LAYER, PhaseState.ACTIVE, f"{name} provisioning ({workers})",
                  PROVISIONING, evidence)
