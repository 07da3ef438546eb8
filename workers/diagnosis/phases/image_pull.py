"""Image pull (layer 5): judged only by pull errors and pulls in progress.

Init and main containers alike. A main container waiting in
`PodInitializing` is waiting on its init containers, not on its image. The
pull error text (waiting message, then the kubelet's `Failed` event) decides
who owns the fix: not found → researcher, unauthorized → image owner,
network → platform (transient).
"""

from __future__ import annotations

from .. import registry
from ..models import Finding, PhaseResult, PhaseState
from ..patterns import IMAGE_PULL, IMAGE_PULL_UNKNOWN, first_match
from ..podfacts import PULL_ERRORS, ContainerView, all_containers, is_scheduled, is_terminal, where
from .common import PodVerdict, RunContext, aggregate, clip, result, waiting_for_earlier, worst

NAME = registry.IMAGE_PULL.name
LAYER = registry.IMAGE_PULL.layer

HEALTHY = Finding(reason="image.ok", owner="image-owner", transient=False, next_action="Images are present.")
PULLING = Finding(reason="image.pulling", owner="image-owner", transient=False,
                  next_action="The image is being pulled; large images take minutes.")


def _field_matches(ev_container: str | None, c: ContainerView) -> bool:
    return ev_container is None or ev_container == c.name


def _pull_error_text(ctx: RunContext, pod: dict, c: ContainerView) -> str:
    texts = [c.waiting_message]
    for ev in ctx.pod_events(pod, ["Failed"]):
        if _field_matches(ev.container(), c) and (not c.image or c.image in ev.message
                                                   or ev.container() == c.name):
            texts.append(ev.message)
    return " | ".join(t for t in texts if t)


NEVER_PULL = Finding(
    reason="image.never_pull",
    owner="researcher",
    transient=False,
    next_action="The pull policy is Never and the image is not on the node: no registry was asked. Use "
    "a pull policy that pulls (IfNotPresent), or an image that the node pool ships.",
)


def classify(reason: str, text: str) -> tuple[str, Finding]:
    if reason == "ErrImageNeverPull":
        return "pull policy Never, image absent", NEVER_PULL
    if reason == "InvalidImageName":
        nf = next(p for p in IMAGE_PULL if p.label == "not found")
        return nf.label, nf.finding
    pattern = first_match(IMAGE_PULL, text)
    return (pattern.label, pattern.finding) if pattern else ("unclassified", IMAGE_PULL_UNKNOWN)


def _pulling(ctx: RunContext, pod: dict, c: ContainerView) -> bool:
    if c.has_started:
        return False
    pulling = [e for e in ctx.pod_events(pod, ["Pulling"]) if _field_matches(e.container(), c)]
    pulled = [e for e in ctx.pod_events(pod, ["Pulled"]) if _field_matches(e.container(), c)]
    if not pulling:
        return False
    last_pulling = max((e.last for e in pulling if e.last), default=None)
    last_pulled = max((e.last for e in pulled if e.last), default=None)
    if not pulled:
        return True
    return bool(last_pulling and last_pulled and last_pulling > last_pulled)


def judge_pod(ctx: RunContext, pod: dict) -> PodVerdict:
    """The pod's worst container verdict, carrying every container's evidence."""
    if is_terminal(pod):
        return PodVerdict(PhaseState.DONE, HEALTHY)
    if not is_scheduled(pod):
        return PodVerdict(PhaseState.PENDING, HEALTHY, "pod not scheduled yet")
    verdicts = []
    for c in all_containers(pod):
        if c.waiting_reason in PULL_ERRORS:
            text = _pull_error_text(ctx, pod, c)
            label, finding = classify(c.waiting_reason, text)
            verdicts.append(PodVerdict(
                PhaseState.WARNING, finding,
                f"{c.waiting_reason} {c.image} ({label})",
                f"{where(pod, c)}: {c.waiting_reason} {c.image}: {clip(text, 400)}",
                cause=c.image or None,
            ))
        elif _pulling(ctx, pod, c):
            verdicts.append(PodVerdict(PhaseState.ACTIVE, PULLING, f"pulling {c.image}",
                                       f"{where(pod, c)}: pulling {c.image}"))
    if not verdicts:
        return PodVerdict(PhaseState.DONE, HEALTHY)
    state = worst(v.state for v in verdicts)
    first = next(v for v in verdicts if v.state is state)
    evidence = "; ".join(v.evidence for v in verdicts if v.state is state)
    return PodVerdict(state, first.finding, first.short, evidence, first.cause)


def evaluate_pods(ctx: RunContext, pods: list[dict]) -> PhaseResult:
    verdicts, done = ctx.verdicts(NAME, judge_pod, pods)
    shown = ""
    if done == len(pods):  # the images are named only in the line of a phase that is done
        images = sorted(set().union(*(ctx.summary(p).images for p in pods)))
        shown = ", ".join(images[:2]) + (", …" if len(images) > 2 else "")
    return aggregate(NAME, LAYER, verdicts, total=len(pods),
                     done_summary=f"no pull errors ({shown})" if shown else "no pull errors",
                     healthy=HEALTHY)


def evaluate(ctx: RunContext, earlier: dict[str, PhaseResult]) -> PhaseResult:
    if not ctx.objs.pods:
        return waiting_for_earlier(NAME, LAYER, earlier, HEALTHY, "no pods yet") or result(
            NAME, LAYER, PhaseState.PENDING, "no pods yet", HEALTHY)
    return evaluate_pods(ctx, ctx.objs.pods)

