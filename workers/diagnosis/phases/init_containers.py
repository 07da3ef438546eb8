"""Init containers (layer 5): did every init container exit 0 (or, for a sidecar, start)?

`Init:Error` and `Init:CrashLoopBackOff` (kubectl's derived statuses) are a
non-zero exit or a back-off on an init container; an application problem.
"""

from __future__ import annotations

from .. import registry
from ..models import Finding, PhaseResult, PhaseState
from ..podfacts import (
    PULL_ERRORS,
    condition,
    containers,
    is_scheduled,
    is_terminal,
    pod_phase,
)
from .common import PodVerdict, RunContext, aggregate, result, waiting_for_earlier
from .container_failures import container_failure

NAME = registry.INIT_CONTAINERS.name
LAYER = registry.INIT_CONTAINERS.layer
HEALTHY = Finding(reason="init.ok",
                  owner="researcher", transient=False, next_action="Init containers finished.")
# Not done yet is not "finished" (issue 15.10): say what is still going on.
RUNNING = Finding(reason="init.running", owner="researcher", transient=True,
                  next_action="An init container is still running: wait for it to exit 0, or read its log "
                  "(`/tau logs <run>`) if it takes longer than expected.")
WAITING = Finding(reason="init.waiting", owner="researcher", transient=True,
                  next_action="The init containers have not finished yet: the main containers start "
                  "once each has exited 0.")


def judge_pod(ctx: RunContext, pod: dict) -> PodVerdict:
    inits = containers(pod, init=True)
    initialized = condition(pod, "Initialized")
    if (initialized and initialized.get("status") == "True") or pod_phase(pod) == "Succeeded":
        return PodVerdict(PhaseState.DONE, HEALTHY)
    if not is_scheduled(pod):
        return PodVerdict(PhaseState.PENDING, HEALTHY, "pod not scheduled yet")
    for c in inits:
        label = f"Init:{c.name}"
        failure = container_failure(pod, c, label)
        if failure is not None:
            return failure
        if c.sidecar and c.running:
            continue
        if c.terminated:
            continue
        if is_terminal(pod):
            return PodVerdict(PhaseState.DONE, HEALTHY)
        if c.running:
            return PodVerdict(PhaseState.ACTIVE, RUNNING, f"{label} running")
        if c.waiting_reason in PULL_ERRORS:
            return PodVerdict(PhaseState.PENDING, WAITING, f"{label} waiting for its image")
        return PodVerdict(PhaseState.ACTIVE, WAITING, f"{label} starting")
    return PodVerdict(PhaseState.DONE, HEALTHY)


def evaluate_pods(ctx: RunContext, pods: list[dict]) -> PhaseResult:
    users = [p for p in pods if (p.get("spec") or {}).get("initContainers")]
    if not users:
        return result(NAME, LAYER, PhaseState.SKIPPED, "no init containers", HEALTHY)
    verdicts, _ = ctx.verdicts(NAME, judge_pod, users)
    return aggregate(NAME, LAYER, verdicts, total=len(users),
                     done_summary=f"{len(users)}/{len(users)} pods initialized", healthy=HEALTHY)


def evaluate(ctx: RunContext, earlier: dict[str, PhaseResult]) -> PhaseResult:
    if not ctx.objs.pods:
        return waiting_for_earlier(NAME, LAYER, earlier, HEALTHY, "no pods yet") or result(
            NAME, LAYER, PhaseState.PENDING, "no pods yet", HEALTHY)
    return evaluate_pods(ctx, ctx.objs.pods)
