"""Slack cards: a Diagnosis (or a failure, or a workspace report) → validated Block Kit blocks.

Why this split — context here, layout in `templates/*.json.j2`:

* Every piece of text that can come from the cluster (summaries, evidence,
  names, next actions that quote an image or a queue) is escaped and cut to
  its Block Kit limit *here*, through `workers/render/mrkdwn.py`, while the
  card context is built. The templates receive only safe strings and never
  compose text whose length they could not bound, so "the card fits" is a
  property of this module that tests can check with hostile input.
* The templates hold the block structure, so changing what a card looks like
  does not touch the code that makes it safe.

After rendering, `validate_blocks` parses the blocks with slack_sdk's block
models (which enforce the per-element limits they know) and adds the limits
slack_sdk does not check (50 blocks, 2000-character fields, 10 context
elements), plus taubot's own invariant: no text in a card contains a raw
`<`, so no card can carry `<!channel>`, a `<@U…>` mention or a link. A
violation is a bug in this module and raises `CardError`; it is never posted.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from pydantic import BaseModel, ConfigDict
from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block

from workers.diagnosis.checks import LayerReport
from workers.diagnosis.models import Diagnosis, PhaseResult, PhaseState
from workers.diagnosis.profile import GpuProfile
from workers.diagnosis.progress import sparkline
from workers.diagnosis.queue_position import CAVEAT
from workers.diagnosis.registry import BY_NAME, CHECK_NAMES, LAYER_CHECKS, RAYJOB_STATUS
from workers.render.forecast import eta_text, queue_position_text, start_lines, start_text
from workers.render.profile import profile_lines

from .buttons import ESCALATED_BLOCK_ID, CardButton
from .mrkdwn import clip, code, code_block, escape, plain, slack_len, truncate
from .slots import CHARTS_BLOCK_ID, AutoPostFooter, CardPatch, EscalationSlot, MuteSlot, SlottedCard


def _templates_dir() -> Path:
    """`templates/` of the source tree, else the copy a wheel installs under `share/taubot/`.

    The repository layout keeps templates at the top level; an image built from a
    wheel (non-editable install) has no source tree, so pyproject ships them as data.
    """
    source = Path(__file__).resolve().parents[2] / "templates"
    if source.is_dir():
        return source
    return Path(sys.prefix) / "share" / "taubot" / "templates"


TEMPLATES_DIR = _templates_dir()

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_CONTEXT_ELEMENTS = 10
MAX_CONTEXT_TEXT = 2000  # a context element is a text object; keep it to a field's size
MAX_FALLBACK_TEXT = 3000  # `text` beside blocks is only the notification; keep it short

# Per-line budget of a phase summary: ten phases must fit one 3000-unit section
# together with their emoji, names and markup (~40 units each).
SUMMARY_BUDGET = 250
EVIDENCE_BUDGET = 1800
NAME_BUDGET = 120
# The first screen (SPEC §7): at most 1,000 characters and 18 lines of text in all.
FIRST_SCREEN_CHARS = 1000
FIRST_SCREEN_LINES = 18
FIRST_SCREEN_EVIDENCE = 3  # lines; the rest is in *Details*
UNREAD_BUDGET = 300  # the failed-reads line (several resources, each with its reason)
UNREAD_KEPT = 120  # what of it stays when the first screen must be shortened: it is never cut away
EVIDENCE_LINE_BUDGET = 160
FOCUS_BUDGET = 220
NEXT_BUDGET = 320
FOCUS_KEPT = 320  # the first incomplete line's room while the card's other lines are shortened
PLACE_FOCUS = 200  # the first incomplete line's room when it makes way for the place in the queue
NEXT_KEPT = 240  # the handoff's lines (owner; Next with its command) keep this much while others give way
FOCUS_MARK = "*First incomplete:"
SHORTEN_STEPS = (200, 150, 110, 80, 60)  # per-line limits tried when a card is still too long

STATE_EMOJI: dict[PhaseState, str] = {
    PhaseState.DONE: "✅",
    PhaseState.ACTIVE: "🔄",
    PhaseState.PENDING: "⏳",
    PhaseState.WARNING: "⚠️",
    PhaseState.SKIPPED: "➖",
}
CHECK_EMOJI = {"ok": "✅", "failed": "❌", "warning": "⚠️", "skipped": "➖"}
FIRST_INCOMPLETE_MARK = "  ◀ *first incomplete*"


class CardError(Exception):
    """Rendered blocks that Slack would refuse or that break the escaping invariant: a bug."""


class CardDetails(BaseModel):
    """What *Details* posts in the card's thread: everything the first screen leaves out (SPEC §7:
    "one press away, never lost"). Every string is mrkdwn-safe and within its section's limit."""

    model_config = ConfigDict(frozen=True)

    header: str
    phase_tree: str = ""  # every phase and check, one line each, with its summary
    evidence: str = ""  # every evidence line
    proves: str
    recovery: str = ""
    command: str
    operator_hints: str = ""  # only when the requester's access review allowed them (as on the card before)
    gpu_profile: str = ""
    fallback: str


class PhaseCardContext(SlottedCard):
    """What `phase_card.json.j2` shows; every string is mrkdwn-safe and within its limit.

    The first screen (SPEC §7): what is stuck (``tree``: the done phases on one line, the first
    incomplete one with its summary, the phases waiting behind it on one line), whose it is and
    what to do next (``handoff``), and up to three evidence lines; the rest is ``details``,
    posted in the thread by *Details*. Features add themselves through typed slots
    (`workers/render/slots.py`)."""

    header: str
    meta: str
    unreachable: str = ""
    unread: str = ""  # SPEC §7: every read that failed, on one line (`Could not read: pods (HTTP 500)`)
    tree: str
    evidence_lines: list[str] = []  # each an escaped inline-code line; `render_phase_card` shows what fits
    queue_line: str = ""  # queue position or ETA (`queue_line`): shown when it fits with the evidence
    evidence_total: int = 0  # how many evidence lines there are in all (the rest are in *Details*)
    handoff: str
    notes: list[str] = []
    details: CardDetails | None = None
    details_button: CardButton | None = None  # set by the card store when it posts the card
    validate_button: CardButton | None = None  # issue 14: a layer-6 answer's *Validate these nodes*
    fallback: str

    def with_note_first(self, note: str) -> PhaseCardContext:
        """The card with ``note`` (taubot's own words) before its other notes."""
        return self.replace(notes=[note, *self.notes])


class ErrorCardContext(CardPatch):
    """What `error_card.json.j2` shows."""

    header: str
    what: str
    error: str
    next_action: str
    reference: str
    fallback: str


class WorkspaceCardContext(CardPatch):
    """What `workspace_card.json.j2` shows."""

    header: str
    summary: str
    checks: str = ""
    handoff: str = ""
    reference: str
    fallback: str


class GroupCardContext(SlottedCard):
    """What `group_card.json.j2` shows: one post for runs stalled by one shared cause."""

    header: str
    intro: str
    runs: str
    fallback: str


def build_group_card(label: str, members: list[tuple[str, str, str]], *, status: str = "",
                     escalate_button: CardButton | None = None,
                     mute_button: CardButton | None = None) -> GroupCardContext:
    """``members``: (run, phase, since) of each run the cause holds."""
    lines = [f"• {code(run, NAME_BUDGET)} — *{escape(phase, 40)}* since {escape(since, 40)}"
             for run, phase, since in members]
    return GroupCardContext(
        header=plain(f"🚨 {len(members)} runs stalled: {label}", MAX_HEADER_TEXT),
        intro=f"taubot found {len(members)} runs stuck for one shared cause: *{escape(label, 300)}*.",
        runs=_fit_lines(lines, MAX_SECTION_TEXT) if lines else "_no run is stalled any more_",
        auto_post=AutoPostFooter(status=status) if status else None,
        escalation=EscalationSlot(button=escalate_button), mute=MuteSlot(button=mute_button),
        fallback=escape(f"{len(members)} runs stalled: {label}: " + ", ".join(m[0] for m in members), 500),
    )


class LogsCardContext(BaseModel):
    """What `logs_card.json.j2` shows; every string mrkdwn-safe and within its limit."""

    model_config = ConfigDict(frozen=True)

    header: str
    fields: list[str]
    lines: str = ""
    unavailable: str = ""
    note: str
    fallback: str


class RenderedCard(BaseModel):
    """Blocks plus the notification `text` that must accompany them in chat.postMessage."""

    model_config = ConfigDict(frozen=True)

    text: str
    blocks: list[dict[str, Any]]


# ------------------------------------------------------------------ building


_PLACEHOLDER = re.compile(r"<[A-Za-z][A-Za-z-]*>")


def filled_in(command: str) -> bool:
    """Whether a suggested command can be run as shown: a `<cluster-queue-name>` or `<N>` left by
    the guide's template is a dead end on a card (issue 38), so such a line is not offered."""
    return not _PLACEHOLDER.search(command)


def _recovery_text(d: Diagnosis) -> str:
    """*Details*' Recovery line. A verdict that ends with the answer's next action says only its
    own part: the card above already shows *Next*, word for word (issue 38: no repeated lines)."""
    if d.recovery is None:
        return ""
    summary = d.recovery.summary
    if d.recovery.states_next_action and d.next_action and summary.endswith(d.next_action):
        lead = summary[: -len(d.next_action)].rstrip(" :.")
        said = f"{escape(lead, 2000)} — then *Next* on the card." if lead else "*Next* on the card."
        return f"*Recovery* (layer 8) — `{d.recovery.action}`: {said}"
    return f"*Recovery* (layer 8) — `{d.recovery.action}`: {escape(summary, 2000)}"


def _with_queue_names(hint: str, d: Diagnosis) -> str:
    """An operator hint with the run's own LocalQueue and ClusterQueue, when the answer knows them."""
    queue = d.queue_position
    if queue is not None:
        hint = hint.replace("<local-queue-name>", queue.local_queue)
        if queue.cluster_queue:
            hint = hint.replace("<cluster-queue-name>", queue.cluster_queue)
    return hint


def _transient_text(transient: bool | None) -> str:
    if transient is None:
        return "—"
    return "yes — likely to clear by itself or on retry" if transient else "no — needs a fix"


def _fit_lines(lines: list[str], limit: int) -> str:
    """Join lines and, if too long, drop whole lines from the end with a visible marker."""
    text = "\n".join(lines)
    if slack_len(text) <= limit:
        return text
    marker = "\n…"
    kept: list[str] = []
    used = slack_len(marker)
    for line in lines:
        size = slack_len(line) + 1
        if used + size > limit:
            break
        kept.append(line)
        used += size
    return "\n".join(kept) + marker


def _line_of(p: PhaseResult, d: Diagnosis) -> str:
    mark = FIRST_INCOMPLETE_MARK if p.name == d.first_incomplete else ""
    layer = f" (layer {p.layer})" if p.name in CHECK_NAMES else ""
    return f"{STATE_EMOJI[p.state]} *{escape(p.name, 40)}*{layer} — {escape(p.summary, SUMMARY_BUDGET)}{mark}"


def phase_tree_text(d: Diagnosis) -> str:
    """The full tree for *Details*: one line per phase, then per layer 6–7 check, then the
    progress summary (a loss sparkline from five points on); the first incomplete one marked."""
    lines = [_line_of(p, d) for p in d.phases] + [_line_of(c, d) for c in d.checks]
    spark = sparkline(d.loss_points)
    if d.progress_summary:
        loss = f" · loss `{spark}`" if spark else ""
        lines.append(f"*Progress:* {escape(d.progress_summary, 300)}{loss}")
    if d.eta is not None:
        lines.append(f"*ETA:* {escape(eta_text(d.eta), 300)}")
    if d.queue_position is not None:
        lines.append(f"*Queue:* {escape(queue_position_text(d.queue_position), 700)}")
        if not d.queue_position.unavailable:
            head, more = start_lines(d.queue_position)
            lines.append(f"*Start:* {escape(head, 400)}")
            lines += [f"• {escape(line, 240)}" for line in more]
    for check in d.checks:  # the culprit's evidence and the driver's stack (SPEC §5c)
        if check.culprit is not None:
            lines.append(f"*Culprit:* {escape(check.culprit.summary, 300)}")
            lines += [f"• {escape(e, 300)}" for e in check.culprit.evidence[:4]]
        if check.driver_stack:
            lines.append("*Driver stack* (Ray dashboard, py-spy; top frames):")
            lines += [f"• `{escape(frame, 200)}`" for frame in check.driver_stack[:8]]
    return _fit_lines(lines, MAX_SECTION_TEXT)


def checks_text(d: Diagnosis) -> str:
    """The layer 6–7 checks alone, as the full tree shows them."""
    return _fit_lines([_line_of(c, d) for c in d.checks], MAX_SECTION_TEXT)


def gpu_profile_text(profile: GpuProfile) -> str:
    """The run profile's rows (SPEC §6 keys) as one section; values are cluster text, escaped."""
    lines = [f"*GPU run profile* ({'run finished' if profile.finished else 'live'}, dcgm-exporter)"]
    lines += [f"• `{key}`: {escape(value, 600)}" for key, value in profile_lines(profile)]
    return _fit_lines(lines, MAX_SECTION_TEXT)


def succeeded(d: Diagnosis, verdict: str | None = None) -> bool:
    """The run itself says it succeeded: ``verdict`` (the run's own terminal state, as the flow
    read it from the objects), a phase closed by that verdict (`run.succeeded`), or a RayJob whose
    status phase is done (`rayjob.ok`). Read from reason codes, never summaries."""
    if d.first_incomplete is not None:
        return False
    if verdict == "succeeded":
        return True
    results = [*d.phases, *d.checks]
    return any(p.reason == "run.succeeded" for p in results) or any(
        p.name == RAYJOB_STATUS.name and p.state is PhaseState.DONE and p.reason == "rayjob.ok"
        and d.run.kind == "RayJob" for p in results)


def _label(name: str) -> str:
    entry = BY_NAME.get(name)
    return entry.label if entry else name


def condensed_tree(d: Diagnosis, verdict: str | None = None) -> str:
    """SPEC §7's condensed tree: done (and skipped) phases on one line, the first incomplete one
    with its one-line summary, the phases waiting behind it on one line — names only, so no
    summary is said twice (a pod-level cause the first incomplete borrows is in its summary)."""
    results = [*d.phases, *d.checks] if d.unreachable_from is None else []
    done = [_label(p.name) for p in results if p.state is PhaseState.DONE]
    skipped = [_label(p.name) for p in results if p.state is PhaseState.SKIPPED]
    behind = [f"{STATE_EMOJI[p.state]} {_label(p.name)}" for p in results
              if not p.state.finished and p.name != d.first_incomplete]
    lines = []
    finished = "   ".join(part for part in (
        f"{STATE_EMOJI[PhaseState.DONE]} Done: {' · '.join(done)}" if done else "",
        f"{STATE_EMOJI[PhaseState.SKIPPED]} Skipped: {' · '.join(skipped)}" if skipped else "") if part)
    if finished:
        lines.append(finished)
    focus = next((p for p in [*d.phases, *d.checks] if p.name == d.first_incomplete), None)
    info = d.layer_info
    if focus is not None:
        lines.append(f"{STATE_EMOJI[focus.state]} *First incomplete: {escape(focus.name, 60)}* "
                     f"({focus.state.value}) — {escape(focus.summary, FOCUS_BUDGET)}")
    elif d.first_incomplete:
        lines.append(f"*First incomplete: {escape(d.first_incomplete, 60)}* · layer {d.layer}")
    elif succeeded(d, verdict):
        lines.append(f"{STATE_EMOJI[PhaseState.DONE]} *The run succeeded* — every phase is done.")
    else:
        lines.append(f"*Every phase is done or skipped* · next is layer {d.layer} — "
                     f"{escape(info.title, 200)}")
    if behind:
        lines.append("Waiting behind it: " + " · ".join(behind) if focus is not None
                     else "Not done: " + " · ".join(behind))
    spark = sparkline(d.loss_points)
    if d.progress_summary and d.unreachable_from is None:
        loss = f" · loss `{spark}`" if spark else ""
        lines.append(f"*Progress:* {escape(d.progress_summary, 200)}{loss}")
    if d.unreachable_from is None:
        lines += _runtime_lines(d)
    return "\n".join(lines)


def _runtime_lines(d: Diagnosis) -> list[str]:
    """One line each for the culprit rank (SPEC §5c; the focus line's summary may be clipped
    before it) and where a stalled RayJob's driver waits (its top frame; the frames are in
    *Details*)."""
    out = []
    for check in d.checks:
        if check.culprit is not None:
            out.append(f"*Culprit:* {escape(check.culprit.summary, 300)}")
        if check.driver_stack:
            out.append(f"*Driver waits in:* `{escape(check.driver_stack[0], 200)}`{MORE_IN_DETAILS}")
    return out


MORE_IN_DETAILS = " · more in *Details*"


START_MARK = "\n*Start:* "


def queue_line(d: Diagnosis) -> str:
    """The first screen's outlook: the queue position (what the ones ahead ask for, the free quota
    and why anything is missing are in *Details*) and, on a line of its own, the start estimate with
    its basis (SPEC §5b) — or a computed ETA (why there is none is in *Details* only). A run that can
    never fit says so with the numbers in its Next line, not here."""
    if d.eta is not None and d.eta.expected_end is not None:
        return f"*ETA:* {escape(eta_text(d.eta), 200)}"
    if (qp := d.queue_position) is None:
        return ""
    more = "" if qp.unavailable else MORE_IN_DETAILS
    line = f"*Queue:* {escape(queue_position_text(qp, short=True), 300)}{more}"
    start = "" if qp.unavailable or qp.never_fits else start_text(qp)
    return f"{line}{START_MARK}{escape(start, 300)}" if start else line


def _recovery_adds(d: Diagnosis) -> bool:
    """Whether the layer-8 verdict says more than owner, transient and next action already do:
    `wait` for a transient answer, `fix-then-resubmit` for a non-transient one and `none` are
    implied by them; `retry` and `resume-from-checkpoint` are not."""
    if d.recovery is None:
        return False
    implied = {("wait", True), ("fix-then-resubmit", False)}
    return d.recovery.action != "none" and (d.recovery.action, d.transient) not in implied


def handoff_text(d: Diagnosis, verdict: str | None = None) -> str:
    """Whose it is and what to do next; a succeeded run says what its evidence is instead."""
    if succeeded(d, verdict):
        what = {"RayJob": "the RayJob's status says it succeeded",
                "Job": "the Job's status says it completed"}.get(d.run.kind or "", "its status says so")
        proofs = [f"{_label(c.name)}: {escape(c.summary, 200)}" for c in d.checks
                  if c.layer == 7 and c.state is PhaseState.DONE]
        return "*Evidence:* " + "; ".join([what, *proofs]) + ". Nothing to do."
    lines = [f"*Owner:* {escape(d.owner, 60)} · *Transient:* {_transient_text(d.transient)}"]
    recovery = d.recovery
    if recovery is not None and _recovery_adds(d) and recovery.states_next_action:
        lines.append(f"*Next* (recovery `{recovery.action}`): {escape(recovery.summary, NEXT_BUDGET)}")
    else:
        lines.append(f"*Next:* {escape(d.next_action, NEXT_BUDGET)}")
        if recovery is not None and _recovery_adds(d):
            lines.append(f"*Recovery* `{recovery.action}`: {escape(recovery.summary, NEXT_BUDGET)}")
    return "\n".join(lines)


def unread_line(d: Diagnosis) -> str:
    """`⚠️ Could not read: pods (HTTP 500), events (permission denied)`: every failed read, one line."""
    if not d.read_gaps:
        return ""
    gaps = ", ".join(f"{plural} ({why})" for plural, why in d.read_gaps.items())
    return escape("⚠️ Could not read: " + gaps, UNREAD_BUDGET)


def build_phase_card(
    d: Diagnosis,
    *,
    workspace: str | None,
    operator_hints_allowed: bool,
    watch: bool = False,
    run_profile: bool = False,
    diagnosed_at: datetime | None = None,
    requests: int | None = None,
    profile: GpuProfile | None = None,
    escalate_button: CardButton | None = None,
    validate_button: CardButton | None = None,
    verdict: str | None = None,
) -> PhaseCardContext:
    """The card context for one diagnosis: the first screen and its *Details*.

    `operator_hints_allowed` is the result of the requester's access review
    (done by the caller, under the requester's identity): kubectl hints are
    shown only to people who could run them, and only in *Details*. ``verdict`` is the run's own
    terminal state ("succeeded"/"failed") as the caller read it from the run's objects.
    """
    run = d.run
    info = d.layer_info
    if run.kind:
        kind = run.kind
    elif d.unreachable_from is not None:
        kind = f"not read (layer {d.layer} failed)"
    elif d.first_incomplete == "Submitted" and d.phases and d.phases[0].reason != "run.not_found":
        kind = "not read"  # a 403 or an outage on the run's own kind: never "not found"
    else:
        kind = "not found"
    header = plain(f"{'✅' if succeeded(d, verdict) else '🔎'} {run.name} · {kind}", MAX_HEADER_TEXT)
    meta = " · ".join([
        f"workspace {code(workspace, NAME_BUDGET)}" if workspace else "no workspace",
        f"namespace {code(run.namespace, NAME_BUDGET)}" if run.namespace else "no namespace",
        f"layer {d.layer}: {escape(info.title, 120)}",
    ])

    focus_phase = next((p for p in [*d.phases, *d.checks] if p.name == d.first_incomplete), None)
    evidence_all = list(dict.fromkeys(d.evidence or (focus_phase.evidence if focus_phase else [])))
    evidence_lines = [code(line, EVIDENCE_LINE_BUDGET) for line in evidence_all[:FIRST_SCREEN_EVIDENCE]]

    unreachable = ""
    if d.unreachable_from is not None:
        unreachable = (
            f"Layers {d.unreachable_from}–8 were not checked: layer {d.layer} has to pass first. "
            "They are unreachable, not failing."
        )
    notes = []  # `watch`: the footer and Stop button come from workers/flows/watch/card.py (a WatchFooter)
    gpu = ""
    if profile is not None:
        gpu = gpu_profile_text(profile)
        headline = dict(profile_lines(profile)).get("gpu_utilization")
        notes.append("📈 GPU run profile in *Details*"
                     + (f" · `gpu_utilization`: {escape(headline, 160)}" if headline else ""))
    elif run_profile:
        notes.append("`--run-profile`: no GPU telemetry (the workspace did not resolve).")
    command = info.command if filled_in(info.command) else ""  # the guide's form, with `<class>`: no
    footer = [] if succeeded(d, verdict) or not command else [code(command, 200)]  # nothing to check
    if diagnosed_at is not None:
        footer.append(f"diagnosed {diagnosed_at.strftime('%Y-%m-%d %H:%M:%S UTC')}")
    if requests is not None:
        footer.append(f"{requests} Kubernetes API request{'s' if requests != 1 else ''} as you")
    if footer:
        notes.append(" · ".join(footer))

    hints = ""
    runnable = [h for h in (_with_queue_names(h, d) for h in info.operator_hints) if filled_in(h)]
    if operator_hints_allowed and runnable:
        hints = "*Operator commands* (you have cluster-wide Kueue read access)\n" + code_block(
            "\n".join(runnable), 2000
        )
    details = CardDetails(
        header=plain(f"📋 Details · {run.name}", MAX_HEADER_TEXT),
        phase_tree=phase_tree_text(d) if (d.phases or d.checks) and d.unreachable_from is None
        else (_line_of(focus_phase, d) if focus_phase else ""),
        evidence=("*Evidence*\n" + code_block("\n".join(evidence_all), EVIDENCE_BUDGET)
                  if evidence_all else ""),
        proves=_fit_lines([
            f"*What layer {d.layer} proves when done:* {escape(info.proves, 1200)}",
            f"*What it does not prove:* {escape(info.does_not_prove, 1200)}",
        ], MAX_SECTION_TEXT),
        recovery=_recovery_text(d),
        command=f"*TauGrid command*\n{code(command, 1000)}" if command else "",
        operator_hints=hints,
        gpu_profile=gpu,
        fallback=escape(f"Details of {run.name}: layer {d.layer}", 300),
    )

    where = "succeeded" if succeeded(d, verdict) else (d.first_incomplete or "all phases done")
    fallback = escape(f"{run.name}: {where} — layer {d.layer}, owner {d.owner}", MAX_FALLBACK_TEXT)
    return PhaseCardContext(
        header=header,
        meta=meta,
        unreachable=unreachable,
        unread=unread_line(d),
        tree=condensed_tree(d, verdict),
        queue_line=queue_line(d),
        evidence_lines=evidence_lines,
        evidence_total=len(evidence_all),
        handoff=handoff_text(d, verdict),
        notes=notes,
        details=details,
        escalation=EscalationSlot(button=escalate_button),
        validate_button=validate_button,
        fallback=fallback,
    )


def build_error_card(
    *,
    command: str,
    error: str,
    job_id: str | None,
    attempts: int | None = None,
) -> ErrorCardContext:
    """The card posted when a command's job failed for good (after its retries)."""
    tries = f" after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
    reference = f"job {code(job_id, 200)}" if job_id else "no job id"
    return ErrorCardContext(
        header=plain("⚠️ taubot could not finish this command", MAX_HEADER_TEXT),
        what=f"{code(command, 500)} failed{tries}.",
        error="*Error*\n" + code_block(error or "unknown error", 2000),
        next_action=(
            "*Next action*\nNothing was diagnosed, so nothing above is a verdict about your run. "
            "Try the command again; if it keeps failing, tell your TauGrid platform operator "
            "and quote the reference below."
        ),
        reference=reference,
        fallback=escape(f"taubot could not finish {command}: {error}", 500),
    )


def build_workspace_card(report: LayerReport, *, command: str, title: str | None = None,
                         name: str | None = None, layers: str | None = None,
                         quote: str = "") -> WorkspaceCardContext:
    """The answer to `/tau workspace connection|status`, `cluster validate …` and `validate`:
    the verdict, one line per check, the handoff, and the server's own words (``quote``)."""
    verdict = "✅ passed" if report.ok else "❌ failed"
    titles = {**LAYER_CHECKS, 6: "Cluster validation"}
    title = title or titles[report.layer]
    name = name or report.workspace or "?"
    header = plain(f"{title} · {name} · {layers or f'layer {report.layer}'} {verdict}", MAX_HEADER_TEXT)
    lines = [
        f"{CHECK_EMOJI.get(c.state, '•')} *{escape(c.name, 200)}* — {escape(c.detail, 300)}"
        for c in report.checks
    ]
    handoff = ""
    if not report.ok:
        handoff = _fit_lines(
            [
                f"*Owner:* {escape(report.owner or 'platform', 60)} · "
                f"*Transient:* {_transient_text(report.transient)}",
                f"*Next action:* {escape(report.next_action, 2000)}",
                *([f"*The API server said:* {code(quote, 1200)}"] if quote else []),
            ],
            MAX_SECTION_TEXT,
        )
    return WorkspaceCardContext(
        header=header,
        summary=escape(report.summary, MAX_SECTION_TEXT),
        checks=_fit_lines(lines, MAX_SECTION_TEXT),
        handoff=handoff,
        reference=f"{code(command, 300)}" + (f" · phase {escape(report.phase, 60)}" if report.phase else ""),
        fallback=escape(f"{title} {name}: {'passed' if report.ok else 'failed'} — {report.summary}", 500),
    )


def build_validation_card(report: Any, *, command: str) -> WorkspaceCardContext:
    """The answer to `/tau validate`: layers 1–4 for a manifest not yet submitted."""
    where = "offline checks" if report.offline else "layers 1–4"
    layers = where if report.ok else f"layer {report.layer}"
    return build_workspace_card(report, command=command, title="Manifest validation", name=report.manifest,
                                layers=layers, quote=report.server_message)


LOG_CARD_LINES = 20
LOG_BLOCK_BUDGET = 2800  # with its heading, within a section's 3000


def build_logs_card(logs: Any, *, command: str, file_attached: bool) -> LogsCardContext:
    """The answer to `/tau logs`: where the log came from and its last ~20 lines.

    The lines are cluster text: escaped and put in a code block whose fences
    they cannot close (`code_block` replaces backticks), cut from the front so
    the newest lines stay.
    """
    source = {"ray-dashboard": "Ray dashboard (driver log)", "pod": "pod log", "kusto": "Azure Data Explorer"}
    shown = logs.lines[-LOG_CARD_LINES:]
    times = [line.time for line in logs.lines if line.time]
    span = f"{times[0]} → {times[-1]}" if times else "—"
    fields = [
        f"*Run*\n{code(logs.run, NAME_BUDGET)}",
        f"*Source*\n{escape(source.get(logs.source or '', 'none answered'), 60)}",
        f"*Pod / container*\n{code(logs.pod, 200) if logs.pod else '—'} "
        f"{code(logs.container, 100) if logs.container else ''}".rstrip(),
        f"*Time range*\n{escape(span, 200)}",
    ]
    body = "\n".join(line.text for line in shown)
    lines = ""
    if logs.source is not None:
        older = " (older lines exist)" if logs.truncated else ""
        head = f"*Last {len(shown)} of {len(logs.lines)} lines*{older}"
        shown_body = code_block(body, LOG_BLOCK_BUDGET, tail=True) if body else "_the log is empty_"
        lines = f"{head}\n{shown_body}"
    unavailable = ""
    if logs.unavailable:
        tried = "Tried first" if logs.source else "No source answered"
        unavailable = f"*{tried}:*\n" + "\n".join(f"• {escape(u, 400)}" for u in logs.unavailable[:6])
    note = (f"The full tail ({len(logs.lines)} lines) is attached in this thread." if file_attached
            else f"{code(command, 300)}")
    where = logs.source or "no source"
    return LogsCardContext(
        header=plain(f"📜 {logs.run} · log", MAX_HEADER_TEXT),
        fields=fields,
        lines=lines,
        unavailable=truncate(unavailable, MAX_SECTION_TEXT),
        note=note,
        fallback=escape(f"log of {logs.run} from {where}: {len(logs.lines)} lines", 300),
    )


# ----------------------------------------------------------------- rendering


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """One environment per process; StrictUndefined so a renamed context field fails loudly."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        autoescape=False,  # JSON, not HTML: values are encoded by the `j` filter
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
    )
    env.filters["j"] = _json
    return env


def render_template(name: str, context: BaseModel, **extra: Any) -> list[dict[str, Any]]:
    """Render one card template to blocks and validate them."""
    text = _environment().get_template(name).render(c=context, **extra)
    try:
        blocks = json.loads(text)
    except ValueError as exc:
        raise CardError(f"{name} rendered invalid JSON: {exc}") from exc
    validate_blocks(blocks)
    return blocks


def card_texts(blocks: list[dict[str, Any]]) -> list[str]:
    """Every text a reader sees in a card (headers, sections, fields, context, button labels)."""
    return _texts(blocks)


def screen_size(blocks: list[dict[str, Any]]) -> tuple[int, int]:
    """(characters, lines) of a card's text, counted strictly: every text object on lines of its
    own (a context element or a button label counts as a line, though Slack puts them side by
    side). SPEC §7's first screen is at most `FIRST_SCREEN_CHARS` and `FIRST_SCREEN_LINES`."""
    texts = card_texts(blocks)
    return sum(len(t) for t in texts), sum(t.count("\n") + 1 for t in texts)


def _evidence_text(lines: list[str], shown: int, total: int) -> str:
    if not shown:
        return ""
    more = total - shown
    rest = f" (+{more} more in *Details*)" if more > 0 else ""
    return "*Evidence:* " + "\n".join(lines[:shown]) + rest


def render_phase_card(context: PhaseCardContext) -> RenderedCard:
    """The phase card, with as many of its first evidence lines as keep the first screen within
    SPEC §7's bounds (possibly none: every line is in *Details* anyway). An escalated note is laid
    out and validated as its plain stand-in, then swapped for the real block (its mention and date
    are our markup, which the validator's "no raw `<`" rule is there to keep out of everything
    else)."""
    lines = context.evidence_lines
    total = max(len(lines), context.evidence_total)
    blocks: list[dict[str, Any]] = []
    # The outlook with every evidence line, or not at all: the evidence comes first. A queue line
    # that does not fit whole is tried as its first fact alone (the position; the rest is in *Details*).
    # Except a start estimate (SPEC §5b, issue 35): the place and the start stay while the evidence
    # lines (Kueue's message, which the first incomplete line already sums up) give way to *Details*,
    # and then the first incomplete line's words past `PLACE_FOCUS`, then the start's caveat.
    outlooks = _outlooks(context.queue_line)
    place = outlooks[-1:]  # the position alone, always last
    at_place = [o for o in outlooks if place and o.startswith(f"{place[0]}{START_MARK}")]
    fewer = [(o, n, focus) for o in at_place for focus in (None, PLACE_FOCUS)
             for n in range(len(lines), -1, -1)]
    tries = [*((o, len(lines), None) for o in outlooks if START_MARK in o and o not in at_place), *fewer,
             *((o, len(lines), None) for o in outlooks if START_MARK not in o)]
    for outlook, shown, focus in tries:
        tree = f"{context.tree}\n{outlook}"
        if focus is not None:
            tree = _clip_lines(tree, FOCUS_KEPT, focus=focus, clause=True)
        blocks = render_template("phase_card.json.j2", context.replace(tree=tree),
                                 evidence=_evidence_text(lines, shown, total))
        if _fits(blocks):
            return RenderedCard(text=context.fallback, blocks=_with_escalated_note(blocks, context))
    for shown in range(len(lines), -1, -1):
        if shown == 0 and (placed := _placed(context)) is not None:
            return placed
        blocks = render_template("phase_card.json.j2", context, evidence=_evidence_text(lines, shown, total))
        if _fits(blocks):
            return RenderedCard(text=context.fallback, blocks=_with_escalated_note(blocks, context))
    # Still too long without evidence (long cluster text and every footer at once): shorten each
    # line of the card's own text, step by step; the whole of it is in *Details*.
    # The first incomplete line keeps up to FOCUS_KEPT (its key fact — `Xid 79` — often ends it)
    # while the other lines give way; only a card that cannot fit so cuts it like the rest.
    # So does the handoff (owner and Next: the command to run is the card's other key fact).
    for floor, next_floor in ((FOCUS_KEPT, NEXT_KEPT), (0, 0)):
        for limit in SHORTEN_STEPS:
            shorter = context.replace(
                meta=clip(context.meta, limit), unreachable=clip(context.unreachable, limit),
                unread=clip(context.unread, max(limit, UNREAD_KEPT)),
                tree=_clip_lines(context.tree, limit, focus=max(limit, floor)),
                handoff=_clip_lines(context.handoff, max(limit, next_floor)),
                notes=[clip(n, limit) for n in context.notes])
            blocks = render_template("phase_card.json.j2", shorter, evidence="")
            final = _with_escalated_note(blocks, context)  # measured as posted: the note is longer
            if _fits(blocks) and _fits(final):
                return RenderedCard(text=context.fallback, blocks=final)
    return RenderedCard(text=context.fallback, blocks=_with_escalated_note(blocks, context))


def _placed(context: PhaseCardContext) -> RenderedCard | None:
    """A card with no room for an evidence line keeps its queue line's first fact (the place in the
    queue) when the first incomplete line gives up the words past `PLACE_FOCUS`: a preempted run's card
    names what took its place and says where it stands again (issue 35); both in full in *Details*.
    None when there is no queue line, or it does not fit so."""
    place = _outlooks(context.queue_line)[-1:]
    for outlook in place:
        for focus in (FOCUS_KEPT, PLACE_FOCUS):
            tree = _clip_lines(f"{context.tree}\n{outlook}", FOCUS_KEPT, focus=focus, clause=True)
            blocks = render_template("phase_card.json.j2", context.replace(tree=tree), evidence="")
            if _fits(blocks):
                return RenderedCard(text=context.fallback, blocks=_with_escalated_note(blocks, context))
    return None


def _outlooks(line: str) -> list[str]:
    """The outlook as it fits, longest first: `*Queue:* A; B; C · more in *Details*` with its `*Start:*`
    line, then the position alone (`*Queue:* A · more in *Details*`) with the start, then with the start
    without its caveat (issue 35: the start is the card's; what the ones ahead ask for, the quota and
    the caveat are *Details*' too), then the position alone."""
    if not line:
        return []
    queue, mark, start = line.partition(START_MARK)
    head, sep, _rest = queue.partition("; ")
    place = f"{head}{MORE_IN_DETAILS}" if sep and queue.endswith(MORE_IN_DETAILS) else queue
    if not mark:
        return list(dict.fromkeys([queue, place]))
    bare = start.split(f" — {CAVEAT}")[0]
    return list(dict.fromkeys([f"{queue}{mark}{start}", f"{place}{mark}{start}", f"{place}{mark}{bare}",
                               place]))


def _fits(blocks: list[dict[str, Any]]) -> bool:
    chars, lines = screen_size(blocks)
    return chars <= FIRST_SCREEN_CHARS and lines <= FIRST_SCREEN_LINES


def _clip_lines(text: str, limit: int, *, focus: int | None = None, clause: bool = False) -> str:
    """Each line cut to ``limit``; the first incomplete phase's line to ``focus`` when given — with
    ``clause``, back to the end of its last whole clause (`, `, `; `, ` (`) when one ends in the last
    third: a fact cut in half says less than none."""
    def cut(line: str, size: int) -> str:
        short = clip(line, size)
        if not clause or short == line:
            return short
        head = short.removesuffix("…").rstrip()
        if head.endswith((",", ";")):  # the cut fell at a clause's end: keep the clause
            return f"{head[:-1]}…"
        end = max(short.rfind(mark, 0, len(short) - 1) for mark in (", ", "; ", " ("))
        whole = short[:end]
        return f"{whole}…" if end > size * 2 // 3 and not whole.count("`") % 2 else short

    return "\n".join(cut(line, focus) if focus is not None and FOCUS_MARK in line else clip(line, limit)
                     for line in text.split("\n"))


def _with_escalated_note(blocks: list[dict[str, Any]], context: SlottedCard) -> list[dict[str, Any]]:
    """The validated stand-ins swapped for our own markup: the escalated note, the charts' links."""
    swaps: dict[str, dict[str, Any]] = {}
    if context.escalation.note is not None:
        swaps[ESCALATED_BLOCK_ID] = context.escalation.note.block()
    if context.charts is not None and context.charts.links:
        swaps[CHARTS_BLOCK_ID] = context.charts.block()
    if not swaps:
        return blocks
    return [swaps.get(block.get("block_id") or "", block) for block in blocks]


def render_details(details: CardDetails) -> RenderedCard:
    """*Details* of a phase card, as its own message in the card's thread."""
    return RenderedCard(text=details.fallback, blocks=render_template("details_card.json.j2", details))


def render_group_card(context: GroupCardContext) -> RenderedCard:
    blocks = render_template("group_card.json.j2", context)
    return RenderedCard(text=context.fallback, blocks=_with_escalated_note(blocks, context))


def render_error_card(context: ErrorCardContext) -> RenderedCard:
    return RenderedCard(text=context.fallback, blocks=render_template("error_card.json.j2", context))


def render_logs_card(context: LogsCardContext) -> RenderedCard:
    return RenderedCard(text=context.fallback, blocks=render_template("logs_card.json.j2", context))


def render_workspace_card(context: WorkspaceCardContext) -> RenderedCard:
    return RenderedCard(
        text=context.fallback, blocks=render_template("workspace_card.json.j2", context)
    )


def _texts(node: Any) -> list[str]:
    """Every `text` string in a block tree (text objects nest as {"text": {"text": …}})."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "text" and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_texts(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_texts(item))
    return found


def validate_blocks(blocks: Any) -> None:
    """Raise `CardError` unless Slack would accept ``blocks`` and they carry no raw markup."""
    if not isinstance(blocks, list) or not blocks:
        raise CardError("a card must be a non-empty list of blocks")
    if len(blocks) > MAX_BLOCKS:
        raise CardError(f"{len(blocks)} blocks; Slack accepts at most {MAX_BLOCKS}")
    parsed = Block.parse_all(blocks)
    for i, (raw, block) in enumerate(zip(blocks, parsed, strict=True)):
        if block is None:
            raise CardError(f"block {i}: unknown block type {raw.get('type')!r}")
        try:
            block.validate_json()
        except SlackObjectFormationError as exc:
            raise CardError(f"block {i} ({raw.get('type')}): {exc}") from exc
        for field in raw.get("fields") or []:
            if slack_len(field.get("text", "")) > MAX_FIELD_TEXT:
                raise CardError(f"block {i}: a field exceeds {MAX_FIELD_TEXT} characters")
        if raw.get("type") == "context":
            elements = raw.get("elements") or []
            if len(elements) > MAX_CONTEXT_ELEMENTS:
                raise CardError(f"block {i}: more than {MAX_CONTEXT_ELEMENTS} context elements")
            for element in elements:
                if slack_len(element.get("text", "")) > MAX_CONTEXT_TEXT:
                    raise CardError(f"block {i}: a context element exceeds {MAX_CONTEXT_TEXT} characters")
        section_text = (raw.get("text") or {}).get("text", "") if raw.get("type") == "section" else ""
        if slack_len(section_text) > MAX_SECTION_TEXT:
            raise CardError(f"block {i}: section text exceeds {MAX_SECTION_TEXT} UTF-16 units")
    for text in _texts(blocks):
        if "<" in text:
            raise CardError(f"raw '<' in card text (unescaped markup): {text[:80]!r}")


__all__ = [
    "CardDetails",
    "CardError",
    "ErrorCardContext",
    "GroupCardContext",
    "LogsCardContext",
    "PhaseCardContext",
    "RenderedCard",
    "STATE_EMOJI",
    "WorkspaceCardContext",
    "build_error_card",
    "build_group_card",
    "build_logs_card",
    "build_phase_card",
    "build_workspace_card",
    "card_texts",
    "condensed_tree",
    "phase_tree_text",
    "render_error_card",
    "render_group_card",
    "render_details",
    "render_logs_card",
    "render_phase_card",
    "render_workspace_card",
    "screen_size",
    "succeeded",
    "validate_blocks",
]
