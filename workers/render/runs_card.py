"""The runs card (`/tau runs`) and the App Home view: one line per run, bounded.

Why five lines to a section, each section with an overflow menu of its runs: Block Kit allows
50 blocks in a message (100 in a Home tab), 3,000 characters a section and five options an
overflow menu. A block per run would spend the 50 blocks on 50 runs with no room for the header
and the notes; five runs to a section keep 50 lines in 10 sections and every run name one press
from its status (the menu's option is "Status of <run>": pressing it queues `/tau status <run>`
as the presser, `bot/runs_buttons.py`). Past `MAX_LINES` the card says "and N more".

Every string from the cluster (names, summaries, who submitted) is escaped here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from workers.contracts.ids import HOME_REFRESH_ACTION, OPEN_STATUS_ACTION
from workers.outside.text import outside

from .cards import MAX_HEADER_TEXT, MAX_SECTION_TEXT, RenderedCard, render_template
from .mrkdwn import clip, code, escape, plain


class RunLine(Protocol):
    """A line as `workers/flows/runs.py` makes it (named here, so rendering imports no flow)."""

    run: str
    kind: str
    first_incomplete: str | None
    state: str
    owner: str
    summary: str
    submitted_by: str | None
    created: datetime | None
    group: str


MAX_LINES = 50
LINES_PER_SECTION = 5  # an overflow menu holds at most five options
LINE_SUMMARY = 220
OPTION_TEXT = 75
STATE_MARK = {"warning": "⚠️", "pending": "⏳", "active": "🔄", "done": "✅", "skipped": "➖"}
GROUP_LABEL = {"stuck": "stuck", "failed": "failed", "waiting": "waiting", "running": "running",
               "finished": "finished"}


class RunsSection(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    action_id: str = OPEN_STATUS_ACTION
    options: list[tuple[str, str]] = Field(default_factory=list)  # (label, "run|workspace")


class RunsCardContext(BaseModel):
    """What `runs_card.json.j2` shows; every string mrkdwn-safe and within its limit."""

    model_config = ConfigDict(frozen=True)

    header: str
    meta: str
    notes: list[str] = Field(default_factory=list)
    sections: list[RunsSection] = Field(default_factory=list)
    more: str = ""
    extras: list[str] = Field(default_factory=list)  # the Home tab's watches and escalations
    home: bool = False
    refresh_action: str = HOME_REFRESH_ACTION
    refresh_value: str = ""
    fallback: str

    def replace(self, **changes: Any) -> RunsCardContext:
        return self.model_copy(update=changes)


def age(created: datetime | None, now: datetime) -> str:
    """`45m`, `3h`, `2d`: how long ago the run was created."""
    if created is None:
        return "?"
    seconds = max(0, int((now - created).total_seconds()))
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def line_text(line: RunLine, now: datetime) -> str:
    """`⚠️ *llama-ft-7b* Job · 2h · Kueue admission (warning): … · owner queue-owner · by alice`."""
    phase = line.first_incomplete or ("succeeded" if line.group == "finished" else "all phases done")
    mark = STATE_MARK.get(line.state, "•") if line.group != "failed" else "❌"
    by = f" · by {escape(outside(line.submitted_by), 80)}" if line.submitted_by else ""
    return (f"{mark} {code(outside(line.run), 70)} {line.kind} · {age(line.created, now)} · "
            f"*{escape(outside(phase), 40)}* ({line.state}): {escape(outside(line.summary), LINE_SUMMARY)}"
            f" · owner {escape(outside(line.owner), 40)}{by}")


def _sections(lines: list[RunLine], now: datetime, workspace: str | None) -> list[RunsSection]:
    out = []
    for i in range(0, len(lines), LINES_PER_SECTION):
        chunk = lines[i:i + LINES_PER_SECTION]
        text = "\n".join(line_text(line, now) for line in chunk)
        options = [(plain(outside(f"Status of {line.run}"), OPTION_TEXT), f"{line.run}|{workspace or ''}")
                   for line in chunk]
        out.append(RunsSection(text=clip(text, MAX_SECTION_TEXT), options=options))
    return out


def build_runs_card(listed: Any, *, command: str, now: datetime, home: bool = False,
                    extras: list[str] | None = None, max_lines: int = MAX_LINES) -> RunsCardContext:
    """The card of one `workers.flows.runs.RunsList`: layers 1–2 when they failed, the kinds that
    could not be read,
    at most ``max_lines`` runs (then "and N more"), and the hints for what was left out."""
    where = escape(outside(listed.workspace or "?"), 80)
    whose = "everyone's runs" if listed.everyone else "your runs"
    header = plain(outside(f"🗂 {whose.capitalize()} in {listed.workspace or '?'}"), MAX_HEADER_TEXT)
    meta = (f"{escape(outside(command), 200)} · workspace {where} · namespace "
            f"{code(outside(listed.namespace or '?'), 80)} · {listed.requests} requests · "
            f"layers 6–7 (nodes, logs) not read: {code(outside('/tau status <run>'), 40)} reads them")
    notes: list[str] = []
    if listed.layer_report is not None:
        report = listed.layer_report
        notes.append(f"❌ *Layer {report.layer}*: {escape(outside(report.summary), 800)}\n"
                     f"*Next:* {escape(outside(report.next_action or report.summary), 800)}")
        return RunsCardContext(header=header, meta=meta, notes=notes, home=home, extras=list(extras or []),
                               fallback=escape(outside(f"{whose}: layer {report.layer} failed"), 300))
    if listed.gaps:
        notes.append("Could not read: " + "; ".join(
            f"{escape(outside(kind), 40)}: {escape(outside(why), 200)}" for kind, why in listed.gaps.items()))
    shown = listed.lines[:max_lines]
    if not listed.lines:
        if listed.suggest_all:
            notes.append(f"No run here says who submitted it (the `taugrid.io/submitted-by` annotation), "
                         f"so taubot cannot tell yours: `/tau runs --all` lists all {listed.others}.")
        elif listed.others and not listed.everyone:
            notes.append(f"None of the runs here is yours: `/tau runs --all` lists everyone's "
                         f"({listed.others}).")
        else:
            notes.append("No runs to show.")
    elif listed.suggest_all:
        notes.append("No run says who submitted it: `/tau runs --all` lists everyone's.")
    more_parts = []
    if len(listed.lines) > len(shown):
        more_parts.append(f"and {len(listed.lines) - len(shown)} more")
    if listed.old_finished:
        more_parts.append(f"{listed.old_finished} finished more than 24 h ago not shown")
    if listed.others and listed.lines and not listed.everyone:
        more_parts.append(f"{listed.others} of others not shown (`--all`)")
    counts = {g: sum(1 for line in listed.lines if line.group == g) for g in GROUP_LABEL}
    summary = ", ".join(f"{n} {GROUP_LABEL[g]}" for g, n in counts.items() if n)
    fallback = escape(outside(f"{whose} in {listed.workspace or '?'}: {summary or 'none'}"), 300)
    return RunsCardContext(header=header, meta=meta, notes=notes,
                           sections=_sections(shown, now, listed.workspace),
                           more=" · ".join(more_parts), home=home, extras=list(extras or []),
                           refresh_value=listed.workspace or "", fallback=fallback)


def render_runs_card(context: RunsCardContext) -> RenderedCard:
    return RenderedCard(text=context.fallback, blocks=render_template("runs_card.json.j2", context))


def render_home(context: RunsCardContext) -> dict[str, Any]:
    """The Home tab's view (`views.publish`): the same blocks, in a `home` view."""
    return {"type": "home", "blocks": render_runs_card(context).blocks}


__all__ = ["MAX_LINES", "RunsCardContext", "RunsSection", "age", "build_runs_card", "line_text",
           "render_home", "render_runs_card"]
