"""Init containers (layer 5): did every init container exit 0 (or, for a sidecar, start)?

`Init:Error` and `Init:CrashLoopBackOff` (kubectl's derived statuses) are a
non-zero exit or a back-off on an init container; an application problem.
"""

from __future__ import annotations

from ..models import Finding, PhaseResult, PhaseState
from ..patterns import CONFIG_ACTION, CRASH_ACTION, OOM_ACTION
from ..podfacts import (
    condition,
    containers,
    describe_exit,
    exit_failed,
    is_scheduled,
    is_terminal,
    pod_phase,
    where,
)
from .common import PodVerdict, RunContext, aggregate, clip, result, waiting_for_earlier

NAME = "Init containers"
LAYER = 5
CONFIG_ERRORS = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")

HEALTHY = Finding(owner="researcher", transient=False, next_action="Init containers finished.")
CRASH = Finding(owner="researcher", transient=False, next_action=CRASH_ACTION)
OOM = Finding(owner="researcher", transient=False, next_action=OOM_ACTION)
CONFIG = Finding(owner="researcher", transient=False, next_action=CONFIG_ACTION)


def _failure(term: dict) -> Finding:
    return OOM if term.get("reason") == "OOMKilled" else CRASH


def judge_pod(ctx: RunContext, pod: dict) -> PodVerdict:
    inits = containers(pod, init=True)
    initialized = condition(pod, "Initialized")
    if (initialized and initialized.get("status") == "True") or pod_phase(pod) == "Succeeded":
        return PodVerdict(PhaseState.DONE, HEALTHY)
    if not is_scheduled(pod):
        return PodVerdict(PhaseState.PENDING, HEALTHY, "pod not scheduled yet")
    for c in inits:
        label = f"Init:{c.name}"
        if c.waiting_reason == "CrashLoopBackOff":
            last = c.last_terminated or {}
            detail = describe_exit(last) if last else clip(c.waiting_message, 160)
            return PodVerdict(PhaseState.WARNING, _failure(last),
                              f"{label} CrashLoopBackOff, {detail} ({c.restarts} restarts)",
                              f"{where(pod, c)}: Init:CrashLoopBackOff; last {clip(detail)}")
        if c.waiting_reason in CONFIG_ERRORS:
            return PodVerdict(PhaseState.WARNING, CONFIG, f"{label} {c.waiting_reason}",
                              f"{where(pod, c)}: {c.waiting_reason}: {clip(c.waiting_message)}")
        if exit_failed(c.terminated):
            detail = describe_exit(c.terminated or {})
            return PodVerdict(PhaseState.WARNING, _failure(c.terminated or {}),
                              f"Init:Error {c.name} {detail}", f"{where(pod, c)}: {clip(detail)}")
        if c.sidecar and c.running:
            continue
        if c.terminated:
            continue
        if is_terminal(pod):
            return PodVerdict(PhaseState.DONE, HEALTHY)
        if c.running:
            return PodVerdict(PhaseState.ACTIVE, HEALTHY, f"{label} running")
        if c.waiting_reason in PULL_ERRORS:
            return PodVerdict(PhaseState.PENDING, HEALTHY, f"{label} waiting for its image")
        return PodVerdict(PhaseState.ACTIVE, HEALTHY, f"{label} starting")
    return PodVerdict(PhaseState.DONE, HEALTHY)


def evaluate_pods(ctx: RunContext, pods: list[dict]) -> PhaseResult:
    users = [p for p in pods if (p.get("spec") or {}).get("initContainers")]
    if not users:
        return result(NAME, LAYER, PhaseState.SKIPPED, "no init containers", HEALTHY)
    verdicts = [ctx.judge(NAME, judge_pod, p) for p in users]
    return aggregate(NAME, LAYER, verdicts, total=len(users),
                     done_summary=f"{len(users)}/{len(users)} pods initialized", healthy=HEALTHY)


def evaluate(ctx: RunContext, earlier: dict[str, PhaseResult]) -> PhaseResult:
    if not ctx.objs.pods:
        return waiting_for_earlier(NAME, LAYER, earlier, HEALTHY, "no pods yet") or result(
            NAME, LAYER, PhaseState.PENDING, "no pods yet", HEALTHY)
    return evaluate_pods(ctx, ctx.objs.pods)
