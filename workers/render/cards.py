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
from workers.diagnosis.models import Diagnosis, PhaseState
from workers.diagnosis.profile import GpuProfile
from workers.diagnosis.progress import sparkline
from workers.diagnosis.registry import LAYER_CHECKS
from workers.render.profile import profile_lines

from .buttons import ESCALATED_BLOCK_ID, CardButton, EscalatedNote
from .mrkdwn import code, code_block, escape, plain, slack_len, truncate


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


class PhaseCardContext(BaseModel):
    """What `phase_card.json.j2` shows; every string is mrkdwn-safe and within its limit."""

    model_config = ConfigDict(frozen=True)

    header: str
    fields: list[str]
    unreachable: str = ""
    phase_tree: str = ""
    checks: str = ""  # SPEC §5a: layer 6–7 checks, same icons as the tree
    focus: str
    evidence: str = ""
    proves: str
    owner: str
    transient: str
    next_action: str
    recovery: str = ""  # layer 8
    command: str
    operator_hints: str = ""
    gpu_profile: str = ""
    notes: list[str] = []
    escalate_button: CardButton | None = None  # issue 7: Escalate to <owner>
    validate_button: CardButton | None = None  # issue 14: a layer-6 answer's *Validate these nodes*
    escalated: EscalatedNote | None = None  # …and who escalated, once done (replaces the button)
    # the stall monitor's auto-post: its status line, the Mute button and who muted it
    monitor_status: str = ""
    mute_button: CardButton | None = None
    muted: str = ""
    # issue 5 (`--watch`): footer line, refresh time (left out of the card hash) and Stop button
    watch_status: str = ""
    watch_updated: str = ""
    stop_button: CardButton | None = None
    fallback: str


class ErrorCardContext(BaseModel):
    """What `error_card.json.j2` shows."""

    model_config = ConfigDict(frozen=True)

    header: str
    what: str
    error: str
    next_action: str
    reference: str
    fallback: str


class WorkspaceCardContext(BaseModel):
    """What `workspace_card.json.j2` shows."""

    model_config = ConfigDict(frozen=True)

    header: str
    summary: str
    checks: str = ""
    handoff: str = ""
    reference: str
    fallback: str


class GroupCardContext(BaseModel):
    """What `group_card.json.j2` shows: one post for runs stalled by one shared cause."""

    model_config = ConfigDict(frozen=True)

    header: str
    intro: str
    runs: str
    status: str = ""
    muted: str = ""
    escalate_button: CardButton | None = None
    mute_button: CardButton | None = None
    fallback: str


def build_group_card(label: str, members: list[tuple[str, str, str]], *, status: str = "",
                     escalate_button: CardButton | None = None, mute_button: CardButton | None = None,
                     muted: str = "") -> GroupCardContext:
    """``members``: (run, phase, since) of each run the cause holds."""
    lines = [f"• {code(run, NAME_BUDGET)} — *{escape(phase, 40)}* since {escape(since, 40)}"
             for run, phase, since in members]
    return GroupCardContext(
        header=plain(f"🚨 {len(members)} runs stalled: {label}", MAX_HEADER_TEXT),
        intro=f"taubot found {len(members)} runs stuck for one shared cause: *{escape(label, 300)}*.",
        runs=_fit_lines(lines, MAX_SECTION_TEXT) if lines else "_no run is stalled any more_",
        status=status, muted=muted, escalate_button=escalate_button, mute_button=mute_button,
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


def phase_tree_text(d: Diagnosis) -> str:
    """One line per phase: emoji, name, escaped summary; the first incomplete one marked."""
    lines = []
    for p in d.phases:
        mark = FIRST_INCOMPLETE_MARK if p.name == d.first_incomplete else ""
        summary = escape(p.summary, SUMMARY_BUDGET)
        lines.append(f"{STATE_EMOJI[p.state]} *{escape(p.name, 40)}* — {summary}{mark}")
    return _fit_lines(lines, MAX_SECTION_TEXT)


def checks_text(d: Diagnosis) -> str:
    """The layer 6–7 checks below the tree, then the progress summary (a loss sparkline from
    five points on)."""
    lines = []
    for c in d.checks:
        mark = FIRST_INCOMPLETE_MARK if c.name == d.first_incomplete else ""
        lines.append(f"{STATE_EMOJI[c.state]} *{escape(c.name, 40)}* (layer {c.layer}) — "
                     f"{escape(c.summary, SUMMARY_BUDGET)}{mark}")
    spark = sparkline(d.loss_points)
    if d.progress_summary:
        loss = f" · loss `{spark}`" if spark else ""
        lines.append(f"*Progress:* {escape(d.progress_summary, 300)}{loss}")
    return _fit_lines(lines, MAX_SECTION_TEXT)


def gpu_profile_text(profile: GpuProfile) -> str:
    """The run profile's rows (SPEC §6 keys) as one section; values are cluster text, escaped."""
    lines = [f"*GPU run profile* ({'run finished' if profile.finished else 'live'}, dcgm-exporter)"]
    lines += [f"• `{key}`: {escape(value, 600)}" for key, value in profile_lines(profile)]
    return _fit_lines(lines, MAX_SECTION_TEXT)


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
) -> PhaseCardContext:
    """The card context for one diagnosis.

    `operator_hints_allowed` is the result of the requester's access review
    (done by the caller, under the requester's identity): kubectl hints are
    shown only to people who could run them.
    """
    run = d.run
    info = d.layer_info
    run_name = code(run.name, NAME_BUDGET)
    if run.kind:
        kind = run.kind
    elif d.unreachable_from is not None:
        kind = f"not read (layer {d.layer} failed)"
    elif d.first_incomplete == "Submitted" and d.phases and d.phases[0].reason != "run.not_found":
        kind = "not read"  # a 403 or an outage on the run's own kind: never "not found"
    else:
        kind = "not found"
    fields = [
        f"*Run*\n{run_name}",
        f"*Kind*\n{escape(kind, 40)}",
        f"*Workspace*\n{code(workspace, NAME_BUDGET) if workspace else '—'}",
        f"*Namespace*\n{code(run.namespace, NAME_BUDGET) if run.namespace else '—'}",
    ]
    header = plain(f"🔎 {run.name} · {kind}", MAX_HEADER_TEXT)

    focus_phase = next((p for p in [*d.phases, *d.checks] if p.name == d.first_incomplete), None)
    if d.first_incomplete:
        state = f" {STATE_EMOJI[focus_phase.state]} {focus_phase.state.value}" if focus_phase else ""
        focus = (
            f"*First incomplete: {escape(d.first_incomplete, 60)}*{state} · "
            f"layer {d.layer} — {escape(info.title, 200)}"
        )
        if focus_phase is not None and focus_phase.summary:
            focus += "\n" + escape(focus_phase.summary, 1500)
    else:
        focus = (
            f"*Every phase is done or skipped* · next is layer {d.layer} — {escape(info.title, 200)}"
        )
    evidence_lines = list(d.evidence) or (list(focus_phase.evidence) if focus_phase else [])
    evidence = ""
    if evidence_lines:
        evidence = "*Evidence*\n" + code_block("\n".join(evidence_lines), EVIDENCE_BUDGET)

    unreachable = ""
    if d.unreachable_from is not None:
        unreachable = (
            f"Layers {d.unreachable_from}–8 were not checked: layer {d.layer} has to pass first. "
            "They are unreachable, not failing."
        )

    proves = _fit_lines(
        [
            f"*What layer {d.layer} proves when done:* {escape(info.proves, 1200)}",
            f"*What it does not prove:* {escape(info.does_not_prove, 1200)}",
        ],
        MAX_SECTION_TEXT,
    )
    hints = ""
    if operator_hints_allowed and info.operator_hints:
        hints = "*Operator commands* (you have cluster-wide Kueue read access)\n" + code_block(
            "\n".join(info.operator_hints), 2000
        )
    notes = []  # `watch`: the footer and Stop button come from workers/watch.py (watch_context)
    gpu = ""
    if profile is not None:
        gpu = gpu_profile_text(profile)
    elif run_profile:
        notes.append("`--run-profile`: no GPU telemetry (the workspace did not resolve).")
    footer = []
    if diagnosed_at is not None:
        footer.append(f"diagnosed {diagnosed_at.strftime('%Y-%m-%d %H:%M:%S UTC')}")
    if requests is not None:
        footer.append(f"{requests} Kubernetes API request{'s' if requests != 1 else ''} as you")
    if footer:
        notes.append(" · ".join(footer))

    where = d.first_incomplete or "all phases done"
    fallback = escape(f"{run.name}: {where} — layer {d.layer}, owner {d.owner}", MAX_FALLBACK_TEXT)
    return PhaseCardContext(
        header=header,
        fields=fields,
        unreachable=unreachable,
        phase_tree=phase_tree_text(d) if d.phases and d.unreachable_from is None else "",
        checks=checks_text(d) if d.unreachable_from is None else "",
        recovery=(f"*Recovery* (layer 8) — `{d.recovery.action}`: {escape(d.recovery.summary, 2000)}"
                  if d.recovery else ""),
        focus=focus,
        evidence=evidence,
        proves=proves,
        owner=f"*Owner*\n{escape(d.owner, 60)}",
        transient=f"*Transient*\n{_transient_text(d.transient)}",
        next_action=f"*Next action*\n{escape(d.next_action, 2500)}",
        command=f"*TauGrid command*\n{code(info.command, 1000)}",
        operator_hints=hints,
        gpu_profile=gpu,
        notes=notes,
        escalate_button=escalate_button,
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


def render_template(name: str, context: BaseModel) -> list[dict[str, Any]]:
    """Render one card template to blocks and validate them."""
    text = _environment().get_template(name).render(c=context)
    try:
        blocks = json.loads(text)
    except ValueError as exc:
        raise CardError(f"{name} rendered invalid JSON: {exc}") from exc
    validate_blocks(blocks)
    return blocks


def render_phase_card(context: PhaseCardContext) -> RenderedCard:
    """The phase card. An escalated note is laid out and validated as its plain stand-in, then
    swapped for the real block (its mention and date are our markup, which the validator's
    "no raw `<`" rule is there to keep out of everything else)."""
    blocks = render_template("phase_card.json.j2", context)
    if context.escalated is not None:
        note = context.escalated.block()
        blocks = [note if block.get("block_id") == ESCALATED_BLOCK_ID else block for block in blocks]
    return RenderedCard(text=context.fallback, blocks=blocks)


def render_error_card(context: ErrorCardContext) -> RenderedCard:
    return RenderedCard(text=context.fallback, blocks=render_template("error_card.json.j2", context))


def render_group_card(context: GroupCardContext) -> RenderedCard:
    return RenderedCard(text=context.fallback, blocks=render_template("group_card.json.j2", context))


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
    "phase_tree_text",
    "render_error_card",
    "render_group_card",
    "render_logs_card",
    "render_phase_card",
    "render_workspace_card",
    "validate_blocks",
]
