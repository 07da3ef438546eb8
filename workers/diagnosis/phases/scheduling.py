"""Pod scheduling (layer 5): has every pod been assigned to a node?

A pod held by Kueue's admission gate is queued, not failing. When the
scheduler's only obstacle is DRA claim allocation the phase waits 30 s before
calling it a failure, and the next action comes from DRA.
"""

from __future__ import annotations

import re

from .. import registry
from ..linkage import RUN_LABEL, labels, meta
from ..models import Finding, PhaseResult, PhaseState
from ..patterns import CLAIM_REASONS, DRA_UNALLOCATED, SCHEDULING, SCHEDULING_UNKNOWN, first_match
from ..podfacts import condition, is_scheduled, is_terminal, kueue_gated, pod_created, pod_name
from ..timeutil import stamp
from .common import PodVerdict, RunContext, aggregate, clip, result, waiting_for_earlier

NAME = registry.SCHEDULING.name
LAYER = registry.SCHEDULING.layer
DRA_GRACE_SECONDS = 30

NO_PODS = Finding(
    reason="sched.no_pods",
    owner="node-pool-owner",
    transient=False,
    next_action="Admitted, but no pods exist yet: the job controller (or KubeRay) should create "
    "them within seconds; if not, the platform checks the controller.",
)
HEALTHY = Finding(reason="sched.ok",
                  owner="node-pool-owner", transient=False, next_action="All pods are scheduled.")
GATED = Finding(
    reason="quota.gated",
    owner="queue-owner",
    transient=True,
    next_action="Pods are held by Kueue's admission gate until the Workload is admitted.",
)
WAITING = Finding(
    reason="sched.waiting",
    owner="node-pool-owner",
    transient=False,
    next_action="The scheduler has not placed the pod yet; no failure reported so far.",
)

# Node labels that name a node pool (AKS, GKE), else the instance type: what unschedulable runs that
# share a cause have in common is the pool their selector asks for and the scheduler's message.
POOL_LABELS = ("kubernetes.azure.com/agentpool", "cloud.google.com/gke-nodepool",
               "node.kubernetes.io/instance-type")


def scheduling_cause(pod: dict, message: str) -> str:
    """`<pool>: <message with numbers as N>`, so `0/12 nodes` and `0/14 nodes` are one cause."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    pool = ",".join(sorted({str(selector[k]) for k in POOL_LABELS if selector.get(k)})) or "any pool"
    return f"{pool}: {re.sub(r'[0-9]+', 'N', ' '.join(message.split()))[:200]}"


_REASONS_RE = re.compile(r"nodes are available:(?P<body>.*?)(?:\.\s*preemption:|\s+still not|$)",
                         re.I | re.S)


def node_reasons(message: str) -> list[str]:
    """Split `0/N nodes are available: 1 A, 2 B. preemption: …` into `["A", "B"]`."""
    m = _REASONS_RE.search(message)
    body = m.group("body") if m else message
    parts = [p.strip().rstrip(".") for p in re.split(r",\s+(?=\d+\s)", body.strip())]
    return [re.sub(r"^\d+\s+", "", p) for p in parts if p]


def only_claims(message: str) -> bool:
    reasons = node_reasons(message)
    return bool(reasons) and all(CLAIM_REASONS.search(r) for r in reasons)


def _unschedulable_message(ctx: RunContext, pod: dict) -> str | None:
    cond = condition(pod, "PodScheduled")
    if cond and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
        return cond.get("message") or "Unschedulable"
    events = ctx.pod_events(pod, ["FailedScheduling"])
    if events and not is_scheduled(pod):
        return events[-1].message
    return None


def own_unbound_claim(ctx: RunContext, pod: dict) -> Finding | None:
    """The researcher's finding when an unbound claim the pod mounts is the run's own: a generic
    ephemeral volume (the pod's `volumeClaimTemplate`, claim `<pod>-<volume>`), or a PVC owned by
    the run, its pod or carrying the run's label — not a platform-managed claim such as the
    workspace's `blob-training` (SPEC §4: that one is the platform's)."""
    run = ctx.objs.run or {}
    owners = {meta(run).get("uid"), meta(pod).get("uid")} - {None}
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        if not isinstance(vol, dict):
            continue
        template = (vol.get("ephemeral") or {}).get("volumeClaimTemplate")
        name = (vol.get("persistentVolumeClaim") or {}).get("claimName") or (
            f"{pod_name(pod)}-{vol.get('name')}" if template else None)
        if not name:
            continue
        claim = ctx.objs.pvcs.get(name)
        phase = ((claim or {}).get("status") or {}).get("phase")
        if claim is not None and phase == "Bound":
            continue
        own = template is not None or (claim is not None and (
            any(ref.get("uid") in owners for ref in meta(claim).get("ownerReferences") or [])
            or labels(claim).get(RUN_LABEL) == ctx.objs.name))
        if not own:
            continue
        spec = (claim or {}).get("spec") or (template or {}).get("spec") or {}
        klass = spec.get("storageClassName")
        what = f"its StorageClass `{klass}`" if klass else "no StorageClass (it waits for a matching volume)"
        return Finding(reason="sched.own_claim", owner="researcher", transient=False, next_action=(
            f"The run's own claim `{name}` ({what}) cannot bind: fix the claim in the run config (an "
            "existing StorageClass, a size and access mode a volume offers), then resubmit."))
    return None


def judge_pod(ctx: RunContext, pod: dict) -> PodVerdict:
    name = pod_name(pod)
    if is_scheduled(pod) or is_terminal(pod):
        return PodVerdict(PhaseState.DONE, HEALTHY)
    if kueue_gated(pod):
        return PodVerdict(PhaseState.PENDING, GATED, "gated by Kueue admission",
                          f"{name}: SchedulingGated (kueue.x-k8s.io/admission)")
    message = _unschedulable_message(ctx, pod)
    if message is None:
        cond = condition(pod, "PodScheduled")
        if cond and cond.get("reason") == "SchedulingGated":
            return PodVerdict(PhaseState.PENDING, WAITING, "scheduling gated",
                              f"{name}: SchedulingGated: {clip(cond.get('message') or '')}")
        return PodVerdict(PhaseState.ACTIVE, WAITING, "waiting for the scheduler")
    evidence = f"{name}: Unschedulable: {clip(message, 400)}"
    if only_claims(message):
        created = pod_created(pod)
        if created is None:  # not measurable: never asserted as "over 30 s"
            return PodVerdict(PhaseState.ACTIVE, DRA_UNALLOCATED,
                              "waiting for DRA claim allocation (since when unknown)", evidence)
        age = (ctx.now - created).total_seconds()
        if age <= DRA_GRACE_SECONDS:
            return PodVerdict(PhaseState.ACTIVE, DRA_UNALLOCATED,
                              "waiting for DRA claim allocation", evidence)
        return PodVerdict(PhaseState.WARNING, DRA_UNALLOCATED,
                          f"cannot allocate all claims since {stamp(created)}, over "
                          f"{DRA_GRACE_SECONDS}s", evidence)
    pattern = first_match(SCHEDULING, message)
    finding = pattern.finding if pattern else SCHEDULING_UNKNOWN
    label = pattern.label if pattern else "unschedulable"
    own = own_unbound_claim(ctx, pod) if pattern is not None and pattern.label == "volume" else None
    if own is not None:  # the run's own claim cannot bind: the run config's to fix (SPEC §4)
        finding, label = own, "the run's own claim cannot bind"
    return PodVerdict(PhaseState.WARNING, finding, f"Unschedulable ({label}): {clip(message, 200)}",
                      evidence, cause=scheduling_cause(pod, message))


def evaluate_pods(ctx: RunContext, pods: list[dict]) -> PhaseResult:
    verdicts, done = ctx.verdicts(NAME, judge_pod, pods)
    return aggregate(NAME, LAYER, verdicts, total=len(pods),
                     done_summary=f"{done}/{len(pods)} pods scheduled", healthy=HEALTHY)


def evaluate(ctx: RunContext, earlier: dict[str, PhaseResult]) -> PhaseResult:
    if not ctx.objs.pods:
        waiting = waiting_for_earlier(NAME, LAYER, earlier, NO_PODS, "no pods yet")
        return waiting or result(NAME, LAYER, PhaseState.PENDING, "admitted, no pods yet", NO_PODS)
    return evaluate_pods(ctx, ctx.objs.pods)
