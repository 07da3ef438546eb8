"""Layer 7: Runtime progress (the log) and Durable evidence (the experiment record), SPEC §5a.

Pure, like the phases: the log lines and the experiment record come in as
evidence, `now` from the caller. Neither admission nor a Running pod proves
progress; these checks are where a healthy-looking run that hung hours ago
stops being called "every phase done".
"""

from __future__ import annotations

from datetime import datetime

from . import registry
from .culprit import (
    RankFacts,
    RankReport,
    find_culprit,
    follower,
    pod_rank,
    ranks_in_one_log,
    read_ranks,
    why_no_culprit,
)
from .linkage import meta
from .models import ExperimentEvidence, Finding, LogEvidence, PhaseResult, PhaseState, PodLog
from .phases.common import RunContext, clip, result
from .podfacts import containers, is_terminal, pod_phase
from .progress import Found, Progress, parse_progress
from .timeutil import parse_time, stamp

RUNTIME = registry.RUNTIME_PROGRESS.name
EVIDENCE = registry.DURABLE_EVIDENCE.name
LAYER = registry.RUNTIME_PROGRESS.layer
DEFAULT_STALL_SECONDS = 20 * 60

NO_PROGRESS = Finding(reason="progress.stalled", owner="researcher", transient=False,
                      next_action="The process is alive but not progressing (data loader stall, deadlock, "
                      "hung collective): read the log (`/tau logs <run>`), fix the application, and resume "
                      "from the last checkpoint.")
HANG = Finding(reason="progress.hang", owner="researcher", transient=False,
               next_action="The log shows a hang signature: read `/tau logs <run>`; if GPU/node health is "
               "clean the cause is in the application (collective mismatch, uneven batches), then resume "
               "from the last checkpoint.")
CRASH = Finding(reason="progress.crashed", owner="researcher", transient=False,
                next_action="The process crashed (see the last lines in `/tau logs <run>`): fix the cause, "
                "then resume from the last checkpoint or resubmit.")
FAILED_SILENT = Finding(reason="progress.failed_silent", owner="researcher", transient=False,
                        next_action="The run failed but its log's last lines show no error: the failure's "
                        "evidence is elsewhere (the exit code, the RayJob's message); read the whole log "
                        "(`/tau logs <run>`), fix the cause and resubmit.")
CULPRIT_NODE = Finding(reason="progress.culprit_node", owner="node-pool-owner", transient=False,
                       next_action="The rank the others wait on ran on a node with a fault: the node-pool "
                       "owner drains and repairs that node (`tau cluster validate nodes`); then resume the "
                       "run from the last checkpoint on healthy nodes.")
PROGRESSING = Finding(reason="progress.ok", owner="researcher", transient=None,
                      next_action="The run is making progress; nothing to do.")
UNREAD = Finding(reason="progress.unread", owner="researcher", transient=None,
                 next_action="The log could not be read, so progress is not known: `/tau logs <run>`.")
EVIDENCE_MISSING = Finding(reason="evidence.missing", owner="taugrid-owner", transient=False,
                           next_action="The log shows progress but the experiment record does not: the "
                           "TauGrid owner checks the metrics offload (MLflow tracking) for this run.")
EVIDENCE_OK = Finding(reason="evidence.ok",
                      owner="researcher", transient=None, next_action="The experiment record is current.")


def main_started(ctx: RunContext) -> bool:
    """The run's main process has started: the Job's main container ran, the RayJob's driver runs."""
    objs = ctx.objs
    if objs.run is None:
        return False
    if ctx.terminal() is not None:
        return True
    if objs.kind == "RayJob":
        return (ctx.status.get("jobStatus") or "") in ("RUNNING", "SUCCEEDED", "FAILED", "STOPPED")
    for pod in objs.pods:
        for c in containers(pod, init=False):
            if c.running or c.terminated or c.last_terminated:
                return True
    return False


def _started_at(ctx: RunContext) -> datetime | None:
    if ctx.objs.kind == "RayJob":
        return parse_time(ctx.status.get("startTime"))
    starts = [parse_time((c.running or {}).get("startedAt")) for p in ctx.objs.pods
              for c in containers(p, init=False) if c.running]
    starts = [s for s in starts if s]
    return min(starts) if starts else None


def _pods_running(ctx: RunContext) -> bool:
    return ctx.terminal() is None and any(pod_phase(p) == "Running" and not is_terminal(p)
                                          for p in ctx.objs.pods)


def _failure_elsewhere(ctx: RunContext) -> list[str]:
    """A failed run's evidence outside its log: the RayJob's message, the containers' exit codes."""
    found = []
    message = ctx.status.get("message") if ctx.objs.kind == "RayJob" else None
    if isinstance(message, str) and message.strip():
        found.append(f"RayJob: {clip(message, 200)}")
    for pod in ctx.objs.pods:
        for c in containers(pod, init=False):
            term = c.terminated or c.last_terminated or {}
            if term.get("exitCode") not in (None, 0):
                found.append(f"{c.name} exited {term.get('exitCode')} ({term.get('reason') or 'Error'})")
    return found[:3]


def progress_text(p: Progress) -> str:
    parts = []
    if p.last_step is not None:
        parts.append(f"step {p.last_step:,.0f}")
    if p.last_loss is not None:
        trend = p.trend()
        parts.append(f"loss {p.last_loss:.4g}" + (f" ({trend})" if trend else ""))
    text = ", ".join(parts)
    if p.last_progress_at is not None:
        text = f"{text} at {stamp(p.last_progress_at)}" if text else f"at {stamp(p.last_progress_at)}"
    return text


def runtime_progress(ctx: RunContext, logs: LogEvidence, stall_seconds: int
                     ) -> tuple[PhaseResult | None, Progress | None]:
    """The Runtime progress check, or None while the main process has not started."""
    if not main_started(ctx):
        return None, None
    if logs.unavailable is not None:
        return result(RUNTIME, LAYER, PhaseState.SKIPPED, f"unavailable: {clip(logs.unavailable, 200)}",
                      UNREAD), None
    ranks = logs.ranks or ranks_in_one_log(logs.lines, _one_log_pod(ctx, logs))  # torchrun's, Ray's workers
    report = read_ranks(ranks, ctx.objs.pods, logs.ranks_sampled) if ranks else None
    p = parse_progress(logs.lines if logs.lines or not logs.ranks else _primary(logs.ranks, ctx.objs.pods))
    if report is not None and p.found is None:
        p.found = _ranks_found(report)
    check, p = _runtime_progress(ctx, logs, stall_seconds, p)
    if check.state is PhaseState.WARNING and (logs.driver_stack or logs.driver_stack_unavailable):
        # Where a stalled RayJob's driver waits (SPEC §5c): the frames for Details and the card.
        note = (f"driver stack (Ray dashboard, py-spy): {logs.driver_stack[0]}" if logs.driver_stack
                else f"driver stack: unavailable: {logs.driver_stack_unavailable}")
        check = check.model_copy()
        check.driver_stack = list(logs.driver_stack)  # validated: through the door (Outside)
        check.evidence = [*check.evidence, note]
    if report is None or check.state is not PhaseState.WARNING:
        return check, p
    return _with_culprit(ctx, check, report), p


def _one_log_pod(ctx: RunContext, logs: LogEvidence) -> str:
    """Whose log the run's one log is: a Job's only pod (torchrun's ranks all in it), else its source."""
    own = [p for p in ctx.objs.pods if not ctx.objs.is_ray_pod(p)]
    if ctx.objs.kind == "Job" and len(own) == 1:
        return str(meta(own[0]).get("name") or "pod")
    return logs.source or "log"


def _primary(ranks: list[PodLog], pods: list[dict]) -> list[tuple[str | None, str]]:
    """The log progress is read from when only the ranks' logs were given: rank 0's pod (it
    prints the progress lines), else the first pod that was read."""
    by_name = {meta(p).get("name"): p for p in pods}
    read = [r for r in ranks if r.unavailable is None]
    zero = next((r for r in read if pod_rank(by_name.get(r.pod) or {}) == 0), None)
    return (zero or (read[0] if read else PodLog(pod="?"))).lines


def _ranks_found(report: RankReport) -> Found | None:
    """The ranks' own signature when the primary log shows none: a rank's crash first (its own
    failure, not a peer's), else a watchdog timeout."""
    crashed = [f for f in report.ranks if f.crash is not None]
    if crashed:
        def order(f: RankFacts) -> tuple[bool, bool, float]:
            crash = f.crash
            assert crash is not None
            return (follower(crash.line), crash.at is None, crash.at.timestamp() if crash.at else 0.0)
        return min(crashed, key=order).crash
    timed = next((f for f in report.ranks if f.watchdog and f.waits_seq is not None), None)
    if timed is not None:
        return Found("NCCL watchdog timeout", "hang", "NCCL watchdog timeout: a collective hung",
                     timed.watchdog or "", timed.watchdog_at)
    return None


def _with_culprit(ctx: RunContext, check: PhaseResult, report: RankReport) -> PhaseResult:
    """The check with the culprit (SPEC §5c) in its summary and evidence — or why there is none;
    its node's fault makes the node-pool owner the owner."""
    culprit = find_culprit(report, ctx.objs.pods, ctx.objs.nodes)
    evidence = list(check.evidence)
    if report.unread:
        evidence.append(f"rank logs not read: {'; '.join(report.unread[:3])}"
                        + (f" (+{len(report.unread) - 3} more)" if len(report.unread) > 3 else ""))
    if culprit is None:
        quiet = check.model_copy()  # assigned, so validated: the text goes through the door (Outside)
        quiet.summary = clip(f"{check.summary}; {why_no_culprit(report)}", 600)
        quiet.evidence = evidence
        return quiet
    finding = CULPRIT_NODE if culprit.node_fault else check.finding
    updated = result(check.name, check.layer, check.state, clip(f"{check.summary}; {culprit.summary}", 600),
                     finding, evidence + [f"culprit: {e}" for e in culprit.evidence])
    updated.culprit = culprit
    updated.driver_stack = list(check.driver_stack)
    return updated


def _runtime_progress(ctx: RunContext, logs: LogEvidence, stall_seconds: int, p: Progress
                      ) -> tuple[PhaseResult, Progress]:
    verdict = ctx.terminal()
    facts = progress_text(p)
    lines = f"{p.lines} lines" if not logs.ranks else f"{len(logs.ranks)} rank logs"
    evidence = [f"log ({logs.source or 'supplied'}): {lines}, {p.recognised} progress lines"
                + (f"; formats: {', '.join(p.formats)}" if p.formats else "")]
    if p.last_checkpoint:
        evidence.append(f"last checkpoint: {p.last_checkpoint}"
                        + (f" at {stamp(p.checkpoint_at)}" if p.checkpoint_at else ""))
    if verdict == "succeeded":
        return result(RUNTIME, LAYER, PhaseState.DONE, "run succeeded" + (f" ({facts})" if facts else ""),
                      PROGRESSING, evidence), p
    if p.found is not None:
        at = f" at {stamp(p.found.at)}" if p.found.at else ""
        last = f"; last progress: {facts}" if facts else ""
        finding = HANG if p.found.kind == "hang" else CRASH
        evidence.append(f"{p.found.signature}: {clip(p.found.line, 300)}")
        return result(RUNTIME, LAYER, PhaseState.WARNING, f"{p.found.summary}{at}{last}", finding,
                      evidence), p
    if verdict == "failed" and p.last_error:  # never "shows no error" when its last lines carry one
        evidence.append(f"last error line: {clip(p.last_error, 300)}")
        return result(RUNTIME, LAYER, PhaseState.WARNING,
                      f"the run failed: {clip(p.last_error, 200)}"
                      + (f"; last progress: {facts}" if facts else ""),
                      CRASH, evidence), p
    if verdict == "failed":  # a log that was read is never skipped (SPEC §11)
        elsewhere = _failure_elsewhere(ctx)
        return result(RUNTIME, LAYER, PhaseState.WARNING,
                      "the run failed; its last lines show no error"
                      + (f" ({elsewhere[0]})" if elsewhere else "")
                      + (f"; last progress: {facts}" if facts else ""), FAILED_SILENT,
                      evidence + elsewhere), p
    now = ctx.now
    running = _pods_running(ctx) or ctx.objs.kind == "RayJob"
    if p.recognised:
        since = p.last_progress_at or logs.unchanged_since  # untimed: the tail's first sighting
        if since is not None and running and (now - since).total_seconds() > stall_seconds:
            return result(RUNTIME, LAYER, PhaseState.WARNING,
                          f"no progress since {stamp(since)} ({facts}), over {stall_seconds // 60} min",
                          NO_PROGRESS, evidence), p
        if since is None:  # untimed lines (Ray's Jobs API): never a claim that progress is recent
            facts = f"{facts}; time of the last progress line unknown" if facts else \
                "time of the last progress line unknown"
        return result(RUNTIME, LAYER, PhaseState.ACTIVE, facts or "progressing", PROGRESSING, evidence), p
    last = p.last_line_at or logs.unchanged_since or (_started_at(ctx) if p.lines == 0 else None)
    if last is not None and running and (now - last).total_seconds() > stall_seconds:
        what = "no new log line" if p.lines else "no log output"
        return result(RUNTIME, LAYER, PhaseState.WARNING,
                      f"{what} since {stamp(last)}, over {stall_seconds // 60} min (no progress lines)",
                      NO_PROGRESS, evidence), p
    if p.lines == 0:
        return result(RUNTIME, LAYER, PhaseState.ACTIVE, "just started: no output yet", PROGRESSING,
                      evidence), p
    return result(RUNTIME, LAYER, PhaseState.ACTIVE, "progress unknown: no step/epoch/loss lines",
                  PROGRESSING, evidence), p


def durable_evidence(ctx: RunContext, record: ExperimentEvidence, progress: Progress | None,
                     stall_seconds: int) -> PhaseResult:
    """The Durable evidence check: the experiment record keeps up with the log's progress."""
    run = ctx.objs.name
    if record.unavailable is not None:
        return result(EVIDENCE, LAYER, PhaseState.SKIPPED, f"unavailable: {clip(record.unavailable, 200)}",
                      EVIDENCE_OK)
    logs_progress = progress is not None and progress.recognised > 0
    if not record.found:
        if logs_progress or ctx.terminal() == "succeeded":
            return result(EVIDENCE, LAYER, PhaseState.WARNING,
                          f"no experiment record tagged taugrid.io/run={run}, though the log shows progress",
                          EVIDENCE_MISSING)
        return result(EVIDENCE, LAYER, PhaseState.ACTIVE, "no experiment record yet", EVIDENCE_OK)
    at = record.last_metric_at
    step = f"step {record.last_step:,.0f}" if record.last_step is not None else "no metric step"
    where = f"{step}" + (f" at {stamp(at)}" if at else "")
    if ctx.terminal() == "succeeded":
        return result(EVIDENCE, LAYER, PhaseState.DONE, f"record {record.run_id}: {where}", EVIDENCE_OK)
    stale = at is None or (ctx.now - at).total_seconds() > stall_seconds
    if logs_progress and stale:
        return result(EVIDENCE, LAYER, PhaseState.WARNING,
                      f"record {record.run_id} stale: {where} while the log progresses", EVIDENCE_MISSING)
    return result(EVIDENCE, LAYER, PhaseState.ACTIVE, f"record {record.run_id}: {where}", EVIDENCE_OK)


__all__ = ["DEFAULT_STALL_SECONDS", "EVIDENCE", "RUNTIME", "durable_evidence", "main_started",
           "progress_text", "runtime_progress"]
