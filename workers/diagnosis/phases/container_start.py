"""Container start (layer 5): did every main container start and keep running?

Crash loops, non-zero exits, `OOMKilled` and `CreateContainerConfigError` are
the application's (or its config's) failure; a volume that cannot be mounted
while the container is being created is the platform's. A Running pod phase
says containers started — never that training progresses.
"""

from __future__ import annotations

from .. import registry
from ..linkage import meta
from ..models import Finding, PhaseResult, PhaseState
from ..podfacts import (
    PULL_ERRORS,
    condition,
    containers,
    is_scheduled,
    pod_phase,
)
from .common import PodVerdict, RunContext, aggregate, clip, result, waiting_for_earlier
from .container_failures import (
    CRASH,
    NODE_REJECTED,
    container_failure,
    kubelet_rejection,
    restart_note,
    volume_mount,
)

NAME = registry.CONTAINER_START.name
LAYER = registry.CONTAINER_START.layer
MOUNT_EVENTS = ("FailedMount", "FailedAttachVolume")

HEALTHY = Finding(reason="start.ok", owner="researcher", transient=False, next_action="Containers started.")
STARTING = Finding(reason="start.starting", owner="researcher", transient=True,
                   next_action="The main containers have not started yet (waiting for init containers, "
                   "the image or container creation): wait, and re-check with `/tau status <run>`.")
JOB_FAILED = Finding(
    reason="crash.job_failed",
    owner="researcher",
    transient=False,
    next_action="The Job failed: read the failed pod's log (`/tau logs <run>`), fix, and resubmit.",
)


def judge_pod(ctx: RunContext, pod: dict) -> PodVerdict:
    if pod_phase(pod) == "Succeeded":
        return PodVerdict(PhaseState.DONE, HEALTHY)
    if not is_scheduled(pod):
        return PodVerdict(PhaseState.PENDING, HEALTHY, "pod not scheduled yet")
    status = pod.get("status") or {}
    rejected = kubelet_rejection(pod)
    if rejected is not None:  # the node's, not the application's (SPEC §4)
        text = f"{rejected[0]}: {rejected[1]}".strip(": ")
        node = (pod.get("spec") or {}).get("nodeName") or "?"
        return PodVerdict(PhaseState.WARNING, NODE_REJECTED,
                          f"rejected by the kubelet on node {node} ({clip(text, 160)})",
                          f"{meta(pod).get('name')}: phase Failed on {node}: {clip(text)}")
    if pod_phase(pod) == "Failed" and status.get("reason"):
        text = f"{status.get('reason')}: {status.get('message') or ''}".strip(": ")
        return PodVerdict(PhaseState.WARNING, CRASH, f"pod Failed ({clip(text, 160)})",
                          f"{meta(pod).get('name')}: phase Failed: {clip(text)}")
    initialized = condition(pod, "Initialized")
    init_pending = initialized is not None and initialized.get("status") == "False"
    verdicts: list[PodVerdict] = []
    for c in containers(pod, init=False):
        failure = container_failure(pod, c, c.name)
        if failure is not None:
            return failure
        if c.running or c.terminated:
            continue
        if c.waiting_reason == "ContainerCreating" or not c.waiting_reason:
            mounts = ctx.pod_events(pod, MOUNT_EVENTS)
            if mounts and not init_pending:
                ev = mounts[-1]
                return PodVerdict(PhaseState.WARNING, volume_mount(pod, ev.message),
                                  f"{ev.reason}: {clip(ev.message, 160)}",
                                  f"{meta(pod).get('name')}: {ev.reason}: {clip(ev.message)}")
        if init_pending or c.waiting_reason == "PodInitializing":
            verdicts.append(PodVerdict(PhaseState.PENDING, STARTING, "waiting for init containers"))
        elif c.waiting_reason in PULL_ERRORS:
            verdicts.append(PodVerdict(PhaseState.PENDING, STARTING, f"{c.name} waiting for its image"))
        else:
            verdicts.append(PodVerdict(PhaseState.ACTIVE, STARTING,
                                       f"{c.name} {c.waiting_reason or 'starting'}"))
    if verdicts:
        return next((v for v in verdicts if v.state is PhaseState.ACTIVE), verdicts[0])
    return PodVerdict(PhaseState.DONE, HEALTHY)


def _job_failed(ctx: RunContext) -> PhaseResult | None:
    if ctx.objs.kind != "Job" or ctx.terminal() != "failed":
        return None
    cond = condition(ctx.objs.run or {}, "Failed") or condition(ctx.objs.run or {}, "FailureTarget")
    text = f"{(cond or {}).get('reason') or 'Failed'}: {(cond or {}).get('message') or ''}".strip(": ")
    return result(NAME, LAYER, PhaseState.WARNING, f"Job failed: {clip(text, 200)}", JOB_FAILED,
                  [f"Job condition Failed: {clip(text)}"])


def evaluate_pods(ctx: RunContext, pods: list[dict]) -> PhaseResult:
    verdicts, started = ctx.verdicts(NAME, judge_pod, pods)
    # A settled pod has never restarted: only the others can have a restart to note.
    phase = aggregate(NAME, LAYER, verdicts, total=len(pods),
                      done_summary=f"{started}/{len(pods)} pods' containers started "
                      f"(does not prove progress){restart_note(ctx.unsettled(pods))}", healthy=HEALTHY)
    if phase.state is not PhaseState.WARNING:
        return _job_failed(ctx) or phase
    return phase


def evaluate(ctx: RunContext, earlier: dict[str, PhaseResult]) -> PhaseResult:
    if not ctx.objs.pods:
        failed = _job_failed(ctx)
        if failed:
            return failed
        return waiting_for_earlier(NAME, LAYER, earlier, HEALTHY, "no pods yet") or result(
            NAME, LAYER, PhaseState.PENDING, "no pods yet", HEALTHY)
    return evaluate_pods(ctx, ctx.objs.pods)
