"""`/tau status <run> --watch`: the phase card edited in place until the run settles (SPEC §7).

Shape. The status job posts the parent and the card as usual, then saves a
`WatchState` in Redis and schedules the first tick on the queue. Each tick
re-collects under the requester's identity (the same bounded requests as a
status), re-renders, edits the card through the posted-card store (only
when it changed), and schedules the next tick. Nothing lives in a worker's
memory between ticks, so a worker that dies between ticks loses nothing.

Why a tick number: each tick carries the number it expects the state to be
at. A tick that finds another number (a retried tick whose successor already
ran, a watch stopped and started again) does nothing, so a watch never forks
into two chains of ticks. Why a per-watch lock: a Stop press and a tick can
run at the same time on two workers; both read-modify-write the state. A tick
of an unchanged run takes no lock: it writes only if the state is still the
bytes it read and nobody holds the lock (`run_tick`).

One watch per (channel, workspace, run): an owner key taken with SET NX. A
second `--watch` of the same run joins the running watch only after the same
access review as the Stop button (may the asker `get` the run?), so nobody
becomes a watcher of a run they may not read.

Escalate on a watched card: the state keeps the offer for the run's current
(layer, owner) and a new one is stored only when that pair changes (a fresh
offer per tick would change the button and re-send an unchanged card). Each
tick asks whether the pair was escalated and then shows the note instead of
the button; the escalation job edits the same stored card, so both agree.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import redis
from pydantic import BaseModel, Field

from workers.collect.access import permits
from workers.collect.kueue import QueueMemo
from workers.collect.probe import Probe, probe_of, unchanged
from workers.config.workspaces import Resolved
from workers.contracts.identity import Identity
from workers.contracts.ids import STOP_WATCHING_ACTION, watch_id
from workers.contracts.requests import StatusRequest, StopRequest
from workers.diagnosis.models import Diagnosis
from workers.diagnosis.profile import GpuProfile
from workers.plumbing.conditional_write import Recorder, commit_if_unchanged
from workers.plumbing.metrics import TICK_LAG, WATCH_TICKS
from workers.records.offers import (
    Offer,
    claim_of,
    escalated_note,
    escalation_of,
    load_record,
    offer_escalation,
    wants_handoff,
)
from workers.render.buttons import CardButton, EscalatedNote
from workers.render.cards import PhaseCardContext, build_phase_card
from workers.render.mrkdwn import code, escape
from workers.render.profile import utilization_sparkline
from workers.render.slots import EscalationSlot, WatchFooter
from workers.services import Services
from workers.surfaces.base import Failed

from .presses import NOT_HERE, offered_here
from .status import StatusOutcome, deliver, diagnose_for_card, ensure_parent

if TYPE_CHECKING:
    from redis.client import Pipeline
    from rq.job import Job

    from workers.collect.report import RunReport

log = logging.getLogger(__name__)

KEY_PREFIX = "taubot:watch:"
STATE_TTL_AFTER_END = 24 * 3600  # a late Stop press still learns the watch already ended
LOCK_TIMEOUT_SECONDS = 180  # longer than a tick can take (job timeout), shorter than a stuck watch
TICK_RETRIES = 2
HISTORY_POINTS = 20
FINAL_MAX_WAIT_SECONDS = 15.0
# A paced card takes a slot of its own up to this long before its next tick would be due (the next
# tick recomputes the card anyway, so a later slot is of no use to this one); a run's last card
# (it finished) may wait this long for one.
RESERVE_MARGIN_SECONDS = 1.0
FINAL_RESERVE_SECONDS = 60.0
TICK_JOB = "workers.jobs.watch_tick"
TICK_FAILURE = "workers.jobs.on_tick_failure"


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
    workspace: str = ""
    watchers: list[str] = Field(description="Slack users who asked for this watch; each may stop it")
    interval: int
    started_at: datetime
    deadline: datetime
    parent_ts: str
    card_ts: str
    tick: int = 0
    queue: QueueMemo | None = Field(default=None, description="the waiting run's last queue read")
    queue_read_tick: int = Field(default=0, description="the tick that made `queue`")
    probe: Probe | None = Field(default=None, description="what the next ticks read first, and the versions "
                                "the last full read saw (`workers/collect/probe.py`); None: read in full")
    full_tick: int = Field(default=0, description="the tick of the last full read")
    phases: dict[str, str] = Field(default_factory=dict, description="phase name → state seen last")
    since: dict[str, datetime] = Field(default_factory=dict, description="when that state was first seen")
    observed_change: list[str] = Field(
        default_factory=list, description="phases whose `since` is a transition the watch saw"
    )
    utilization: list[float | None] = Field(default_factory=list)
    run_kind: str | None = None
    namespace: str | None = None
    updates: int = 0
    deferrals: int = Field(default=0, description="times this tick ran again to send its card in a slot "
                           "it reserved (0 or 1)")
    reserved: bool = Field(default=False, description="the pending re-run holds a slot of the pace: it "
                           "sends without asking the pacer again")
    next_due: datetime | None = Field(default=None, description="when the pending tick is due: ticks keep "
                                      "to started_at + k × interval, not to the end of the previous one")
    stopped: str | None = None
    escalation: WatchEscalation | None = None


def active_watches(conn: redis.Redis, limit: int = 100_000) -> int | None:
    """How many watches are live: their owner keys (a stopped watch frees its own), counted by
    SCAN. None when Redis cannot say — a gauge must not read 0 for "unknown"."""
    count = 0
    try:
        for _ in conn.scan_iter(match=f"{KEY_PREFIX}*:owner", count=1000):
            count += 1
            if count >= limit:
                break
    except redis.RedisError:
        return None
    return count


def state_key(wid: str) -> str:
    return f"{KEY_PREFIX}{wid}"


def owner_key(wid: str) -> str:
    return f"{KEY_PREFIX}{wid}:owner"


def pending_key(wid: str) -> str:
    return f"{KEY_PREFIX}{wid}:pending"


def save_pending(conn: redis.Redis, wid: str, context: PhaseCardContext, diagnosis: Diagnosis,
                 reason: str | None, *, ttl: int) -> None:
    """What a paced tick computed, for its re-run to send without reading the cluster again."""
    conn.set(pending_key(wid), json.dumps({"context": context.model_dump(mode="json"),
                                           "diagnosis": diagnosis.model_dump(mode="json"), "reason": reason}),
             ex=max(1, ttl))


def load_pending(conn: redis.Redis, wid: str) -> tuple[PhaseCardContext, Diagnosis, str | None] | None:
    raw = conn.get(pending_key(wid))
    if raw is None:
        return None
    doc = json.loads(raw)
    return (PhaseCardContext.model_validate(doc["context"]), Diagnosis.model_validate(doc["diagnosis"]),
            doc.get("reason"))


def lock_name(wid: str) -> str:
    return f"{KEY_PREFIX}{wid}:lock"


def tick_job_id(wid: str, tick: int) -> str:
    return f"{wid}-t{tick}"


def load_state(conn: redis.Redis, wid: str) -> WatchState | None:
    raw = conn.get(state_key(wid))
    return WatchState.model_validate_json(raw) if raw else None


def save_state(conn: redis.Redis | Pipeline | Recorder, state: WatchState, now: datetime) -> None:
    """Kept until a day after the deadline: long enough for any tick or late button press."""
    ttl = max(60, int((state.deadline - now).total_seconds()) + STATE_TTL_AFTER_END)
    conn.set(state_key(state.id), state.model_dump_json(), ex=ttl)


def workspace_of(services: Services, request: StatusRequest) -> str:
    """The workspace a watch is keyed by: the one the status resolves to ("" when none does)."""
    resolution = services.registry.resolve(workspace=request.command.workspace, channel=request.channel)
    return resolution.descriptor.name if isinstance(resolution, Resolved) else ""


# ---------------------------------------------------------------- the card


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


def reusable_queue(state: WatchState, every: int) -> QueueMemo | None:
    """The last queue read, for this tick to reuse while the run's Workload is unchanged; None
    (read afresh) once it is ``every`` ticks old: a waiting run's place also moves when others'
    Workloads are admitted, which its own Workload does not show."""
    if state.queue is None or state.tick - state.queue_read_tick >= every:
        return None
    return state.queue


def remember_queue(state: WatchState, live: RunReport) -> None:
    """Keep a fresh queue read with the tick that made it; a reused one changes nothing."""
    memo = live.queue_memo
    if memo is None:
        state.queue = None
    elif memo.fresh:
        state.queue, state.queue_read_tick = memo, state.tick


def remember_probe(state: WatchState, live: RunReport) -> None:
    """After a full read: what the next ticks probe first. None (every tick reads in full) for a
    workspace that could not be read, a run not found, and `--run-profile` (its telemetry is new
    each tick)."""
    state.full_tick = state.tick
    state.probe = None
    if live.layer_report is None and not state.request.command.run_profile:
        state.probe = probe_of(live.linked, live.objects)


def probe_says_unchanged(services: Services, state: WatchState, now: datetime) -> bool:
    """Whether this tick may keep the card: the run's probe found every version as the last full
    read saw it, and that read is less than `watch_full_every_ticks` ticks old (see the probe's
    module docstring for what only a full read shows)."""
    probe = state.probe
    if probe is None or now >= state.deadline:
        return False
    if state.tick - state.full_tick >= services.settings.watch_full_every_ticks:
        return False
    if state.queue is not None and reusable_queue(state, services.settings.watch_queue_every_ticks) is None:
        return False  # the waiting run's place is due for a fresh read
    command = state.request.command
    resolution = services.registry.resolve(workspace=state.workspace or command.workspace,
                                           channel=state.request.channel)
    if not isinstance(resolution, Resolved):
        return False
    return services.run(unchanged(services.kube, resolution.descriptor.cluster_target(),
                                  state.request.identity, probe,
                                  timeout=services.settings.kube_request_timeout_seconds))


def record_phases(state: WatchState, diagnosis: Diagnosis, now: datetime) -> None:
    for phase in diagnosis.phases:
        old = state.phases.get(phase.name)
        if old != phase.state.value:
            if old is not None and phase.name not in state.observed_change:
                state.observed_change.append(phase.name)
            state.phases[phase.name] = phase.state.value
            state.since[phase.name] = now


# ------------------------------------------------------------------ ticks on the queue


def schedule_tick(services: Services, state: WatchState, now: datetime, *,
                  pipeline: Pipeline | Recorder | None = None) -> str:
    """The next tick, due at ``state.next_due``: a timed job in the workers' due set, which a
    worker's `TickMover` claims then, to the millisecond (`workers/plumbing/timed_jobs.py`)."""
    due = state.next_due or now + timedelta(seconds=state.interval)
    delay = max(0.0, (due - now).total_seconds())
    return services.queue.enqueue_in(
        delay, TICK_JOB, state.id, state.tick, job_id=tick_job_id(state.id, state.tick),
        timeout=services.settings.job_timeout_seconds, retries=TICK_RETRIES,
        retry_interval=state.interval, on_failure=TICK_FAILURE, exact=due,
        description=f"watch {state.request.command.run} in {state.request.channel} #{state.tick}",
        pipeline=pipeline)


def retry_tick(services: Services, state: WatchState, delay: float, now: datetime) -> None:
    """Run the same tick again in ``delay`` seconds (its card update was paced), with the state
    saved in the same transaction, as `advance` does for the next one."""
    with services.redis.pipeline(transaction=True) as pipe:
        save_state(pipe, state, now)
        services.queue.enqueue_in(
            delay, TICK_JOB, state.id, state.tick,
            job_id=f"{tick_job_id(state.id, state.tick)}-d{state.deferrals}",
            timeout=services.settings.job_timeout_seconds, retries=TICK_RETRIES,
            retry_interval=state.interval, on_failure=TICK_FAILURE, exact=now + timedelta(seconds=delay),
            description=f"watch {state.request.command.run} in {state.request.channel} #{state.tick} (paced)",
            pipeline=pipe)
        pipe.execute()


def advance(services: Services, state: WatchState, now: datetime) -> None:
    """Save the state and schedule its next tick in one Redis transaction.

    Two separate writes would let a worker killed between them leave a state
    whose next tick was never scheduled (the watch silently stops), or a tick
    that finds the state one number behind and skips itself as stale.
    """
    # Anchored to the watch's own cadence: a tick that took 0.4 s does not push every later one
    # back by 0.4 s; one that ran late is followed at once, never twice in one slot.
    _next_slot(state, now)
    with services.redis.pipeline(transaction=True) as pipe:
        save_state(pipe, state, now)
        schedule_tick(services, state, now, pipeline=pipe)
        pipe.execute()


def _next_slot(state: WatchState, now: datetime) -> None:
    previous = state.next_due or state.started_at
    state.next_due = max(previous + timedelta(seconds=state.interval), now)


def advance_unlocked(services: Services, state: WatchState, read: bytes, now: datetime) -> bool:
    """`advance` for a tick that read ``read`` without the watch's lock: the state and the next
    tick are written only if the state is still those bytes and nobody holds the lock (one
    script call instead of the lock's two round trips around the transaction,
    `workers/plumbing/conditional_write.py`). False: nothing was written."""
    _next_slot(state, now)
    writes = Recorder()
    save_state(writes, state, now)
    schedule_tick(services, state, now, pipeline=writes)
    return commit_if_unchanged(services.redis, state_key(state.id), read, lock_name(state.id), writes)


# ------------------------------------------------------------------ start


def start_watch(services: Services, request: StatusRequest, *, job: Job | None,
                now: datetime) -> StatusOutcome:
    """`/tau status --watch`: join the running watch of this run here, or post the card and start one."""
    conn = services.redis
    workspace = workspace_of(services, request)
    wid = watch_id(request.channel, workspace, request.command.run)
    claim = job.id if job is not None else f"direct-{now.timestamp()}"
    max_minutes = services.settings.watch_max_minutes
    holder = conn.set(owner_key(wid), claim, nx=True, ex=max_minutes * 60 + 600)
    if not holder and (conn.get(owner_key(wid)) or b"").decode() != claim:
        return join_watch(services, request, wid, now=now)
    try:
        return _begin(services, request, wid, workspace, job=job, now=now)
    except BaseException:
        conn.delete(owner_key(wid))  # let the retry (or a later command) claim the watch again
        raise


def _begin(services: Services, request: StatusRequest, wid: str, workspace: str, *, job: Job | None,
           now: datetime) -> StatusOutcome:
    settings = services.settings
    interval = request.command.interval or settings.watch_interval_seconds
    parent_ts = ensure_parent(services, request, job)
    live, operator_ok = services.run(diagnose_for_card(services, request, now))
    diagnosis = live.diagnosis
    state = WatchState(
        id=wid, request=request, workspace=workspace, watchers=[request.user], interval=interval,
        started_at=now, deadline=now + timedelta(minutes=settings.watch_max_minutes),
        parent_ts=parent_ts or "", card_ts="", run_kind=diagnosis.run.kind, namespace=live.namespace,
    )
    if request.command.run_profile:
        state.utilization.append(average_utilization(live.profile))
    remember_queue(state, live)
    remember_probe(state, live)
    button, escalated = escalation_for(services, state, live, now)
    record_phases(state, diagnosis, now)
    verdict = ended_verdict(live)
    reason = None
    if parent_ts is None:
        reason = "taubot cannot post in this channel, so it cannot keep a card up to date here"
    elif verdict is not None:
        reason = f"the run has already finished ({verdict}); there is nothing to watch"
    context = watch_context(live, operator_ok, state, now=now, reason=reason, escalate_button=button,
                            escalated=escalated, verdict=verdict)
    posted = deliver(services, request, parent_ts, context, job)
    card_ts = posted.ts if posted else None
    if state.escalation is not None and card_ts:
        Offer(button=state.escalation.button, record_id=state.escalation.record_id,
              conn=services.redis).attach(card_ts)
    outcome = StatusOutcome(parent_ts, card_ts, diagnosis.first_incomplete, diagnosis.layer, live.requests)
    if reason is not None or card_ts is None:
        services.redis.delete(owner_key(wid))
        return outcome
    state.card_ts = card_ts
    advance(services, state, now)
    log.info("watch %s started: %s in %s every %ss", wid, request.command.run, request.channel, interval)
    return outcome


async def may_read_run(services: Services, state: WatchState, identity: Identity) -> bool:
    """Whether ``identity`` may `get` the watched run itself (SelfSubjectAccessReview, impersonated):
    the test for joining a watch and for stopping someone else's."""
    command = state.request.command
    resolution = services.registry.resolve(workspace=state.workspace or command.workspace,
                                           channel=state.request.channel)
    if not isinstance(resolution, Resolved):
        return False
    group, resource = ("ray.io", "rayjobs") if state.run_kind == "RayJob" else ("batch", "jobs")
    namespace = state.namespace or resolution.descriptor.spec.namespace
    return await permits(services.kube, resolution.descriptor.cluster_target(), identity, "get", resource,
                         group, namespace=namespace, name=command.run,
                         timeout=services.settings.kube_request_timeout_seconds)


def join_watch(services: Services, request: StatusRequest, wid: str, *, now: datetime) -> StatusOutcome:
    """A second `--watch` of a watched run: one watch, one more person who may stop it — after
    the same access review a new status would pass."""
    conn = services.redis
    run = code(request.command.run, 80)
    with conn.lock(lock_name(wid), timeout=LOCK_TIMEOUT_SECONDS, blocking_timeout=LOCK_TIMEOUT_SECONDS):
        state = load_state(conn, wid)
        if state is None or state.stopped is not None:
            _private(services, request, f"👀 A watch of {run} is starting in this channel; its card will "
                                        "appear in a thread here.")
            return StatusOutcome(None, None, None, 0, 0)
        if request.user not in state.watchers:
            if not services.run(may_read_run(services, state, request.identity)):
                _private(services, request, f"⛔ Your Kubernetes identity may not read {run}, so taubot "
                                            "did not add you to its watch here.")
                return StatusOutcome(None, None, None, 0, 0)
            state.watchers.append(request.user)
        save_state(conn, state, now)
    text = (f"👀 <@{request.user}> asked to watch {run} too and joined this watch: the card above "
            f"keeps updating every {state.interval} s until {state.deadline.strftime('%H:%M UTC')}.")
    services.surface.post(state.request.channel, text, thread_ts=state.parent_ts)
    return StatusOutcome(state.parent_ts, state.card_ts, None, 0, 0)


def _private(services: Services, request: StatusRequest, text: str) -> None:
    if request.response_url:
        services.surface.respond(request.response_url, text)
    else:
        services.surface.ephemeral(request.channel, request.user, text)


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
            memo = reusable_queue(state, services.settings.watch_queue_every_ticks)
            live, operator_ok = services.run(diagnose_for_card(services, state.request, now, queue_memo=memo,
                                                               watch_tick=True))
            remember_queue(state, live)
            remember_probe(state, live)
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
        deferred: list[Failed] = []
        rerun = state.reserved and pending is not None
        outcome = services.cards.update_if_changed(
            state.request.channel, state.card_ts, lambda _stored: context, max_wait=0,
            reserve_within=_reserve_horizon(state, now, final=reason is not None), reserved=rerun,
            deferred=deferred)
        state.reserved = False
        if outcome == "deferred" and not rerun and deferred and deferred[0].error == "reserved":
            state.deferrals += 1
            state.reserved = True
            wait = deferred[0].retry_after or 0.0
            save_pending(conn, wid, context, diagnosis, reason, ttl=state.interval * 2 + int(wait))
            retry_tick(services, state, wait, now)
            return {"watch": wid, "tick": tick, "card": outcome, "retry_in": wait, "reserved": True}
        if state.deferrals:
            conn.delete(pending_key(wid))
        state.deferrals = 0
        if outcome == "updated":
            state.updates += 1
        if outcome not in ("updated", "unchanged"):
            state.probe = None  # what this read found is not on the card yet: the next tick reads again
        if outcome in ("gone", "missing"):
            reason = "the card was deleted" if outcome == "gone" else "the card is no longer known to taubot"
        elif not _reply_transitions(services, state, diagnosis, now):
            state.probe = None  # a reply the pace deferred is sent by the next full read
        if reason is not None:
            _end(services, state, reason, now, card_updated=outcome in ("updated", "gone", "missing"))
        else:
            state.tick += 1
            advance(services, state, now)
        return {"watch": wid, "tick": tick, "card": outcome, "stopped": reason}


def _reserve_horizon(state: WatchState, now: datetime, *, final: bool) -> float:
    """How far ahead this tick's card may reserve a slot: until shortly before the next tick,
    which recomputes the card anyway; a last card (the run finished) has no next tick."""
    if final:
        return FINAL_RESERVE_SECONDS
    due = state.next_due or state.started_at
    return max(0.0, (due + timedelta(seconds=state.interval) - now).total_seconds() - RESERVE_MARGIN_SECONDS)


def _reply_transitions(services: Services, state: WatchState, diagnosis: Diagnosis, now: datetime) -> bool:
    """One short thread reply per phase transition, oldest phase first; a reply the pace defers
    leaves that phase's old state recorded, so the next tick replies instead. False when one was
    deferred."""
    all_sent = True
    for name, old, new in transitions(state, diagnosis):
        sent = services.surface.post(state.request.channel, transition_text(state, name, old, new, now),
                                     thread_ts=state.parent_ts, paced=0)
        if isinstance(sent, Failed):
            all_sent = False
            diagnosis = diagnosis.model_copy(update={
                "phases": [p for p in diagnosis.phases if p.name != name]})
    record_phases(state, diagnosis, now)
    return all_sent


def _end(services: Services, state: WatchState, reason: str, now: datetime, *, card_updated: bool,
         cancel_pending: bool = False) -> None:
    """Mark the watch stopped, free its slot, and make the card say why — unless the card is
    gone, in which case the thread is told. ``cancel_pending`` drops the scheduled tick (a Stop
    between ticks); a tick ending its own watch simply schedules none."""
    conn = services.redis
    state.stopped = reason
    save_state(conn, state, now)
    conn.delete(owner_key(state.id))
    log.info("watch %s stopped: %s", state.id, reason)
    if cancel_pending:
        services.queue.cancel(tick_job_id(state.id, state.tick))
    if reason in ("the card was deleted", "the card is no longer known to taubot"):
        services.surface.post(state.request.channel,
                              f"⏹️ Stopped watching {code(state.request.command.run, 80)}: {reason}.",
                              thread_ts=state.parent_ts)
        return
    if card_updated:
        return
    footer = WatchFooter(status=stopped_footer(reason, now))
    outcome = services.cards.update_if_changed(
        state.request.channel, state.card_ts, lambda stored: stored.with_slot(footer),
        max_wait=FINAL_MAX_WAIT_SECONDS)
    if outcome not in ("updated", "unchanged"):
        log.info("watch %s: final card not updated (%s)", state.id, outcome)


def end_after_failure(services: Services, wid: str, tick: int, error: str, now: datetime) -> None:
    """The last attempt of a tick failed: end the watch with the reason on the card, rather than
    leave a card that claims to be watching."""
    with services.redis.lock(lock_name(wid), timeout=LOCK_TIMEOUT_SECONDS,
                             blocking_timeout=LOCK_TIMEOUT_SECONDS):
        state = load_state(services.redis, wid)
        if state is None or state.stopped is not None or state.tick != tick:
            return
        _end(services, state, f"taubot could not refresh it ({escape(error, 80)})", now, card_updated=False)


# ------------------------------------------------------------------ stop


def run_stop(services: Services, stop: StopRequest, *, now: datetime) -> str:
    """Stop the watch if the presser may; otherwise tell them privately why not."""
    conn = services.redis
    with conn.lock(lock_name(stop.watch), timeout=LOCK_TIMEOUT_SECONDS,
                   blocking_timeout=LOCK_TIMEOUT_SECONDS):
        state = load_state(conn, stop.watch)
        if state is None or state.stopped is not None:
            services.surface.ephemeral(stop.channel, stop.user, "This watch has already stopped.")
            return "already stopped"
        if not offered_here(channel=state.request.channel, card_ts=state.card_ts, thread_ts=state.parent_ts,
                            press_channel=stop.channel, press_ts=stop.message_ts):
            services.surface.ephemeral(stop.channel, stop.user, NOT_HERE.format(verb="stopped"))
            return "elsewhere"
        allowed = stop.user in state.watchers
        if not allowed and stop.identity is not None:
            allowed = services.run(may_read_run(services, state, stop.identity))
        if not allowed:
            services.surface.ephemeral(
                stop.channel, stop.user,
                f"⛔ Only the people who asked for this watch, or who may read "
                f"{code(state.request.command.run, 80)} in its namespace, can stop it.")
            return "refused"
        _end(services, state, "*Stop watching* was pressed", now, card_updated=False, cancel_pending=True)
    services.surface.post(state.request.channel,
                          f"⏹️ <@{stop.user}> stopped watching {code(state.request.command.run, 80)}.",
                          thread_ts=state.parent_ts)
    return "stopped"


def on_tick_failure_callback(services: Services, job_args: tuple[Any, ...],
                             exc_type: type[BaseException] | None, now: datetime) -> None:
    wid, tick = job_args
    end_after_failure(services, wid, tick, exc_type.__name__ if exc_type is not None else "error", now)


__all__ = ["STOP_WATCHING_ACTION", "WatchState", "end_after_failure", "join_watch",
           "load_state", "on_tick_failure_callback", "owner_key", "run_stop", "run_tick", "start_watch",
           "state_key"]
