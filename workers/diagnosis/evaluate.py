"""`evaluate(snapshot, run, now) -> Diagnosis`: the pure heart of taubot.

No I/O and no clock: the same function judges a dump a user made with kubectl
and a snapshot collected live under the user's identity. Phases are evaluated
in dependency order (pod-level phases before RayCluster, which borrows their
evidence) and reported in the guide's order.
"""

from __future__ import annotations

from datetime import datetime

from . import later_evidence, registry
from .eta import training_eta
from .gaps import PHASE_NEEDS, ReadGap, short_why
from .layers import layer_info
from .linkage import RunObjects, find_run, run_names
from .models import (
    Diagnosis,
    ExperimentEvidence,
    Finding,
    LogEvidence,
    PhaseResult,
    PhaseState,
    ProgressTimeline,
    RunRef,
)
from .nodes import gpu_node_health
from .phases import rayjob_status, submitted
from .phases.common import RunContext
from .phases.table import EVALUATION_ORDER
from .progress_checks import (
    DEFAULT_STALL_SECONDS,
    EVIDENCE,
    PROGRESSING,
    durable_evidence,
    progress_text,
    runtime_progress,
)
from .recovery import recovery
from .registry import ANSWER_ORDER, PHASE_NAMES
from .shapes import sanitize
from .snapshot import flatten

ALL_DONE = Finding(
    reason="run.all_done",
    owner="researcher",
    transient=None,
    next_action="Every lifecycle phase is done, which does not prove progress: check the "
    "driver or pod log (`/tau logs <run>`) and the experiment record "
    "(`taugrid-portal experiment status <run>`).",
)
SUCCEEDED = Finding(
    reason="run.succeeded",
    owner="researcher",
    transient=None,
    next_action="The run succeeded: nothing to do. Its results are in the experiment record "
    "(`taugrid-portal experiment status <run>`).",
)


def _objects(snapshot: list[dict] | dict) -> list[dict]:
    """Decoded objects only: reading text (JSON, YAML) is the collector's (`collect/dumps.py`)."""
    return flatten(snapshot)


def _judge_finished(ctx: RunContext, results: dict[str, PhaseResult]) -> None:
    """A finished run is judged as it finished (SPEC §3).

    A succeeded Job or RayJob is done in every phase whatever earlier attempts
    left behind; a failed RayJob's verdict is in `RayJob status`, so the
    phases before it are closed as done (their evidence kept); a failed Job
    keeps its failure evidence and closes only the phases that were waiting.
    """
    verdict = ctx.terminal()
    if verdict is None:
        return
    # A failed Job has no verdict phase of its own: its failure evidence (Container
    # start) stays a warning, and only what can no longer progress is closed.
    keep_warnings = verdict == "failed" and ctx.objs.kind == "Job"
    for name, phase in results.items():
        if name == rayjob_status.NAME or phase.state.finished:
            continue
        if phase.state is PhaseState.WARNING and (keep_warnings or name == submitted.NAME):
            continue  # a spec KubeRay rejected (ValidationFailed) stays a layer-3 answer
        if verdict == "succeeded":
            note = "run succeeded"
        elif ctx.objs.kind == "RayJob":
            note = "run failed; see RayJob status"
        else:
            note = "run failed; see Container start"
        results[name] = phase.model_copy(update={
            "state": PhaseState.DONE,
            "summary": f"{phase.summary} ({note})" if phase.state is PhaseState.WARNING
            else f"finished ({note})",
            "reason": f"run.{verdict}",
        })


def _apply_gaps(ctx: RunContext, results: dict[str, PhaseResult], gaps: dict[str, ReadGap]) -> None:
    """Resources the collector could not read make their phases say so (SPEC §7).

    A 403 reads "permission denied (list pods)", never "not found" or an empty
    answer; a 5xx or timeout reads "unavailable". Phases that do not apply to
    the run (RayCluster of a Job) stay skipped.
    """
    run_gap = next((gaps[r] for r in ("rayjobs", "jobs") if r in gaps), None)
    if ctx.objs.run is None and run_gap is not None:
        # The run was never read: no phase may say "run not found" (SPEC §7; issue 15).
        for name, phase in list(results.items()):
            if name != submitted.NAME and phase.state is PhaseState.PENDING:  # all wait on the run
                results[name] = phase.model_copy(update={"summary": f"not checked: {run_gap.text}",
                                                         "reason": "read.not_checked"})
    for name, needs in PHASE_NEEDS.items():
        phase = results[name]
        if phase.state is PhaseState.SKIPPED and name != registry.DRA.name:
            continue
        if name == submitted.NAME and ctx.objs.run is not None:
            continue
        gap = next((gaps[r] for r in needs if r in gaps), None)
        if gap is None:
            continue
        finding = gap.finding(ctx.namespace)
        results[name] = phase.model_copy(update={
            "state": PhaseState.WARNING,
            "summary": gap.text,
            "evidence": [f"{gap.text}: {gap.detail}" if gap.detail else gap.text],
            "finding": finding,
            "reason": finding.reason,
            "cause": None,
            "via": None,
        })


def _failed_reads(gaps: dict[str, ReadGap] | None, node_gaps: dict[str, str] | None) -> dict[str, str]:
    """Every read that failed (a 403, a 5xx, a timeout), by resource: the first screen names them
    (SPEC §7). A node not read because of a bound or not found is no failed read."""
    out = {plural: gap.why for plural, gap in (gaps or {}).items()}
    for text in (node_gaps or {}).values():
        if text.startswith("permission denied"):
            out.setdefault("nodes", short_why("forbidden", text))
        elif text.startswith("unavailable"):
            out.setdefault("nodes", short_why("unavailable", text))
    return out


def _absent(nodes: dict[str, dict], ctx: RunContext) -> dict[str, str]:
    """Offline: the run's nodes the dump does not hold are unknown, never healthy."""
    bound = {(p.get("spec") or {}).get("nodeName") for p in ctx.objs.pods}
    return {n: "absent from the dump" for n in bound if n and n not in nodes}


def evaluate(
    snapshot: list[dict] | dict,
    run: str,
    now: datetime,
    namespace: str | None = None,
    gaps: dict[str, ReadGap] | None = None,
    *,
    logs: LogEvidence | None = None,
    experiment: ExperimentEvidence | None = None,
    stall_seconds: int = DEFAULT_STALL_SECONDS,
    node_gaps: dict[str, str] | None = None,
    dcgm_health: dict[str, list[str]] | None = None,
    linked: RunObjects | None = None,
    known_runs: list[str] | None = None,
) -> Diagnosis:
    """Diagnose `run` from the snapshot's objects as of `now`.

    `gaps` names the resources a live collection could not read (plural →
    why), so the answer says "permission denied" where it could not look.
    `logs` and `experiment` are the evidence of the layer-7 checks (SPEC §5a);
    a check whose evidence was not supplied is not part of the answer. Node
    objects in the snapshot (or ``node_gaps``, the run's nodes a live
    collection could not read) make the layer-6 GPU/node health check.
    """
    objects, skipped = sanitize(_objects(snapshot))
    objs = linked if linked is not None else find_run(objects, run, namespace)  # the monitor links once
    if objs.run is None and known_runs is None:  # offline: the dump's own runs
        known_runs = run_names(objects, namespace)
    ctx = RunContext(objs=objs, now=now, known_runs=tuple(known_runs or ()))
    results: dict[str, PhaseResult] = {}
    for name, fn in EVALUATION_ORDER:
        results[name] = fn(ctx, dict(results))
    _judge_finished(ctx, results)
    later_evidence.apply(ctx, results)  # SPEC §3: what a partial snapshot does not show
    if gaps:
        _apply_gaps(ctx, results, gaps)
    phases = [results[name] for name in PHASE_NAMES]
    checks: dict[str, PhaseResult] = {}
    nodes = {(o.get("metadata") or {}).get("name"): o for o in objects if o.get("kind") == "Node"}
    if nodes or node_gaps:
        unread = dict(node_gaps) if node_gaps is not None else _absent(nodes, ctx)
        health = gpu_node_health(ctx, nodes, unread, dcgm_health)
        if health is not None:
            checks[health.name] = health
    progress, eta = None, None
    if logs is not None and objs.run is not None:
        check, progress = runtime_progress(ctx, logs, stall_seconds)
        if check is not None:
            checks[check.name] = check
        if progress is not None and check is not None:
            eta = training_eta(progress, progressing=check.state is PhaseState.ACTIVE
                               and check.finding.reason == PROGRESSING.reason)
    if experiment is not None and objs.run is not None:
        checks[EVIDENCE] = durable_evidence(ctx, experiment, progress, stall_seconds)
    answer = {**results, **checks}
    first = next((answer[n] for n in ANSWER_ORDER if n in answer and not answer[n].state.finished), None)
    ref = RunRef(name=run, namespace=objs.namespace, kind=objs.kind)  # type: ignore[arg-type]
    if first is None:
        finding = SUCCEEDED if ctx.terminal() == "succeeded" else ALL_DONE  # a succeeded run is told so
        layer, evidence = 7, []
    else:
        finding, layer, evidence = first.finding, first.layer, list(first.evidence)
    if gaps and "events" in gaps:
        evidence.append(f"events: {gaps['events'].text}")
    evidence += skipped  # a read gap of its own: what the dump held but could not be read
    action = finding.next_action.replace("<run>", run).replace("<namespace>", ctx.namespace)
    filled = finding.model_copy(update={"next_action": action})
    verdict = recovery(first, filled, layer, terminal=ctx.terminal(),
                       checkpoint=progress.last_checkpoint if progress else None)
    return Diagnosis(
        checks=[checks[n] for n in ANSWER_ORDER if n in checks],
        recovery=verdict,
        progress_summary=progress_text(progress) if progress else "",
        loss_points=list(progress.losses[-20:]) if progress else [],
        eta=eta,
        loss_curve=[(s, v) for _at, s, v in progress.points if v is not None] if progress else [],
        lr_curve=list(progress.rates) if progress else [],
        progress_timeline=ProgressTimeline(
            points=[(at, s, v) for at, s, v in progress.points if at is not None],
            last_progress_at=progress.last_progress_at,
            unchanged_since=logs.unchanged_since if logs else None) if progress else None,
        run=ref,
        phases=phases,
        first_incomplete=first.name if first else None,
        layer=layer,
        owner=finding.owner,
        transient=finding.transient,
        next_action=action,
        evidence=evidence,
        layer_info=layer_info(layer, run, objs.namespace),
        read_gaps=_failed_reads(gaps, node_gaps),
    )
