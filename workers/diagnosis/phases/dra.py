"""DRA allocation (layer 5): are the pods' ResourceClaims allocated and prepared?

Skipped when no pod uses `spec.resourceClaims` — GPUs then come through the
device plugin, which is expected. The claim's status shape is the same in
resource.k8s.io v1, v1beta2 and v1beta1 (reference/pod-failure-shapes.md).
"""

from __future__ import annotations

from .. import registry
from ..linkage import meta
from ..models import Finding, PhaseResult, PhaseState
from ..patterns import DRA_UNALLOCATED
from ..podfacts import is_terminal, kueue_gated, pod_created, pod_name
from ..timeutil import parse_time, stamp
from .common import PodVerdict, RunContext, aggregate, clip, result

NAME = registry.DRA.name
LAYER = registry.DRA.layer
GRACE_SECONDS = 30

HEALTHY = Finding(reason="dra.ok",
                  owner="node-pool-owner", transient=False, next_action="Claims are allocated.")
PREPARE_FAILED = Finding(
    reason="dra.prepare_failed",
    owner="node-pool-owner",
    transient=False,
    next_action="The kubelet could not prepare the allocated device "
    "(FailedPrepareDynamicResources): the node-pool owner checks the DRA driver on that node.",
)
GATED = Finding(reason="quota.gated", owner="queue-owner", transient=True,
                next_action="Claims are allocated once Kueue admits the run.")


def claim_names(pod: dict) -> list[tuple[str, str | None]]:
    """(pod claim entry name, ResourceClaim object name if known) for each claim of the pod."""
    statuses = {s.get("name"): s.get("resourceClaimName")
                for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    out = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        entry = ref.get("name") or "?"
        out.append((entry, ref.get("resourceClaimName") or statuses.get(entry)))
    return out


def allocation_text(claim: dict) -> str:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results") or []
    return ", ".join(f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}" for r in results)


def judge_pod(ctx: RunContext, pod: dict) -> PodVerdict:
    name = pod_name(pod)
    prepare = ctx.pod_events(pod, ["FailedPrepareDynamicResources"])
    if prepare and not is_terminal(pod):
        ev = prepare[-1]
        return PodVerdict(PhaseState.WARNING, PREPARE_FAILED,
                          f"FailedPrepareDynamicResources: {clip(ev.message, 200)}",
                          f"{name}: FailedPrepareDynamicResources: {clip(ev.message)}")
    if kueue_gated(pod):
        return PodVerdict(PhaseState.PENDING, GATED, "gated by Kueue admission")
    for entry, claim_name in claim_names(pod):
        claim = ctx.objs.claims.get(claim_name or "")
        if claim is not None and (claim.get("status") or {}).get("allocation"):
            continue
        if is_terminal(pod):
            continue
        since = parse_time(meta(claim).get("creationTimestamp")) if claim else None
        since = since or pod_created(pod)
        what = f"claim {claim_name}" if claim_name else f"claim for {entry} (not created yet)"
        if since is None:  # a threshold that cannot be measured is not asserted
            return PodVerdict(PhaseState.ACTIVE, DRA_UNALLOCATED, f"{what} unallocated (since when unknown)",
                              f"{name}: {what} unallocated; no creation time to measure 30 s from")
        age = (ctx.now - since).total_seconds()
        evidence = f"{name}: {what} unallocated since {stamp(since)}"
        if age > GRACE_SECONDS:
            return PodVerdict(PhaseState.WARNING, DRA_UNALLOCATED,
                              f"{what} unallocated since {stamp(since)}, over {GRACE_SECONDS}s "
                              "(no matching device?)", evidence)
        return PodVerdict(PhaseState.ACTIVE, DRA_UNALLOCATED, f"{what} being allocated", evidence)
    return PodVerdict(PhaseState.DONE, HEALTHY)


def evaluate_pods(ctx: RunContext, pods: list[dict]) -> PhaseResult:
    users = [p for p in pods if (p.get("spec") or {}).get("resourceClaims")]
    if not users:
        return result(NAME, LAYER, PhaseState.SKIPPED,
                      "no ResourceClaims: GPUs come through the device plugin (expected)", HEALTHY)
    verdicts = [ctx.judge(NAME, judge_pod, p) for p in users]
    allocated = [allocation_text(c) for c in ctx.objs.claims.values() if allocation_text(c)]
    summary = f"{len(users)}/{len(users)} pods' claims allocated"
    if allocated:
        summary += f" ({', '.join(allocated[:3])}{', …' if len(allocated) > 3 else ''})"
    return aggregate(NAME, LAYER, verdicts, total=len(users), done_summary=summary, healthy=HEALTHY)


def evaluate(ctx: RunContext, earlier: dict[str, PhaseResult]) -> PhaseResult:
    if ctx.objs.run is None:
        return result(NAME, LAYER, PhaseState.PENDING, "run not found", HEALTHY)
    if not ctx.objs.pods:
        run_spec = (ctx.objs.run or {}).get("spec") or {}
        text = str(run_spec)
        if "resourceClaims" not in text:
            return result(NAME, LAYER, PhaseState.SKIPPED,
                          "no ResourceClaims: GPUs come through the device plugin (expected)",
                          HEALTHY)
        return result(NAME, LAYER, PhaseState.PENDING, "no pods yet", HEALTHY)
    return evaluate_pods(ctx, ctx.objs.pods)
