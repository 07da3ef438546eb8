"""A watch's tick: the probe or a full read (as `workers/collect/plan.py` decides), the card edited
only when it changed, one thread reply per phase transition, the next tick scheduled."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from workers.collect.plan import TickPlan, tick_plan
from workers.collect.probe import unchanged
from workers.config.workspaces import Resolved
from workers.diagnosis.models import Diagnosis
from workers.plumbing.metrics import TICK_LAG, WATCH_TICKS
from workers.render.mrkdwn import code, escape
from workers.render.slots import WatchFooter
from workers.services import Services
from workers.surfaces.base import Failed

from ..status import diagnose_for_card
from .card import (
    average_utilization,
    ended_verdict,
    escalation_for,
    record_phases,
    stopped_footer,
    transition_text,
    transitions,
    watch_context,
)
from .schedule import advance, advance_unlocked, reserve_horizon, retry_tick
from .state import (
    CARD_GONE,
    CARD_UNKNOWN,
    LOCK_TIMEOUT_SECONDS,
    WatchState,
    load_pending,
    load_state,
    lock_name,
    owner_key,
    pending_key,
    save_pending,
    save_state,
    state_key,
    tick_job_id,
)

log = logging.getLogger(__name__)

HISTORY_POINTS = 20
FINAL_MAX_WAIT_SECONDS = 15.0


def plan_of(services: Services, state: WatchState, now: datetime) -> TickPlan:
    """This tick's reads, decided by the read plan from what the watch remembers."""
    return tick_plan(services.settings, state.request.command, state.reads, tick=state.tick, now=now,
                     deadline=state.deadline)


def probe_says_unchanged(services: Services, state: WatchState, now: datetime) -> bool:
    """Whether this tick may keep the card: the plan allows the probe, and the probe, made as the
    requester, finds every version as the last full read saw it."""
    probe = plan_of(services, state, now).probe
    if probe is None:
        return False
    command = state.request.command
    resolution = services.registry.resolve(workspace=state.workspace or command.workspace,
                                           channel=state.request.channel)
    if not isinstance(resolution, Resolved):
        return False
    return services.run(unchanged(services.kube, resolution.descriptor.cluster_target(),
                                  state.request.identity, probe,
                                  timeout=services.settings.kube_request_timeout_seconds))


def run_tick(services: Services, wid: str, tick: int, *, now: datetime) -> dict[str, Any]:
    """Re-collect, re-render, edit the card only if it changed, reply once per transition.

    A tick whose probe finds the run unchanged neither takes the lock nor touches the card: it
    commits its next tick only if the state is as it read it (`advance_unlocked`). Anything else
    (a full read, a paced re-run, a commit refused because a Stop or a join came between) runs
    under the watch's lock. A stale tick is told apart without it: tick numbers only grow, and a
    stopped or expired watch stays so."""
    conn = services.redis
    read = conn.get(state_key(wid))
    state = WatchState.model_validate_json(read) if read is not None else None
    if state is None or state.stopped is not None or state.tick != tick:
        return {"watch": wid, "tick": tick, "skipped": "stale"}
    if state.next_due is not None and not state.deferrals:
        TICK_LAG.observe(max(0.0, (now - state.next_due).total_seconds()))
    if not state.deferrals and probe_says_unchanged(services, state, now):
        state.tick += 1
        if advance_unlocked(services, state, read, now):  # type: ignore[arg-type]
            WATCH_TICKS.labels("probe").inc()
            return {"watch": wid, "tick": tick, "card": "unchanged", "read": "probe"}
    with conn.lock(lock_name(wid), timeout=LOCK_TIMEOUT_SECONDS, blocking_timeout=LOCK_TIMEOUT_SECONDS):
        state = load_state(conn, wid)
        if state is None or state.stopped is not None or state.tick != tick:
            return {"watch": wid, "tick": tick, "skipped": "stale"}
        pending = load_pending(conn, wid) if state.deferrals else None
        if pending is not None:  # a paced re-run: send what this tick computed, do not collect again
            context, diagnosis, reason = pending
        else:
            WATCH_TICKS.labels("full").inc()
            plan = plan_of(services, state, now)
            reads = services.run(diagnose_for_card(services, state.request, now, plan.full,
                                                   workspace=state.workspace or None))
            live, operator_ok = reads.live, reads.operator_hints
            state.reads.after_full_read(state.tick, live, run_profile=state.request.command.run_profile)
            if state.request.command.run_profile:
                state.utilization = [*state.utilization, average_utilization(live.profile)][-HISTORY_POINTS:]
            verdict = ended_verdict(live)
            reason = None
            if verdict is not None:
                reason = f"the run finished ({verdict})"
            elif now >= state.deadline:
                reason = f"the {services.settings.watch_max_minutes}-minute limit was reached"
            state.run_kind = live.diagnosis.run.kind or state.run_kind
            state.namespace = live.namespace or state.namespace
            button, escalated = escalation_for(services, state, live, now)
            context = watch_context(live, operator_ok, state, now=now, reason=reason, escalate_button=button,
                                    escalated=escalated, verdict=verdict)
            diagnosis = live.diagnosis
        # Never sleep in a tick: a paced update returns at once. When the pace has a slot before
        # the next tick would be due (for a run that finished, within a minute), the slot is
        # reserved for this card and the same tick runs again then, sending what it computed
        # without asking again. Otherwise the update waits for the next tick, which keeps its
        # time: a worker is never held while another card's budget refills.
        rerun = state.reserved and pending is not None
        edit = services.cards.update_if_changed(
            state.request.channel, state.card_ts, lambda _stored: context, max_wait=0,
            reserve_within=reserve_horizon(state, now, final=reason is not None), reserved=rerun)
        outcome = edit.outcome
        state.reserved = False
        if outcome == "deferred" and not rerun and edit.slot_reserved:
            state.deferrals += 1
            state.reserved = True
            wait = edit.retry_after or 0.0
            save_pending(conn, wid, context, diagnosis, reason, ttl=state.interval * 2 + int(wait))
            retry_tick(services, state, wait, now)
            return {"watch": wid, "tick": tick, "card": outcome, "retry_in": wait, "reserved": True}
        if state.deferrals:
            conn.delete(pending_key(wid))
        state.deferrals = 0
        if outcome == "updated":
            state.updates += 1
        if not edit.shown:
            state.reads.forget_probe()  # what it found is not on the card yet: the next tick reads again
        card_gone = outcome in ("gone", "missing")
        if card_gone:
            reason = CARD_GONE if outcome == "gone" else CARD_UNKNOWN
        elif not _reply_transitions(services, state, diagnosis, now):
            state.reads.forget_probe()  # a reply the pace deferred is sent by the next full read
        if reason is not None:
            end(services, state, reason, now, card_updated=outcome in ("updated", "gone", "missing"),
                card_gone=card_gone)
        else:
            state.tick += 1
            advance(services, state, now)
        return {"watch": wid, "tick": tick, "card": outcome, "stopped": reason}


def _reply_transitions(services: Services, state: WatchState, diagnosis: Diagnosis, now: datetime) -> bool:
    """One short thread reply per tick (SPEC §7: one per tick at most, however many phases moved):
    a line per phase transition, in the tree's order. A reply the pace defers leaves the old states
    recorded, so the next tick replies instead. False when it was deferred."""
    moved = transitions(state, diagnosis)
    if moved:
        text = "\n".join(transition_text(state, name, old, new, now) for name, old, new in moved)
        sent = services.surface.post(state.request.channel, text, thread_ts=state.parent_ts, paced=0)
        if isinstance(sent, Failed):
            return False
    record_phases(state, diagnosis, now)
    return True


def end(services: Services, state: WatchState, reason: str, now: datetime, *, card_updated: bool,
        cancel_pending: bool = False, card_gone: bool = False) -> None:
    """Mark the watch stopped, free its slot, and make the card say why — unless the card is
    gone (``card_gone``), in which case the thread is told. ``cancel_pending`` drops the scheduled
    tick (a Stop between ticks); a tick ending its own watch simply schedules none."""
    conn = services.redis
    state.stopped = reason
    save_state(conn, state, now)
    conn.delete(owner_key(state.id))
    log.info("watch %s stopped: %s", state.id, reason)
    if cancel_pending:
        services.queue.cancel(tick_job_id(state.id, state.tick))
    if card_gone:
        services.surface.post(state.request.channel,
                              f"⏹️ Stopped watching {code(state.request.command.run, 80)}: {reason}.",
                              thread_ts=state.parent_ts)
        return
    if card_updated:
        return
    footer = WatchFooter(status=stopped_footer(reason, now))
    edit = services.cards.update_if_changed(
        state.request.channel, state.card_ts, lambda stored: stored.with_slot(footer),
        max_wait=FINAL_MAX_WAIT_SECONDS)
    if not edit.shown:
        log.info("watch %s: final card not updated (%s)", state.id, edit.outcome)


def end_after_failure(services: Services, wid: str, tick: int, error: str, now: datetime) -> None:
    """The last attempt of a tick failed: end the watch with the reason on the card, rather than
    leave a card that claims to be watching."""
    with services.redis.lock(lock_name(wid), timeout=LOCK_TIMEOUT_SECONDS,
                             blocking_timeout=LOCK_TIMEOUT_SECONDS):
        state = load_state(services.redis, wid)
        if state is None or state.stopped is not None or state.tick != tick:
            return
        end(services, state, f"taubot could not refresh it ({escape(error, 80)})", now, card_updated=False)


def on_tick_failure_callback(services: Services, job_args: tuple[Any, ...],
                             exc_type: type[BaseException] | None, now: datetime) -> None:
    wid, tick = job_args
    end_after_failure(services, wid, tick, exc_type.__name__ if exc_type is not None else "error", now)
