"""`/tau status <run> --watch`: the phase card edited in place until the run settles (SPEC §7).

Shape. The status job posts the parent and the card as usual, then saves a
`WatchState` in Redis and schedules the first tick with rq's scheduler
(`enqueue_in`). Each tick is an ordinary rq job that re-collects under the
requester's identity (the same bounded requests as a status), re-renders,
and schedules the next tick. Nothing lives in a worker's memory between
ticks, so a worker that dies between ticks loses nothing: the next tick
waits in rq's ScheduledJobRegistry and any worker started `--with-scheduler`
runs it. A worker that dies *during* a tick leaves a started job that rq's
abandoned-job cleanup retries (ticks carry a `Retry`).

Why a tick number in the job: each tick carries the number it expects the
state to be at. A tick that finds another number (a retried tick whose
successor already ran, a tick of a watch that was stopped and started again)
does nothing, so a watch never forks into two chains of ticks.

Why a per-watch lock: a Stop press and a tick can run at the same time on two
workers; both read-modify-write the state and edit the same card, so they
take turns (a Redis lock with a timeout, so a dead holder cannot wedge it).

Why hash the card context rather than the blocks: an unchanged card must
never be re-sent (tier 3 is ~50 `chat.update` a minute per workspace, shared
by every watch), but the card shows when it was last refreshed. The hash
covers everything a reader sees except that time, and rendering happens only
when the hash moved.

One watch per (channel, run): an owner key taken with SET NX; a second
`--watch` of the same run in the same channel joins the running watch (its
requester may then stop it too) and says so in that watch's thread.

Escalate (issue 7) on a watched card: the state keeps the offer for the
run's current (layer, owner) — the stored diagnosis and its signed button —
and a new one is stored only when that pair changes, because the button's
value is part of the card hash: a fresh offer per tick would re-send an
unchanged card. Each tick asks whether the current pair was escalated and
then shows who did it, and when, instead of the button. The escalation job
edits a watched card through `show_escalation`, from the watch's own last
render and under the watch's lock, so the card hash stays true and the next
tick neither re-sends the card nor loses the note.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis
from pydantic import BaseModel, Field
from redis.client import Pipeline
from rq import Callback, Queue, Retry
from rq.exceptions import NoSuchJobError
from rq.job import Job
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from workers.diagnosis.models import Diagnosis
from workers.diagnosis.profile import GpuProfile, utilization_sparkline
from workers.escalation import (
    Offer,
    StoredDiagnosis,
    claim_of,
    escalated_note,
    escalation_of,
    load_record,
    offer_escalation,
    wants_handoff,
)
from workers.jobs import (
    Services,
    StatusOutcome,
    StatusRequest,
    deliver,
    diagnose_for_card,
    ensure_parent,
)
from workers.kube.client import Identity
from workers.render.buttons import CardButton, EscalatedNote
from workers.render.cards import PhaseCardContext, build_phase_card, render_phase_card
from workers.render.mrkdwn import code, escape
from workers.settings import load_settings
from workers.slack_pacing import Rate, SlackPacer, workspace_scope

if TYPE_CHECKING:
    from workers.diagnosis.live import LiveResult

log = logging.getLogger(__name__)

KEY_PREFIX = "taubot:watch:"
STOP_WATCHING_ACTION = "stop_watching"
STATE_TTL_AFTER_END = 24 * 3600  # a late Stop press still learns the watch already ended
LOCK_TIMEOUT_SECONDS = 180  # longer than a tick can take (job timeout), shorter than a stuck watch
TICK_RETRIES = 2
HISTORY_POINTS = 20
UPDATE_MAX_WAIT_SECONDS = 5.0
FINAL_MAX_WAIT_SECONDS = 15.0
TRANSITION_MAX_WAIT_SECONDS = 3.0
ESCALATION_LOCK_WAIT_SECONDS = 10.0  # a tick holds the lock for seconds; past this the next tick shows it
GONE = frozenset({"message_not_found", "channel_not_found", "is_archived", "thread_not_found"})


# ------------------------------------------------------------------ state


class WatchEscalation(BaseModel):
    """The Escalate offer for the watched run's current (layer, owner), reused while they hold."""

    layer: int
    owner: str
    record_id: str
    button: CardButton


class WatchState(BaseModel):
    """Everything a tick needs, in Redis: the watch must survive any worker."""

    id: str
    request: StatusRequest
    watchers: list[str] = Field(description="Slack users who asked for this watch; each may stop it")
    interval: int
    started_at: datetime
    deadline: datetime
    parent_ts: str
    card_ts: str
    card_hash: str
    tick: int = 0
    phases: dict[str, str] = Field(default_factory=dict, description="phase name → state seen last")
    since: dict[str, datetime] = Field(default_factory=dict, description="when that state was first seen")
    observed_change: list[str] = Field(
        default_factory=list, description="phases whose `since` is a transition the watch saw"
    )
    utilization: list[float | None] = Field(default_factory=list)
    run_kind: str | None = None
    namespace: str | None = None
    context: dict[str, Any] = Field(description="The last card's context, for the final card")
    updates: int = 0
    stopped: str | None = None
    escalation: WatchEscalation | None = None


def watch_id(channel: str, run: str) -> str:
    """One watch per (channel, run); an rq-safe id (`[A-Za-z0-9_-]`)."""
    return "watch-" + hashlib.sha256(f"{channel}\0{run}".encode()).hexdigest()[:24]


def state_key(wid: str) -> str:
    return f"{KEY_PREFIX}{wid}"


def owner_key(wid: str) -> str:
    return f"{KEY_PREFIX}{wid}:owner"


def lock_name(wid: str) -> str:
    return f"{KEY_PREFIX}{wid}:lock"


def tick_job_id(wid: str, tick: int) -> str:
    return f"{wid}-t{tick}"


def load_state(conn: redis.Redis, wid: str) -> WatchState | None:
    raw = conn.get(state_key(wid))
    return WatchState.model_validate_json(raw) if raw else None


def save_state(conn: redis.Redis | Pipeline, state: WatchState, now: datetime) -> None:
    """Kept until a day after the deadline: long enough for any tick or late button press."""
    ttl = max(60, int((state.deadline - now).total_seconds()) + STATE_TTL_AFTER_END)
    conn.set(state_key(state.id), state.model_dump_json(), ex=ttl)


# ---------------------------------------------------------------- the card


def card_hash(context: PhaseCardContext) -> str:
    """What a reader sees, minus the refresh time: equal hashes mean "do not re-send"."""
    data = context.model_dump_json(exclude={"watch_updated"})
    return hashlib.sha256(data.encode()).hexdigest()


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
    return (
        f"👀 *Watching* — refreshed every {state.interval} s until "
        f"{state.deadline.strftime('%H:%M UTC')}; the thread gets one line per phase change."
    )


def stopped_footer(reason: str, at: datetime) -> str:
    return f"⏹️ *Watching stopped* at {_clock(at)}: {reason}."


def stop_button(wid: str) -> CardButton:
    """Its value is only the watch id: who may stop is decided in the worker (requester or the
    run's access review), so a forged value can do no more than a press on the real card."""
    return CardButton(action_id=STOP_WATCHING_ACTION, text="⏹️ Stop watching", value=wid)


def watch_context(
    live: Any, operator_ok: bool, state: WatchState, *, now: datetime, reason: str | None,
    escalate_button: CardButton | None = None, escalated: EscalatedNote | None = None,
) -> PhaseCardContext:
    """The phase card of one tick: the status card plus the watch footer, the Stop button while
    the watch runs, and (with `--run-profile`) the utilization history of the past refreshes;
    the Escalate button or, once pressed, the escalated note (`escalation_for`)."""
    context = build_phase_card(
        live.diagnosis,
        workspace=live.workspace,
        operator_hints_allowed=operator_ok,
        watch=True,
        run_profile=state.request.command.run_profile,
        diagnosed_at=None,  # the refresh time is `watch_updated`, outside the hash
        requests=live.requests,
        profile=live.profile,
        escalate_button=escalate_button,
    )
    update: dict[str, Any] = {
        "escalated": escalated,
        "watch_status": stopped_footer(reason, now) if reason else active_footer(state),
        "watch_updated": f"updated {_clock(now)}",
        "stop_button": None if reason else stop_button(state.id),
    }
    if state.request.command.run_profile and state.utilization:
        spark = utilization_sparkline(state.utilization)
        line = f"*Utilization, last {len(state.utilization)} refreshes* (avg over GPUs): `{spark}`"
        update["gpu_profile"] = f"{context.gpu_profile}\n{line}" if context.gpu_profile else line
    return context.model_copy(update=update)


def escalation_for(services: Services, state: WatchState, live: LiveResult,
                   now: datetime) -> tuple[CardButton | None, EscalatedNote | None]:
    """The Escalate button for the run's current (layer, owner), or the note of its escalation.

    A diagnosis is stored (`offer_escalation`) only when the pair changed, or
    when no usable offer is kept (none could be made, or its record expired):
    the same pair keeps the same button, so an unchanged run keeps the same
    card hash. Updates ``state.escalation``; the caller saves the state.
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


def run_verdict(live: Any, run: str) -> str | None:
    """"succeeded"/"failed" when the run says it ended (Job conditions, RayJob status)."""
    from workers.diagnosis.linkage import find_run
    from workers.diagnosis.phases.common import RunContext

    if live.layer_report is not None or not live.objects:
        return None
    objs = find_run(live.objects, run, live.namespace)
    if not objs.found:
        return None
    return RunContext(objs=objs, now=datetime.now(UTC)).terminal()


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


# ------------------------------------------------------------------ clients


def make_pacer(services: Services) -> SlackPacer:
    settings = services.settings
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    per_minute = settings.slack_updates_per_minute
    return SlackPacer(services.redis, workspace_scope(token),
                      update_rate=Rate(per_minute / 60.0, burst=max(1, min(5, per_minute // 10))))


def schedule_tick(services: Services, state: WatchState, *, delay: float | None = None,
                  pipeline: Pipeline | None = None) -> Job:
    """The next tick, in rq's ScheduledJobRegistry: any worker with a scheduler runs it."""
    queue = Queue(services.settings.queue_name, connection=services.redis)
    return queue.enqueue_in(
        timedelta(seconds=state.interval if delay is None else delay),
        watch_tick,
        state.id,
        state.tick,
        job_id=tick_job_id(state.id, state.tick),
        job_timeout=services.settings.job_timeout_seconds,
        retry=Retry(max=TICK_RETRIES, interval=[state.interval]),
        on_failure=Callback(on_tick_failure),
        result_ttl=60,
        failure_ttl=24 * 3600,
        description=f"watch {state.request.command.run} in {state.request.channel} #{state.tick}",
        pipeline=pipeline,
    )


def advance(services: Services, state: WatchState, now: datetime) -> None:
    """Save the state and schedule its next tick in one Redis transaction.

    Two separate writes would let a worker killed between them leave a state
    whose next tick was never scheduled (the watch silently stops), or a tick
    that finds the state one number behind and skips itself as stale.
    """
    with services.redis.pipeline(transaction=True) as pipe:
        save_state(pipe, state, now)
        schedule_tick(services, state, pipeline=pipe)
        pipe.execute()


def _slack_error(exc: SlackApiError) -> str | None:
    return exc.response.get("error") if exc.response is not None else None


def _retry_after(exc: SlackApiError) -> float | None:
    if exc.response is None or exc.response.status_code != 429:
        return None
    headers = exc.response.headers or {}
    value = headers.get("Retry-After") or headers.get("retry-after") or "1"
    try:
        return float(value if isinstance(value, str) else value[0])
    except (TypeError, ValueError):
        return 1.0


# ------------------------------------------------------------------ start


def start_watch(request: StatusRequest, services: Services, *, job: Job | None,
                now: datetime) -> StatusOutcome:
    """`/tau status --watch`: join the running watch of this run here, or post the card and start one.

    Called from `workers.jobs.run_status` (which it replaces for watches).
    """
    conn = services.redis
    wid = watch_id(request.channel, request.command.run)
    claim = job.id if job is not None else f"direct-{now.timestamp()}"
    max_minutes = services.settings.watch_max_minutes
    holder = conn.set(owner_key(wid), claim, nx=True, ex=max_minutes * 60 + 600)
    if not holder and (conn.get(owner_key(wid)) or b"").decode() != claim:
        return join_watch(request, services, wid)
    try:
        return _begin(request, services, wid, job=job, now=now)
    except BaseException:
        # Let the retry (or a later command) claim the watch again.
        conn.delete(owner_key(wid))
        raise


def _begin(request: StatusRequest, services: Services, wid: str, *, job: Job | None,
           now: datetime) -> StatusOutcome:
    settings = services.settings
    interval = request.command.interval or settings.watch_interval_seconds
    parent_ts = ensure_parent(services.slack, request, job)
    live, operator_ok = asyncio.run(diagnose_for_card(request, services, now))
    diagnosis = live.diagnosis
    state = WatchState(
        id=wid,
        request=request,
        watchers=[request.user],
        interval=interval,
        started_at=now,
        deadline=now + timedelta(minutes=settings.watch_max_minutes),
        parent_ts=parent_ts or "",
        card_ts="",
        card_hash="",
        run_kind=diagnosis.run.kind,
        namespace=live.namespace,
        context={},
    )
    if request.command.run_profile:
        state.utilization.append(average_utilization(live.profile))
    button, escalated = escalation_for(services, state, live, now)
    record_phases(state, diagnosis, now)
    verdict = run_verdict(live, request.command.run)
    reason = None
    if parent_ts is None:
        reason = "taubot cannot post in this channel, so it cannot keep a card up to date here"
    elif verdict is not None:
        reason = f"the run has already finished ({verdict}); there is nothing to watch"
    context = watch_context(live, operator_ok, state, now=now, reason=reason, escalate_button=button,
                            escalated=escalated)
    card_ts = deliver(services.slack, request, parent_ts, render_phase_card(context), job)
    if state.escalation is not None:
        Offer(button=state.escalation.button, record_id=state.escalation.record_id,
              conn=services.redis).attach(card_ts)
    outcome = StatusOutcome(parent_ts, card_ts, diagnosis.first_incomplete, diagnosis.layer, live.requests)
    if reason is not None:
        services.redis.delete(owner_key(wid))
        return outcome
    state.card_ts = card_ts
    state.card_hash = card_hash(context)
    state.context = context.model_dump(mode="json")
    advance(services, state, now)
    log.info("watch %s started: %s in %s every %ss", wid, request.command.run, request.channel, interval)
    return outcome


def join_watch(request: StatusRequest, services: Services, wid: str) -> StatusOutcome:
    """A second `--watch` of a watched run: one watch, one more person who may stop it."""
    conn = services.redis
    with conn.lock(lock_name(wid), timeout=LOCK_TIMEOUT_SECONDS, blocking_timeout=LOCK_TIMEOUT_SECONDS):
        state = load_state(conn, wid)
        if state is None or state.stopped is not None:
            # The first watch is still posting its card (or just ended): nothing to join yet.
            text = (f"👀 A watch of {code(request.command.run, 80)} is starting in this channel; "
                    "its card will appear in a thread here.")
            if request.response_url:
                WebhookClient(str(request.response_url), timeout=10).send(
                    text=text, response_type="ephemeral", replace_original=False)
            return StatusOutcome(None, "joining", None, 0, 0)
        if request.user not in state.watchers:
            state.watchers.append(request.user)
        save_state(conn, state, datetime.now(UTC))
    text = (f"👀 <@{request.user}> asked to watch {code(request.command.run, 80)} too and joined this "
            f"watch: the card above keeps updating every {state.interval} s until "
            f"{state.deadline.strftime('%H:%M UTC')}.")
    services.slack.chat_postMessage(channel=state.request.channel, thread_ts=state.parent_ts, text=text,
                                    unfurl_links=False, unfurl_media=False)
    return StatusOutcome(state.parent_ts, state.card_ts, None, 0, 0)


# ------------------------------------------------------------------ ticks


def watch_tick(wid: str, tick: int) -> dict[str, Any]:
    """RQ entry point of one refresh."""
    services = Services.from_settings(load_settings())
    return run_tick(services, wid, tick, now=datetime.now(UTC))


def run_tick(services: Services, wid: str, tick: int, *, now: datetime) -> dict[str, Any]:
    """Re-collect, re-render, edit the card only if it changed, reply once per transition."""
    conn = services.redis
    with conn.lock(lock_name(wid), timeout=LOCK_TIMEOUT_SECONDS, blocking_timeout=LOCK_TIMEOUT_SECONDS):
        state = load_state(conn, wid)
        if state is None or state.stopped is not None or state.tick != tick:
            return {"watch": wid, "tick": tick, "skipped": "stale"}
        live, operator_ok = asyncio.run(diagnose_for_card(state.request, services, now))
        if state.request.command.run_profile:
            state.utilization = [*state.utilization, average_utilization(live.profile)][-HISTORY_POINTS:]
        verdict = run_verdict(live, state.request.command.run)
        reason = None
        if verdict is not None:
            reason = f"the run finished ({verdict})"
        elif now >= state.deadline:
            reason = f"the {services.settings.watch_max_minutes}-minute limit was reached"
        state.run_kind = live.diagnosis.run.kind or state.run_kind
        state.namespace = live.namespace or state.namespace
        button, escalated = escalation_for(services, state, live, now)
        context = watch_context(live, operator_ok, state, now=now, reason=reason, escalate_button=button,
                                escalated=escalated)
        changed = card_hash(context) != state.card_hash
        pacer = make_pacer(services)
        outcome = "unchanged"
        if changed:
            outcome = _update_card(services, pacer, state, context, final=reason is not None)
        if outcome == "gone":
            reason = "the card was deleted"
        else:
            _reply_transitions(services, pacer, state, live.diagnosis, now)
        if reason is not None:
            _end(services, state, reason, now, card_updated=outcome in ("updated", "gone"))
        else:
            state.tick += 1
            advance(services, state, now)
        return {"watch": wid, "tick": tick, "card": outcome, "stopped": reason}


def _update_card(services: Services, pacer: SlackPacer, state: WatchState, context: PhaseCardContext,
                 *, final: bool) -> str:
    """chat.update within the pace; "updated", "deferred" (try next tick) or "gone"."""
    channel = state.request.channel
    wait = FINAL_MAX_WAIT_SECONDS if final else min(UPDATE_MAX_WAIT_SECONDS, state.interval / 2)
    if not pacer.acquire("chat.update", channel, max_wait=wait) and not final:
        log.info("watch %s: chat.update deferred by the pace", state.id)
        return "deferred"
    card = render_phase_card(context)
    try:
        services.slack.chat_update(channel=channel, ts=state.card_ts, text=card.text, blocks=card.blocks)
    except SlackApiError as exc:
        if _slack_error(exc) in GONE:
            return "gone"
        retry_after = _retry_after(exc)
        if retry_after is not None and not final:
            pacer.penalize("chat.update", retry_after)
            return "deferred"
        raise
    state.card_hash = card_hash(context)
    state.context = context.model_dump(mode="json")
    state.updates += 1
    return "updated"


def _reply_transitions(services: Services, pacer: SlackPacer, state: WatchState, diagnosis: Diagnosis,
                       now: datetime) -> None:
    """One short thread reply per phase transition, oldest phase first; a reply the pace defers
    leaves that phase's old state recorded, so the next tick replies instead."""
    channel = state.request.channel
    for name, old, new in transitions(state, diagnosis):
        if not pacer.acquire("chat.postMessage", channel, max_wait=TRANSITION_MAX_WAIT_SECONDS):
            diagnosis = diagnosis.model_copy(update={
                "phases": [p for p in diagnosis.phases if p.name != name]})
            continue
        services.slack.chat_postMessage(channel=channel, thread_ts=state.parent_ts,
                                        text=transition_text(state, name, old, new, now),
                                        unfurl_links=False, unfurl_media=False)
    record_phases(state, diagnosis, now)


def _end(services: Services, state: WatchState, reason: str, now: datetime, *, card_updated: bool,
         cancel_pending: bool = False) -> None:
    """Mark the watch stopped, free the (channel, run) slot, and make the card say why — unless
    the card is gone, in which case the thread is told. ``cancel_pending`` drops the scheduled
    tick (a Stop between ticks); a tick ending its own watch simply schedules none."""
    conn = services.redis
    state.stopped = reason
    save_state(conn, state, now)
    conn.delete(owner_key(state.id))
    log.info("watch %s stopped: %s", state.id, reason)
    if cancel_pending:
        try:
            Job.fetch(tick_job_id(state.id, state.tick), connection=conn).delete()
        except NoSuchJobError:
            pass
    if reason == "the card was deleted":
        try:
            services.slack.chat_postMessage(
                channel=state.request.channel, thread_ts=state.parent_ts,
                text=f"⏹️ Stopped watching {code(state.request.command.run, 80)}: the card was deleted.")
        except SlackApiError as exc:
            log.info("watch %s: could not say the card is gone: %s", state.id, exc)
        return
    if card_updated:
        return
    context = PhaseCardContext.model_validate(state.context).model_copy(update={
        "watch_status": stopped_footer(reason, now), "stop_button": None, "watch_updated": ""})
    card = render_phase_card(context)
    make_pacer(services).acquire("chat.update", state.request.channel, max_wait=FINAL_MAX_WAIT_SECONDS)
    try:
        services.slack.chat_update(channel=state.request.channel, ts=state.card_ts, text=card.text,
                                   blocks=card.blocks)
    except SlackApiError as exc:
        log.info("watch %s: final card not updated: %s", state.id, _slack_error(exc))
    state.card_hash = card_hash(context)
    state.context = context.model_dump(mode="json")
    save_state(conn, state, now)


def show_escalation(services: Services, record: StoredDiagnosis, card_ts: str, note: EscalatedNote) -> bool:
    """Called by the escalation job: True when ``card_ts`` is the card of a running watch, which
    then shows ``note`` (or already does, or has moved on to another owner); False when the
    job should edit the card itself.

    The card is re-rendered from the watch's last render with the note for
    the button, and the state remembers that render's hash, so the next
    tick finds the card it would draw and sends nothing. If the watch is
    busy past a short wait, False: the job's own edit shows the same note,
    and the next tick re-sends the card once to make the hash true again.
    """
    conn = services.redis
    wid = watch_id(record.channel, record.run)
    lock = conn.lock(lock_name(wid), timeout=LOCK_TIMEOUT_SECONDS,
                     blocking_timeout=ESCALATION_LOCK_WAIT_SECONDS)
    if not lock.acquire():
        return False
    try:
        state = load_state(conn, wid)
        if state is None or state.stopped is not None or state.card_ts != card_ts:
            return False
        if state.escalation is None or state.escalation.record_id != record.id:
            return True  # the card already offers the escalation of another (layer, owner)
        context = PhaseCardContext.model_validate(state.context).model_copy(
            update={"escalate_button": None, "escalated": note})
        if card_hash(context) == state.card_hash:
            return True  # a tick already drew it
        card = render_phase_card(context)
        make_pacer(services).acquire("chat.update", record.channel, max_wait=FINAL_MAX_WAIT_SECONDS)
        try:
            services.slack.chat_update(channel=record.channel, ts=card_ts, text=card.text, blocks=card.blocks)
        except SlackApiError as exc:  # the next tick draws it (its hash still differs)
            log.info("watch %s: escalated card not updated: %s", wid, _slack_error(exc))
            return True
        state.card_hash = card_hash(context)
        state.context = context.model_dump(mode="json")
        state.updates += 1
        save_state(conn, state, datetime.now(UTC))
        return True
    finally:
        lock.release()


def on_tick_failure(job: Job, connection: redis.Redis, exc_type: type[BaseException] | None,
                    exc_value: BaseException | None, traceback: TracebackType | None) -> None:
    """The last attempt of a tick failed: end the watch with the reason on the card, rather than
    leave a card that claims to be watching. Never raises (rq would record this error instead)."""
    try:
        if job.should_retry:
            return
        wid, tick = job.args
        services = Services.from_settings(load_settings())
        with connection.lock(lock_name(wid), timeout=LOCK_TIMEOUT_SECONDS,
                             blocking_timeout=LOCK_TIMEOUT_SECONDS):
            state = load_state(services.redis, wid)
            if state is None or state.stopped is not None or state.tick != tick:
                return
            error = exc_type.__name__ if exc_type is not None else "error"
            _end(services, state, f"taubot could not refresh it ({escape(error, 80)})",
                 datetime.now(UTC), card_updated=False)
    except Exception:  # noqa: BLE001 - see docstring
        log.exception("watch tick %s: failure callback could not end the watch", job.id)


# ------------------------------------------------------------------ stop


class StopRequest(BaseModel):
    """A Stop watching press, as the front end hands it over: who pressed, and as whom they act."""

    watch: str = Field(pattern=r"^watch-[0-9a-f]{24}$")
    user: str = Field(pattern=r"^[UW][A-Z0-9]{2,}$")
    channel: str
    identity: Identity | None = None


def enqueue_stop(queue: Queue, stop: StopRequest, *, job_timeout: int = 60) -> Job:
    """Queue the stop: the access review talks to Kubernetes, which the front end never does."""
    return queue.enqueue(stop_job, stop.model_dump(mode="json"), job_timeout=job_timeout, result_ttl=600,
                         failure_ttl=24 * 3600, description=f"stop {stop.watch} by {stop.user}")


async def may_stop(services: Services, state: WatchState, identity: Identity) -> bool:
    """Anyone who may `get` the run itself (SelfSubjectAccessReview, impersonated) may stop it."""
    from workers.kube.client import make_user_client
    from workers.kube.reader import KubeReader
    from workers.workspaces import Resolved

    command = state.request.command
    resolution = services.registry.resolve(workspace=command.workspace, channel=state.request.channel)
    if not isinstance(resolution, Resolved):
        return False
    group, resource = ("ray.io", "rayjobs") if state.run_kind == "RayJob" else ("batch", "jobs")
    namespace = state.namespace or resolution.descriptor.spec.namespace
    api = await make_user_client(resolution.descriptor.cluster_target(), identity)
    async with api:
        allowed = await KubeReader(api, services.settings.kube_request_timeout_seconds).access_review(
            "get", resource, group, namespace=namespace, name=command.run)
    return allowed is True


def run_stop(services: Services, stop: StopRequest, *, now: datetime) -> str:
    """Stop the watch if the presser may; otherwise tell them privately why not."""
    conn = services.redis
    with conn.lock(lock_name(stop.watch), timeout=LOCK_TIMEOUT_SECONDS,
                   blocking_timeout=LOCK_TIMEOUT_SECONDS):
        state = load_state(conn, stop.watch)
        if state is None or state.stopped is not None:
            _tell(services, stop, "This watch has already stopped.")
            return "already stopped"
        allowed = stop.user in state.watchers
        if not allowed and stop.identity is not None:
            allowed = asyncio.run(may_stop(services, state, stop.identity))
        if not allowed:
            _tell(services, stop, f"⛔ Only the people who asked for this watch, or who may read "
                                  f"{code(state.request.command.run, 80)} in its namespace, can stop it.")
            return "refused"
        _end(services, state, "*Stop watching* was pressed", now, card_updated=False, cancel_pending=True)
    try:
        services.slack.chat_postMessage(
            channel=state.request.channel, thread_ts=state.parent_ts, unfurl_links=False,
            text=f"⏹️ <@{stop.user}> stopped watching {code(state.request.command.run, 80)}.")
    except SlackApiError as exc:
        log.info("watch %s: could not say who stopped it: %s", state.id, exc)
    return "stopped"


def _tell(services: Services, stop: StopRequest, text: str) -> None:
    try:
        services.slack.chat_postEphemeral(channel=stop.channel, user=stop.user, text=text)
    except SlackApiError as exc:
        log.info("could not answer %s privately: %s", stop.user, exc)


def stop_job(stop: dict[str, Any]) -> str:
    """RQ entry point of a Stop watching press."""
    services = Services.from_settings(load_settings())
    return run_stop(services, StopRequest.model_validate(stop), now=datetime.now(UTC))


__all__ = [
    "STOP_WATCHING_ACTION",
    "StopRequest",
    "WatchState",
    "card_hash",
    "enqueue_stop",
    "join_watch",
    "load_state",
    "on_tick_failure",
    "run_stop",
    "run_tick",
    "show_escalation",
    "start_watch",
    "stop_job",
    "watch_id",
    "watch_tick",
]
