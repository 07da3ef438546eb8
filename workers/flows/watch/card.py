"""A watch's card: the status card plus the watch footer, its Escalate offer, and the thread's
one line per phase transition."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from workers.contracts.ids import STOP_WATCHING_ACTION
from workers.diagnosis.models import Diagnosis
from workers.diagnosis.profile import GpuProfile
from workers.records.offers import (
    claim_of,
    escalated_note,
    escalation_of,
    load_record,
    offer_escalation,
    wants_handoff,
)
from workers.render.buttons import CardButton, EscalatedNote
from workers.render.cards import PhaseCardContext, build_phase_card
from workers.render.mrkdwn import escape
from workers.render.profile import utilization_sparkline
from workers.render.slots import EscalationSlot, WatchFooter
from workers.services import Services

from .state import WatchEscalation, WatchState

if TYPE_CHECKING:
    from workers.collect.report import RunReport


def _clock(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S UTC")


def duration_text(seconds: float) -> str:
    """12m, 45s, 1h 5m: transitions are read at a glance."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h {seconds % 3600 // 60}m"


def active_footer(state: WatchState) -> str:
    return (f"👀 *Watching* every {state.interval} s until {state.deadline.strftime('%H:%M UTC')}; "
            "the thread gets one line per phase change.")


def stopped_footer(reason: str, at: datetime) -> str:
    return f"⏹️ *Watching stopped* at {_clock(at)}: {reason}."


def stop_button(wid: str) -> CardButton:
    """Its value is only the watch id: who may stop is decided in the worker (requester or the
    run's access review), so a forged value can do no more than a press on the real card."""
    return CardButton(action_id=STOP_WATCHING_ACTION, text="⏹️ Stop watching", value=wid)


def watch_context(live: Any, operator_ok: bool, state: WatchState, *, now: datetime, reason: str | None,
                  escalate_button: CardButton | None = None, escalated: EscalatedNote | None = None,
                  verdict: str | None = None) -> PhaseCardContext:
    """The phase card of one tick: the status card plus the watch footer (with the time of the
    last refresh, never a promise of the next), the Stop button while the watch runs, and
    (with `--run-profile`) the utilization history of the past refreshes."""
    context = build_phase_card(
        live.diagnosis, workspace=live.workspace, operator_hints_allowed=operator_ok, watch=True,
        run_profile=state.request.command.run_profile,
        diagnosed_at=None,  # the refresh time is `watch_updated`, outside the hash
        requests=None,  # as is the refresh's request count: a tick that reused its queue read makes fewer
        profile=live.profile, escalate_button=escalate_button, verdict=verdict,
    )
    context = context.with_slot(EscalationSlot(button=None if escalated else escalate_button, note=escalated))
    context = context.with_slot(WatchFooter(
        status=stopped_footer(reason, now) if reason else active_footer(state),
        updated=f"last refreshed {_clock(now)} · {live.requests} Kubernetes API request"
                f"{'s' if live.requests != 1 else ''} as you",
        stop_button=None if reason else stop_button(state.id)))
    if state.request.command.run_profile and state.utilization and context.details is not None:
        spark = utilization_sparkline(state.utilization)
        line = f"*Utilization, last {len(state.utilization)} refreshes* (avg over GPUs): `{spark}`"
        profile = context.details.gpu_profile
        details = context.details.model_copy(
            update={"gpu_profile": f"{profile}\n{line}" if profile else line})
        context = context.model_copy(update={"details": details, "notes": [
            *context.notes, f"📈 GPU utilization, last {len(state.utilization)} refreshes: `{spark}`"]})
    return context


def escalation_for(services: Services, state: WatchState, live: RunReport,
                   now: datetime) -> tuple[CardButton | None, EscalatedNote | None]:
    """The Escalate button for the run's current (layer, owner), or the note of its escalation.

    A diagnosis is stored (`offer_escalation`) only when the pair changed, or
    when no usable offer is kept: the same pair keeps the same button, so an
    unchanged run keeps the same card hash. Updates ``state.escalation``.
    """
    d = live.diagnosis
    if not wants_handoff(d):
        return None, None
    conn = services.redis
    kept = state.escalation
    same = kept is not None and (kept.layer, kept.owner) == (d.layer, d.owner)
    record = load_record(conn, kept.record_id) if kept is not None and same else None
    if kept is not None and record is not None:
        claim = claim_of(conn, record)
    else:
        offer = offer_escalation(services, live, channel=state.request.channel,
                                 thread_ts=state.parent_ts or None, requested_by=state.request.user,
                                 now=now)
        if offer is None:
            state.escalation = None
            return None, None
        if state.card_ts:
            offer.attach(state.card_ts)
        kept = state.escalation = WatchEscalation(layer=d.layer, owner=d.owner, record_id=offer.record_id,
                                                  button=offer.button)
        claim = escalation_of(conn, offer.record_id)  # back to a pair escalated earlier in this watch
    note = escalated_note(claim) if claim is not None else None
    return (None, note) if note is not None else (kept.button, None)


def average_utilization(profile: GpuProfile | None) -> float | None:
    """One point of the sparkline: the observed average, or a gap (never a false zero)."""
    if profile is None or profile.gpu_utilization.status != "observed":
        return None
    return float(profile.gpu_utilization.avg)  # type: ignore[union-attr]


def ended_verdict(live: Any) -> str | None:
    """"succeeded"/"failed" when the run says it ended (Job conditions, RayJob status); None while
    the workspace could not be reached or no run object was read."""
    if live.layer_report is not None or not live.objects:
        return None
    return live.terminal


def transitions(state: WatchState, diagnosis: Diagnosis) -> list[tuple[str, str, str]]:
    """(phase, old state, new state) for each phase whose state moved since the last tick."""
    moved = []
    for phase in diagnosis.phases:
        old = state.phases.get(phase.name)
        if old is not None and old != phase.state.value:
            moved.append((phase.name, old, phase.state.value))
    return moved


def transition_text(state: WatchState, name: str, old: str, new: str, now: datetime) -> str:
    """ "Kueue admission: pending → done after 12m"; "at least" when the old state was already
    there when the watch began (its true start is unknown)."""
    since = state.since.get(name, state.started_at)
    took = duration_text((now - since).total_seconds())
    qualifier = "" if name in state.observed_change else "at least "
    return f"*{escape(name, 60)}*: {old} → {new} after {qualifier}{took}"


def record_phases(state: WatchState, diagnosis: Diagnosis, now: datetime) -> None:
    for phase in diagnosis.phases:
        old = state.phases.get(phase.name)
        if old != phase.state.value:
            if old is not None and phase.name not in state.observed_change:
                state.observed_change.append(phase.name)
            state.phases[phase.name] = phase.state.value
            state.since[phase.name] = now
