"""Kueue admission (layer 4): was quota reserved and the Workload admitted?

Works on v1beta1 and v1beta2 Workloads alike (the status fields used here did
not change) and on both reason vocabularies: the legacy `Pending` /
`Inadmissible` and the granular ones of the `UnadmittedWorkloadsObservability`
gate (`WaitingForQuota`, `ExceedsMaxQuota`, `Misconfigured`, …), see
reference/kueue-workload-status.md. Admitted proves quota was reserved —
never that pods run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .. import registry
from ..kueue_reasons import (
    ADMISSION_GATED_BY,
    RESEARCHER_FLAVOR,
    RESEARCHER_FLAVOR_RE,
    UNKNOWN,
    WAITING_ACTION,
    is_token,
    row_for,
)
from ..linkage import QUEUE_LABEL, RunObjects, labels, meta
from ..models import Finding, PhaseResult, PhaseState
from ..podfacts import condition, kueue_gated
from ..preemption import Preemption, preemption_of, preemption_text
from ..queue_position import QueuePosition
from ..start_estimate import snapshot_position
from .common import RunContext, clip, result

NAME = registry.ADMISSION.name
LAYER = registry.ADMISSION.layer

WAITING = Finding(
    reason="quota.waiting",
    owner="queue-owner",
    transient=True,
    next_action=WAITING_ACTION,
)
CHECK_PENDING = Finding(
    reason="quota.check_pending",
    owner="queue-owner",
    transient=True,
    next_action="Quota is reserved; an admission check (e.g. a ProvisioningRequest) has not "
    "passed yet — wait, or ask the queue owner about the check.",
)
CHECK_REJECTED = Finding(
    reason="quota.check_rejected",
    owner="queue-owner",
    transient=False,
    next_action="An admission check rejected the Workload: the queue owner reviews the check "
    "and its message.",
)
OVER_MAX = Finding(
    reason="quota.over_max",
    owner="queue-owner",
    transient=False,
    next_action="The run asks for more than the queue can ever grant (its maximum, including "
    "borrowing): request fewer resources, or ask the queue owner to raise the quota.",
)
NO_FLAVOR = Finding(
    reason="quota.no_flavor",
    owner="queue-owner",
    transient=False,
    next_action="No ResourceFlavor of the ClusterQueue fits the run (resource not offered, "
    "taint or node affinity mismatch): the queue owner reviews the flavors.",
)
QUEUE_BROKEN = Finding(
    reason="queue.broken",
    owner="platform",
    transient=False,
    next_action="The run's queue is missing, stopped or inactive: the platform fixes the "
    "LocalQueue/ClusterQueue (kubectl describe localqueue/clusterqueue); resubmitting "
    "will not help.",
)
PREEMPTED = Finding(
    reason="quota.preempted",
    owner="queue-owner",
    transient=True,
    next_action="Kueue preempted the run to reclaim capacity for other work; it is requeued "
    "and readmitted when quota frees up — ask the queue owner about priority if it repeats.",
)
PODS_READY_TIMEOUT = Finding(
    reason="quota.pods_ready_timeout",
    owner="queue-owner",
    transient=True,
    next_action="Kueue evicted the run because its pods did not all become ready in time "
    "(waitForPodsReady); it is requeued — check the layer-5 phases of the next attempt.",
)
DEACTIVATED = Finding(
    reason="quota.deactivated",
    owner="queue-owner",
    transient=False,
    next_action="The Workload is deactivated (e.g. requeuing limit reached): the queue owner "
    "decides whether to reactivate it; otherwise resubmit.",
)
NOT_CREATED = Finding(
    reason="quota.no_workload",
    owner="queue-owner",
    transient=True,
    next_action="Kueue has not created a Workload for the run yet; if this lasts more than a "
    "minute the platform checks the Kueue controller.",
)
NEVER_FITS = {
    "queue-owner": Finding(
        reason="quota.never_fits", owner="queue-owner", transient=False,
        next_action="The run asks for more than its ClusterQueue may ever use (nominal quota plus "
        "borrowing limit): request fewer resources, or ask the queue owner to raise the quota."),
    "researcher": Finding(
        reason="quota.never_fits_node", owner="researcher", transient=False,
        next_action="A pod of the run asks for more than the largest node of its flavour has: no node "
        "could ever run it — split the work over more, smaller pods and resubmit."),
}
# The same next actions with the numbers the answer found (`QueuePosition.never_fits`, SPEC §5b):
# "The run asks for 64 nvidia.com/gpu; ClusterQueue h100-shared can grant at most 32 … : …".
NEVER_FITS_ACTION = {
    "queue-owner": "The run {why}: request fewer resources, or ask the queue owner to raise the quota.",
    "researcher": "{Why}: no node could ever run it — split the work over more, smaller pods and resubmit.",
}
ADMITTED = Finding(reason="quota.ok", owner="queue-owner", transient=True, next_action="Admitted.")

QUEUE_STOPPED_REASONS = {"ClusterQueueStopped", "LocalQueueStopped"}
OVER_MAX_RE = re.compile(r"maximum capacity|insufficient quota for .+ in ClusterQueue", re.I)
BROKEN_RE = re.compile(
    r"(LocalQueue|ClusterQueue) \S+ (doesn't|does not) exist|is inactive|is stopped|"
    r"flavor \S+ not found|FlavorNotFound",
    re.I,
)
NO_FLAVOR_RE = re.compile(
    r"untolerated taint .* in flavor|doesn't match node affinity|unavailable in ClusterQueue", re.I
)
REQUESTED_FLAVOR_RE = re.compile(RESEARCHER_FLAVOR_RE, re.I)
GATED_BY_RE = re.compile(r"Admission is gated by: (?P<gates>.+)")
# Kueue's waitForPodsReadyIfNeeded message (pkg/scheduler/scheduler.go), also under the legacy
# reason `Waiting` when the UnadmittedWorkloadsObservability gate is off.
PODS_READY_WAIT_RE = re.compile(r"waiting for all admitted workloads to be in PodsReady condition", re.I)


@dataclass(frozen=True)
class Verdict:
    state: PhaseState
    reason: str
    finding: Finding
    evidence: str
    explain: str = ""
    token: str | None = None  # the KEP-10852 QuotaReserved=False token, verbatim
    preemption: Preemption | None = None


def _cond_true(wl: dict, ctype: str) -> dict | None:
    cond = condition(wl, ctype)
    return cond if cond and cond.get("status") == "True" else None


def _evicted(wl: dict, name: str, objs: RunObjects | None = None) -> Verdict | None:
    ev = _cond_true(wl, "Evicted")
    if ev is None:
        return None
    reason = ev.get("reason") or "Evicted"
    msg = ev.get("message") or ""
    evidence = f"{name}: Evicted={reason}: {clip(msg)}"
    if reason == "Preempted":
        events = objs.events_for("Workload", name) if objs is not None else []
        preemption = preemption_of(wl, events, objs.peer_workloads if objs is not None else [])
        if preemption is not None:
            return Verdict(PhaseState.WARNING, "Preempted", PREEMPTED, evidence,
                           f"{preemption_text(preemption)}: capacity was reclaimed for other work",
                           preemption=preemption)
        pre = _cond_true(wl, "Preempted")
        detail = f" ({pre.get('reason')})" if pre and pre.get("reason") else ""
        return Verdict(PhaseState.WARNING, "Preempted", PREEMPTED, evidence,
                       f"preempted{detail}: capacity was reclaimed for other work")
    if reason in QUEUE_STOPPED_REASONS:
        return Verdict(PhaseState.WARNING, reason, QUEUE_BROKEN, evidence,
                       "the platform stopped the queue")
    if reason == "PodsReadyTimeout":
        return Verdict(PhaseState.WARNING, reason, PODS_READY_TIMEOUT, evidence,
                       "evicted: pods not ready in time")
    if reason.startswith("Deactivated") or reason in ("RequeuingLimitExceeded",
                                                     "MaximumExecutionTimeExceeded"):
        # Kueue never requeues a deactivated Workload (e.g. DeactivatedDueToRequeuingLimitExceeded,
        # DeactivatedDueToAdmissionCheck): a person reactivates it after fixing the cause.
        return Verdict(PhaseState.WARNING, reason, DEACTIVATED, evidence,
                       f"evicted: deactivated{_deactivated_by(wl, reason)}")
    return Verdict(PhaseState.WARNING, reason, PREEMPTED, evidence, f"evicted ({reason})")


def _deactivated_by(wl: dict, reason: str) -> str:
    """Who deactivated it, when Kueue says (the Evicted reason's `DueTo<cause>`, workload_controller.go):
    a time limit is the run having used its time."""
    cause = reason.partition("DueTo")[2] if "DueTo" in reason else reason
    if cause == "MaximumExecutionTimeExceeded":
        limit = (wl.get("spec") or {}).get("maximumExecutionTimeSeconds")
        return (f" — the run used its time limit (maximumExecutionTimeSeconds={limit})" if limit
                else " — the run used its time limit (maximumExecutionTimeSeconds)")
    if cause == "RequeuingLimitExceeded":
        return " by Kueue: it was requeued more times than waitForPodsReady.requeuingStrategy allows"
    if cause == "AdmissionCheck":
        return " by Kueue: an admission check rejected it"
    return ""


def _token_verdict(wl: dict, name: str, token: str, msg: str, evidence: str) -> Verdict:
    """A KEP-10852 token through the table (`kueue_reasons.TOKENS`); a token not in it verbatim."""
    row = row_for(token)
    if row is None:
        return Verdict(PhaseState.PENDING, token, UNKNOWN, evidence,
                       f"Kueue reason {token} (not known to taubot): {clip(msg, 160)}", token=token)
    finding, explain = row.finding, row.explain
    if token == "NoMatchingFlavor" and REQUESTED_FLAVOR_RE.search(msg):
        finding = RESEARCHER_FLAVOR
    elif token == "AdmissionGated":
        gates = (meta(wl).get("annotations") or {}).get(ADMISSION_GATED_BY)
        match = GATED_BY_RE.search(msg)
        gate = gates or (match.group("gates").strip() if match else None)
        explain = f"admission gated by {gate}" if gate else (
            "a preemption gate is closed" if "gated" in msg else explain)
    elif token == "Deactivated":
        ev = _cond_true(wl, "Evicted")
        explain += _deactivated_by(wl, (ev or {}).get("reason") or "") if ev else ""
    elif token == "Suspended":
        explain = f"{explain}: {clip(msg, 120)}" if msg else explain
    return Verdict(row.state, token, finding, evidence, explain, token=token)


def judge_workload(wl: dict, objs: RunObjects | None = None) -> Verdict:
    """One Workload's admission verdict; the table of SPEC §3/§4 in code order."""
    name = meta(wl).get("name") or "workload"
    qr = condition(wl, "QuotaReserved")
    qr_reason = (qr or {}).get("reason") or ""
    token = qr_reason if qr and qr.get("status") == "False" and is_token(qr_reason) else None
    verdict = _judge(wl, name, qr, token, objs)
    return verdict if verdict.token == token else replace(verdict, token=token)


def _judge(wl: dict, name: str, qr: dict | None, token: str | None, objs: RunObjects | None) -> Verdict:
    if _cond_true(wl, "Finished"):
        return Verdict(PhaseState.DONE, "Finished", ADMITTED, f"{name}: Finished")
    if (wl.get("spec") or {}).get("active") is False:
        return Verdict(PhaseState.WARNING, "Deactivated", DEACTIVATED, f"{name}: spec.active=false",
                       "the Workload is deactivated (spec.active: false)"
                       + _deactivated_by(wl, (_cond_true(wl, "Evicted") or {}).get("reason") or ""))
    rejected = [c for c in (wl.get("status") or {}).get("admissionChecks") or []
                if c.get("state") == "Rejected"]
    if rejected:
        c = rejected[0]
        return Verdict(PhaseState.WARNING, "AdmissionCheckRejected", CHECK_REJECTED,
                       f"{name}: admission check {c.get('name')} Rejected: "
                       f"{clip(c.get('message') or '')}",
                       f"admission check {c.get('name')} rejected")
    evicted = _evicted(wl, name, objs)
    if evicted:
        return evicted
    if _cond_true(wl, "Admitted"):
        cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
        where = f" by ClusterQueue {cq}" if cq else ""
        return Verdict(PhaseState.DONE, "Admitted", ADMITTED, f"{name}: Admitted{where}")
    if qr is None:
        return Verdict(PhaseState.PENDING, "NotAttempted", WAITING,
                       f"{name}: no QuotaReserved condition yet", "not yet attempted by Kueue")
    if qr.get("status") == "True":
        checks = (wl.get("status") or {}).get("admissionChecks") or []
        waiting = [c for c in checks if c.get("state") != "Ready"]
        names = ",".join(c.get("name") or "?" for c in waiting) or "admission"
        return Verdict(PhaseState.ACTIVE, "UnsatisfiedAdmissionChecks", CHECK_PENDING,
                       f"{name}: quota reserved; admission check {names} "
                       f"{'/'.join(sorted({c.get('state') or 'Pending' for c in waiting})) or 'Pending'}",
                       f"quota reserved, admission check {names} pending")
    reason = qr.get("reason") or "Pending"
    msg = qr.get("message") or ""
    evidence = f"{name}: QuotaReserved=False reason={reason}: {clip(msg)}"
    if token is not None:
        return _token_verdict(wl, name, token, msg, evidence)
    # Older Kueue (no token): the message says why.
    if OVER_MAX_RE.search(msg) and "unused" not in msg:
        return Verdict(PhaseState.WARNING, reason, OVER_MAX, evidence,
                       "request exceeds the queue's maximum quota")
    if reason == "Inadmissible" or BROKEN_RE.search(msg):
        return Verdict(PhaseState.WARNING, reason, QUEUE_BROKEN, evidence,
                       "queue missing, stopped or inactive")
    if NO_FLAVOR_RE.search(msg):
        return Verdict(PhaseState.WARNING, reason, NO_FLAVOR, evidence, "no matching flavor")
    if PODS_READY_WAIT_RE.search(msg):
        row = row_for("WaitingForPodsReady")
        assert row is not None
        return Verdict(row.state, reason, row.finding, evidence, row.explain)
    return Verdict(PhaseState.PENDING, reason, WAITING, evidence, "waiting for quota")


def _queue_objects_verdict(ctx: RunContext) -> Verdict | None:
    """A LocalQueue/ClusterQueue in the snapshot that says it is not Active."""
    for q in ctx.objs.queues:
        active = condition(q, "Active")
        if active and active.get("status") == "False":
            kind, qname = q.get("kind"), meta(q).get("name")
            return Verdict(PhaseState.WARNING, active.get("reason") or "Inactive", QUEUE_BROKEN,
                           f"{kind} {qname}: Active=False reason={active.get('reason')}: "
                           f"{clip(active.get('message') or '')}",
                           f"{kind} {qname} is not active")
    return None


def queue_cause(ctx: RunContext, queues: list[str]) -> str | None:
    """The shared cause of runs waiting in one queue: its ClusterQueue when the snapshot links the
    LocalQueue (or the Workload names it), else the LocalQueue itself."""
    for wl in ctx.objs.workloads:
        cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
        if cq:
            return f"ClusterQueue {cq}"
    for q in ctx.objs.queues:
        if q.get("kind") == "LocalQueue" and meta(q).get("name") in queues:
            cq = (q.get("spec") or {}).get("clusterQueue")
            if cq:
                return f"ClusterQueue {cq}"
    return f"LocalQueue {ctx.namespace}/{queues[0]}" if queues else None


def evaluate(ctx: RunContext, earlier: dict[str, PhaseResult]) -> PhaseResult:
    """The phase line, carrying Kueue's own answer for the JSON contract (SPEC §5b): the token
    of the Workload the line is about (`kueue_reason`) and, for a preempted run, `preemption`."""
    answer, verdict = _evaluate(ctx)
    update: dict = {"kueue": True}
    if verdict is not None:
        update.update(kueue_reason=verdict.token, preemption=verdict.preemption)
    if answer.reason in FORECAST_FOR:
        forecast = snapshot_position(ctx.objs, ctx.now)
        update["forecast"] = forecast
        if forecast is not None:
            update.update(never_fits_update(answer, forecast))
    return answer.model_copy(update=update)


# The answers a queue place and a start estimate serve: waiting in the queue, or over its maximum
# (then never_fits says by how much), or preempted and requeued.
FORECAST_FOR = frozenset({"quota.waiting", "quota.over_max", "quota.preempted"})


def never_fits_finding(forecast: QueuePosition) -> Finding | None:
    """The finding of a run that can never fit (SPEC §5b): `warning`, not transient, owned by whoever
    owns the limit it exceeds, its next action with the numbers. None when it can fit."""
    if not forecast.never_fits:
        return None
    owner = forecast.never_fits_owner if forecast.never_fits_owner in NEVER_FITS else "queue-owner"
    why = forecast.never_fits
    action = NEVER_FITS_ACTION[owner].format(why=why, Why=why[:1].upper() + why[1:])
    return NEVER_FITS[owner].model_copy(update={"next_action": action})


def never_fits_update(answer: PhaseResult, forecast: QueuePosition) -> dict:
    """The admission line's fields when ``forecast`` (a snapshot's, or the live reads') says the run can
    never fit; empty when it can, or when the answer is not one a queue place serves. One rule for a
    dump and a live status alike: the Kueue reason stays in the summary, the numbers follow it; a run
    Kueue itself calls over its maximum keeps that reason code, with the numbers in its next action."""
    finding = never_fits_finding(forecast)
    if finding is None or answer.reason not in FORECAST_FOR:
        return {}
    if answer.reason == OVER_MAX.reason and finding.owner == OVER_MAX.owner:
        finding = finding.model_copy(update={"reason": OVER_MAX.reason})
    if answer.state is PhaseState.WARNING:
        summary = f"{answer.summary}; can never fit: {forecast.never_fits}"
    else:
        head = answer.summary.split(" reason=")[0]
        summary = f"{head} reason=NeverFits: can never fit: {forecast.never_fits}"
    return {"state": PhaseState.WARNING, "finding": finding, "reason": finding.reason, "summary": summary,
            "evidence": [*answer.evidence, f"never fits: {forecast.never_fits}"]}


def _requeued(wl: dict) -> str:
    """A preempted run's standing since: Kueue requeued it (its QuotaReserved=False reason)."""
    qr = condition(wl, "QuotaReserved")
    if not qr or qr.get("status") != "False":
        return ""
    row = row_for(qr.get("reason") or "")
    return f"; requeued: {row.explain}" if row else "; requeued, waiting for quota"


def _evaluate(ctx: RunContext) -> tuple[PhaseResult, Verdict | None]:
    objs = ctx.objs
    if objs.run is None:
        return result(NAME, LAYER, PhaseState.PENDING, "waiting for the run to exist", WAITING), None
    queue_label = labels(objs.run).get(QUEUE_LABEL)
    workloads = objs.workloads
    queues = sorted({(wl.get("spec") or {}).get("queueName") or "" for wl in workloads} - {""})
    if not queues and queue_label:
        queues = [queue_label]
    qtext = f"queue={','.join(queues)}" if queues else "queue=?"
    if not workloads:
        if not queue_label:
            return result(NAME, LAYER, PhaseState.SKIPPED,
                          "not managed by Kueue (no kueue.x-k8s.io/queue-name label, no Workload)",
                          ADMITTED), None
        broken = _queue_objects_verdict(ctx)
        if broken:
            return result(NAME, LAYER, PhaseState.WARNING,
                          f"0/1 admitted {qtext} reason={broken.reason}: {broken.explain}",
                          broken.finding, [broken.evidence], cause=queue_cause(ctx, queues)), None
        suspended = bool((objs.run.get("spec") or {}).get("suspend"))
        why = "run suspended, no Workload yet" if suspended else "no Workload yet"
        return result(NAME, LAYER, PhaseState.PENDING, f"0/1 admitted {qtext} reason=NoWorkload: {why}",
                      NOT_CREATED), None
    verdicts = [judge_workload(wl, objs) for wl in workloads]
    verdicts = [replace(v, explain=v.explain + _requeued(wl)) if v.preemption is not None else v
                for v, wl in zip(verdicts, workloads, strict=True)]
    admitted = sum(v.state is PhaseState.DONE for v in verdicts)
    head = f"{admitted}/{len(verdicts)} admitted {qtext}"
    evidence = [v.evidence for v in verdicts]
    for wl in workloads:
        requeue = (wl.get("status") or {}).get("requeueState") or {}
        if requeue.get("count"):
            evidence.append(f"{meta(wl).get('name')}: requeued {requeue['count']} times")
    open_ = [v for v in verdicts if v.state is not PhaseState.DONE]
    if not open_:
        gated = [p for p in objs.pods if kueue_gated(p)]
        note = f"; {len(gated)} pods still gated" if gated else ""
        return result(NAME, LAYER, PhaseState.DONE,
                      f"{head} (quota reserved; does not prove pods run){note}", ADMITTED, evidence), None
    broken = _queue_objects_verdict(ctx)
    if broken and all(v.state is not PhaseState.WARNING for v in open_):
        open_.insert(0, broken)
        evidence.append(broken.evidence)
    for state in (PhaseState.WARNING, PhaseState.PENDING, PhaseState.ACTIVE):
        chosen = next((v for v in open_ if v.state is state), None)
        if chosen:
            return result(NAME, LAYER, state, f"{head} reason={chosen.reason}: {chosen.explain}",
                          chosen.finding, evidence, cause=queue_cause(ctx, queues)), chosen
    raise AssertionError("unreachable: open verdicts have a state")
