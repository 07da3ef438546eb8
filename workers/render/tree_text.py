"""The phase tree for a terminal: one glance for the state, a few lines for the handoff."""

from __future__ import annotations

from workers.diagnosis.models import Diagnosis, PhaseState
from workers.render.forecast import eta_text, queue_position_text, start_lines

SYMBOLS: dict[PhaseState, str] = {
    PhaseState.DONE: "✔",
    PhaseState.ACTIVE: "◐",
    PhaseState.PENDING: "○",
    PhaseState.WARNING: "✖",
    PhaseState.SKIPPED: "–",
}


def _transient_text(transient: bool | None) -> str:
    if transient is None:
        return ""
    return " · transient: likely to clear on retry" if transient else " · not transient"


def render_text(d: Diagnosis) -> str:
    """Tree with a symbol per state, the first incomplete phase marked, then the handoff."""
    run = d.run
    where = f"{run.namespace}/{run.name}" if run.namespace else run.name
    lines = [f"{run.kind or 'Run'} {where}"]
    width = max(len(p.name) for p in [*d.phases, *d.checks])
    for p in d.phases:
        marker = "  ◀ first incomplete" if p.name == d.first_incomplete else ""
        lines.append(f"  {SYMBOLS[p.state]} {p.name.ljust(width)}  {p.state.value:<8} {p.summary}{marker}")
    for c in d.checks:
        marker = "  ◀ first incomplete" if c.name == d.first_incomplete else ""
        lines.append(f"  {SYMBOLS[c.state]} {c.name.ljust(width)}  {c.state.value:<8} {c.summary}{marker}")
    if d.progress_summary:
        lines.append(f"  progress: {d.progress_summary}")
    if d.eta is not None:
        lines.append(f"  eta: {eta_text(d.eta)}")
    if d.queue_position is not None:
        lines.append(f"  queue: {queue_position_text(d.queue_position)}")
        if not d.queue_position.unavailable:
            head, more = start_lines(d.queue_position)
            lines += [f"  start: {head}", *(f"    {line}" for line in more)]
    lines.append("")
    info = d.layer_info
    if d.first_incomplete:
        lines.append(f"First incomplete: {d.first_incomplete} — layer {d.layer}: {info.title}")
    else:
        lines.append(f"Every phase is done or skipped — next is layer {d.layer}: {info.title}")
    for ev in d.evidence[:8]:
        lines.append(f"  evidence: {ev}")
    if len(d.evidence) > 8:
        lines.append(f"  evidence: … and {len(d.evidence) - 8} more")
    lines.append(f"  proves when done: {info.proves}")
    lines.append(f"  does not prove:   {info.does_not_prove}")
    lines.append(f"  owner: {d.owner}{_transient_text(d.transient)}")
    lines.append(f"  next action: {d.next_action}")
    if d.recovery is not None:
        lines.append(f"  recovery: {d.recovery.action} — {d.recovery.summary}")
    lines.append(f"  command: {info.command}")
    for hint in info.operator_hints:
        lines.append(f"  operator-only: {hint}")
    return "\n".join(lines)
