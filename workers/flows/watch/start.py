"""Starting a watch: post the card and the first tick, or join the watch already running here."""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from workers.collect.access import permits
from workers.collect.plan import status_plan
from workers.config.workspaces import Resolved
from workers.contracts.identity import Identity
from workers.contracts.ids import watch_id
from workers.contracts.requests import StatusRequest
from workers.records.offers import Offer
from workers.render.mrkdwn import code
from workers.services import Services

from ..status import StatusOutcome, deliver, diagnose_for_card, ensure_parent
from .card import average_utilization, ended_verdict, escalation_for, record_phases, watch_context
from .schedule import advance
from .state import LOCK_TIMEOUT_SECONDS, WatchState, load_state, lock_name, owner_key, save_state

if TYPE_CHECKING:
    from rq.job import Job

log = logging.getLogger(__name__)


def workspace_of(services: Services, request: StatusRequest) -> str:
    """The workspace a watch is keyed by: the one the status resolves to ("" when none does)."""
    resolution = services.registry.resolve(workspace=request.command.workspace, channel=request.channel)
    return resolution.descriptor.name if isinstance(resolution, Resolved) else ""


def start_watch(services: Services, request: StatusRequest, *, job: Job | None,
                now: datetime) -> StatusOutcome:
    """`/tau status --watch`: join the running watch of this run here, or post the card and start one."""
    conn = services.redis
    workspace = workspace_of(services, request)
    wid = watch_id(request.channel, workspace, request.command.run)
    # The claim names this start: a retry of the same job finds its own claim and carries on; a
    # second command never does — not even in the shell, whose clock may stand still between two
    # commands (a time-based claim let a second `--watch` there take over the first card).
    claim = job.id if job is not None else f"direct-{uuid.uuid4().hex}"
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
    reads = services.run(diagnose_for_card(services, request, now, status_plan(settings, request.command)))
    live, operator_ok, diagnosis = reads.live, reads.operator_hints, reads.live.diagnosis
    state = WatchState(
        id=wid, request=request, workspace=workspace, watchers=[request.user], interval=interval,
        started_at=now, deadline=now + timedelta(minutes=settings.watch_max_minutes),
        parent_ts=parent_ts or "", card_ts="", run_kind=diagnosis.run.kind, namespace=live.namespace,
    )
    if request.command.run_profile:
        state.utilization.append(average_utilization(live.profile))
    state.reads.after_full_read(state.tick, live, run_profile=request.command.run_profile)
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
