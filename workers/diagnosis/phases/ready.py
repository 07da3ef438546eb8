"""Ready (layer 5): did the started containers pass readiness?

A failing readiness probe shows as kubelet `Unhealthy` events ("Readiness
probe failed: …") on a container that is running but not ready; without such
events a not-yet-ready container is simply still starting.
"""

from __future__ import annotations

from .. import registry
from ..models import Finding, PhaseResult, PhaseState
from ..podfacts import containers, is_scheduled, pod_name, pod_phase, where
from .common import PodVerdict, RunContext, aggregate, clip, result, waiting_for_earlier

NAME = registry.READY.name
LAYER = registry.READY.layer

HEALTHY = Finding(reason="ready.ok", owner="researcher", transient=False, next_action="Pods are ready.")
PROBE_FAILING = Finding(
    reason="ready.probe_failing",
    owner="researcher",
    transient=False,
    next_action="The readiness probe keeps failing: check that the probe's port/path match "
    "what the application serves and that it starts in time (initialDelaySeconds).",
)


def judge_pod(ctx: RunContext, pod: dict) -> PodVerdict:
    if pod_phase(pod) == "Succeeded":
        return PodVerdict(PhaseState.DONE, HEALTHY)
    if pod_phase(pod) == "Failed":  # its failure is Container start's evidence, not readiness
        return PodVerdict(PhaseState.PENDING, HEALTHY, "pod failed, never ready")
    if not is_scheduled(pod):
        return PodVerdict(PhaseState.PENDING, HEALTHY, "pod not scheduled yet")
    probe_events = [e for e in ctx.pod_events(pod, ["Unhealthy"])
                    if e.message.lower().startswith("readiness probe failed")]
    pending: PodVerdict | None = None
    for c in containers(pod, init=False):
        if c.ready or (c.terminated and not c.running and int(c.terminated.get("exitCode") or 0) == 0):
            continue
        if not c.running:
            pending = pending or PodVerdict(PhaseState.PENDING, HEALTHY, f"{c.name} not running")
            continue
        mine = [e for e in probe_events if e.container() in (None, c.name)]
        if mine:
            ev = mine[-1]
            return PodVerdict(PhaseState.WARNING, PROBE_FAILING,
                              f"{c.name} not ready: {clip(ev.message, 160)} (x{ev.count})",
                              f"{where(pod, c)}: Unhealthy: {clip(ev.message)} (x{ev.count})")
        return PodVerdict(PhaseState.ACTIVE, HEALTHY, f"{c.name} running, not yet ready",
                          f"{pod_name(pod)}/{c.name}: running, ready=false")
    return pending or PodVerdict(PhaseState.DONE, HEALTHY)


def evaluate_pods(ctx: RunContext, pods: list[dict]) -> PhaseResult:
    verdicts, ready = ctx.verdicts(NAME, judge_pod, pods)
    return aggregate(NAME, LAYER, verdicts, total=len(pods),
                     done_summary=f"{ready}/{len(pods)} pods ready (does not prove progress)",
                     healthy=HEALTHY)


def evaluate(ctx: RunContext, earlier: dict[str, PhaseResult]) -> PhaseResult:
    if not ctx.objs.pods:
        return waiting_for_earlier(NAME, LAYER, earlier, HEALTHY, "no pods yet") or result(
            NAME, LAYER, PhaseState.PENDING, "no pods yet", HEALTHY)
    return evaluate_pods(ctx, ctx.objs.pods)
