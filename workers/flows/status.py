"""`/tau status` and `/tau workspace …`: post the parent, diagnose as the user, post the card.

Why the parent's ts is kept in a Redis key of its own, by job id: a job may
run more than once (`Retry`). The parent message is posted once and its ts
saved the moment Slack answers, before anything that can fail; a retry
finds it and replies in the same thread instead of posting a second parent,
and the failure callback knows which thread to put the error card in. Not
in the job's meta alone: when rq's work horse is killed, the worker retries
the job from its own copy, saved with the meta it had before the horse ran,
and that copy overwrites whatever the horse wrote there.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from workers.collect.experiments import MlflowAuth
from workers.collect.investigate import investigate, investigate_in, user_session
from workers.collect.operator_access import may_see_operator_hints
from workers.collect.plan import ReadPlan, status_plan
from workers.collect.report import RunReport
from workers.collect.workspace import check_connection, workspace_status
from workers.config.workspaces import Resolved
from workers.contracts.commands import WorkspaceStatusCommand
from workers.contracts.requests import CommandRequest, StatusRequest, WorkspaceRequest
from workers.diagnosis.profile import gpu_capacity, gpus_held
from workers.kube.reader import KubeReader
from workers.records import keys
from workers.records.cards import PostedCard, render
from workers.records.offers import handoff_gap, offer_escalation
from workers.render.cards import MAX_BLOCKS, build_phase_card, build_workspace_card, render_details
from workers.render.charts import Picture, status_pictures
from workers.render.mrkdwn import code
from workers.render.slots import ChartLink, ChartsSlot
from workers.services import Services
from workers.surfaces.base import Failed

from .node_validation import may_create_validation_pods, offer_node_validation, wants_validation

if TYPE_CHECKING:
    from rq.job import Job

log = logging.getLogger(__name__)

META_PARENT_TS = "parent_ts"
PARENT_TTL_SECONDS = 8 * 24 * 3600  # outlives the failed job (rq keeps it 7 days)
META_CARD_TS = "card_ts"
PRIVATE_NOTE = (
    "Only you can see this: taubot cannot post in this channel. Invite it (`/invite @taubot`) "
    "to get answers in a thread everyone can follow."
)


class SlackUnavailable(RuntimeError):
    """Slack refused or did not answer a write that the command cannot do without: retried."""


def parent_text(request: CommandRequest) -> str:
    """The channel message a card hangs under. The user id is Slack's (from the signed
    request) and the command is our own rendering of validated names; still coded."""
    return f"🔎 <@{request.user}> asked {code(request.display(), 400)} — the answer is in the thread."


def ensure_parent(services: Services, request: CommandRequest, job: Job | None) -> str | None:
    """The parent message's ts: posted now, or found in the job's meta on a retry.

    None when the bot cannot post in this channel (not invited, archived, a
    DM it is not part of): retrying cannot change that, so the answer goes
    to the user privately instead (`deliver`).
    """
    if job is not None:
        existing = recorded_parent(services, job.id) or job.get_meta(refresh=True).get(META_PARENT_TS)
        if existing:
            return str(existing)
    sent = services.surface.post(request.channel, parent_text(request))
    if isinstance(sent, Failed):
        if sent.kind == "cannot_post" and request.response_url:
            log.info("cannot post in %s (%s): answering privately", request.channel, sent.error)
            return None
        raise SlackUnavailable(f"Slack API error: {sent.error or sent.kind} (posting in {request.channel})")
    if job is not None:
        services.redis.set(keys.parent_key(job.id), sent.ts, ex=PARENT_TTL_SECONDS)
        job.meta[META_PARENT_TS] = sent.ts
        job.save_meta()
    return sent.ts


def recorded_parent(services: Services, job_id: str) -> str | None:
    """The ts of the parent an earlier run of this job posted, if any."""
    value = services.redis.get(keys.parent_key(job_id))
    return value.decode() if isinstance(value, bytes) else value


def deliver(services: Services, request: CommandRequest, parent_ts: str | None, context: BaseModel,
            job: Job | None) -> PostedCard | None:
    """Post the card in the parent's thread (through the card store); without a parent,
    privately to the requester (then there is no card to edit later: None)."""
    if parent_ts is None:
        card = render(context)
        note = {"type": "context", "elements": [{"type": "mrkdwn", "text": PRIVATE_NOTE}]}
        # No thread to post *Details* in: the rest of the card comes with it (never lost).
        details = getattr(context, "details", None)
        extra = [{"type": "divider"}, *render_details(details).blocks] if details is not None else []
        blocks = [*card.blocks, *extra, note]
        if len(blocks) > MAX_BLOCKS:
            blocks = [*card.blocks, note] if len(card.blocks) < MAX_BLOCKS else card.blocks
        services.surface.respond(str(request.response_url), card.text, blocks)
        return None
    posted = services.cards.post(request.channel, context, thread_ts=parent_ts)
    if isinstance(posted, Failed):
        raise SlackUnavailable(f"Slack API error: {posted.error or posted.kind} (posting the card)")
    if job is not None:
        job.meta[META_CARD_TS] = posted.ts
        job.save_meta()
    return posted


def pictures(live: RunReport, now: datetime) -> list[Picture]:
    """The status's pictures (`status_pictures`): the loss curve with its time panel up to ``now``
    and, with `--run-profile`, the per-GPU strip, where a GPU the run's pods hold but that sent no
    sample is drawn missing (the Node objects read for layer 6 give each node's GPU count)."""
    if live.profile is None:
        return status_pictures(live.diagnosis, now)
    return status_pictures(live.diagnosis, now, utilization=live.profile.per_gpu_utilization,
                           held=gpus_held(live.linked.pods), capacity=gpu_capacity(live.objects))


_UNSAFE = re.compile(r"[<>&\x00-\x1f]")


def attach_charts(services: Services, channel: str, thread_ts: str, card_ts: str, live: RunReport,
                  now: datetime) -> int:
    """After the card is posted: draw each picture, upload it into the card's thread (files upload
    v2), then edit the card once to link them (the permalink from the upload's answer). A picture
    that could not be attached — or not drawn: a chart's error never turns the posted card into an
    error card (SPEC §11) — says so on the card and in the thread; values a chart left out are
    named in the thread. The card itself never waited. Returns how many were uploaded."""
    run = live.diagnosis.run.name
    links: list[ChartLink] = []
    notes: list[str] = []
    for picture in pictures(live, now):
        what, filename = picture.what, picture.filename
        try:
            png = picture.draw()
        except Exception as exc:  # noqa: BLE001 - any drawing error is the chart's, not the card's
            log.warning("status: could not draw the %s of %s: %r", what, run, exc)
            reason = _UNSAFE.sub("", type(exc).__name__)[:60]
            links.append(ChartLink(what=what, failed=f"it could not be drawn: {reason}"))
            notes.append(f"The {what} could not be drawn ({reason}); the card above stands.")
            continue
        notes.extend(picture.left_out_notes(drawn=png is not None))
        if png is None:
            continue
        where = services.surface.upload_image(channel, thread_ts, filename, png, f"{run}: {what}")
        if isinstance(where, Failed):
            log.warning("status: could not attach the %s of %s: %s", what, run, where.error)
            links.append(ChartLink(what=what, failed=_UNSAFE.sub("", where.error or where.kind)[:120]))
        elif where.startswith("https://"):
            links.append(ChartLink(what=what, permalink=where))
        else:
            links.append(ChartLink(what=what, filename=filename))
    for note in notes:  # our own words and numbers: nothing to escape
        sent = services.surface.post(channel, note, thread_ts=thread_ts)
        if isinstance(sent, Failed):
            log.warning("status: could not say in the thread of %s: %s (%s)", run, note, sent.error)
    if not links:
        return 0
    link_charts(services, channel, card_ts, ChartsSlot(links=tuple(links)), now=services.clock.now())
    return sum(1 for link in links if not link.failed)


CHART_LINK_RESERVE_SECONDS = 60.0
LINK_CHARTS_JOB = "workers.jobs.link_charts_job"


def link_charts(services: Services, channel: str, card_ts: str, slot: ChartsSlot, *, now: datetime,
                reserved: bool = False) -> str:
    """Edit the card to link its pictures — without holding the worker for Slack's budget.

    `chat.update` is tier 3 (about 50 a minute per workspace, `TAUBOT_SLACK_UPDATES_PER_MINUTE`):
    once other cards have used the budget, this edit waits about 1.2 s for its slot, and waiting in
    the job made every next command wait too (bench_warm: ~1.2 s command → card at any RTT). So
    the edit reserves the budget's next slot and runs then as a job of its own (``reserved``)."""
    try:
        edit = services.cards.update_if_changed(
            channel, card_ts, lambda stored: stored.with_slot(slot), max_wait=0,
            reserve_within=0.0 if reserved else CHART_LINK_RESERVE_SECONDS, reserved=reserved)
    except RuntimeError as exc:  # the card stays as posted; the pictures are in the thread anyway
        log.warning("status: could not link the pictures on card %s: %s", card_ts, exc)
        return "failed"
    if edit.outcome == "deferred" and not reserved and edit.slot_reserved:
        wait = edit.retry_after or 0.0
        services.queue.enqueue_in(
            wait, LINK_CHARTS_JOB, channel, card_ts, slot.model_dump(mode="json"),
            job_id=f"charts-{channel}-{card_ts.replace('.', '-')}",
            timeout=services.settings.job_timeout_seconds,
            exact=now + timedelta(seconds=wait), description=f"link the pictures on card {card_ts}")
        return "scheduled"
    if not edit.shown:
        log.info("status: card %s was not edited with its pictures (%s)", card_ts, edit.outcome)
    return edit.outcome


@dataclass
class StatusOutcome:
    """What a status job produced; the job's result, for operators' inspection."""

    parent_ts: str | None
    card_ts: str | None
    first_incomplete: str | None
    layer: int
    requests: int


@dataclass(frozen=True)
class CardReads:
    """What a card is built from: the run's answer and the requester's two access reviews, all
    made as the requester through one impersonated client (`diagnose_for_card`)."""

    live: RunReport
    operator_hints: bool = False  # may see the operator-only kubectl hints
    may_validate: bool = False  # may create the node-validation pods (asked for a layer-6 answer only)


async def _no() -> bool:
    return False


async def diagnose_for_card(services: Services, request: StatusRequest, now: datetime, plan: ReadPlan, *,
                            validation: bool = False, workspace: str | None = None) -> CardReads:
    """The live diagnosis and, beside it, the operator-hints review — and, for a layer-6 answer on a
    card that can carry the button (``validation``), the node-validation review — in the workspace
    resolved once, through one impersonated client session. The reviews keep their own request
    count: the card's figure is the status's reads. ``workspace``: the one a watch resolved when it
    started (its probe resolves the same), else the command's or the channel's."""
    settings = services.settings
    mlflow = MlflowAuth.from_settings(settings)
    resolution = services.registry.resolve(workspace=workspace or request.command.workspace,
                                           channel=request.channel)
    if not isinstance(resolution, Resolved):
        return CardReads(await investigate(resolution, kube=services.kube, identity=request.identity, now=now,
                                           plan=plan, seen=services.redis, mlflow_auth=mlflow))
    ws = resolution.descriptor
    async with user_session(services.kube, ws, request.identity, plan.timeout) as reader:
        reviews = KubeReader(reader.api_client, plan.timeout)
        hints = may_see_operator_hints(reviews, request.identity, scope=ws.name, cache=services.redis) \
            if plan.operator_hints else _no()
        live, allowed = await asyncio.gather(
            investigate_in(reader, ws, now=now, plan=plan, seen=services.redis, mlflow_auth=mlflow), hints,
            return_exceptions=True)
        if isinstance(live, BaseException):
            raise live
        if isinstance(allowed, BaseException):
            log.warning("operator access review raised, hiding hints: %r", allowed)
            allowed = False
        may_validate = validation and wants_validation(live) and \
            await may_create_validation_pods(reviews, settings.validation_namespace)
    return CardReads(live, bool(allowed), may_validate)


def run_status(services: Services, request: StatusRequest, *, job: Job | None,
               now: datetime) -> StatusOutcome:
    """Post the parent, diagnose under the user's identity, post the card in the thread."""
    parent_ts = ensure_parent(services, request, job)
    plan = status_plan(services.settings, request.command)
    reads = services.run(diagnose_for_card(services, request, now, plan, validation=parent_ts is not None))
    live, diagnosis = reads.live, reads.live.diagnosis
    offer = offer_escalation(services, live, channel=request.channel, thread_ts=parent_ts,
                             requested_by=request.user, now=now)
    validate = offer_node_validation(services, live, may_create=reads.may_validate, channel=request.channel,
                                     thread_ts=parent_ts, now=now)
    context = build_phase_card(
        diagnosis, workspace=live.workspace, operator_hints_allowed=reads.operator_hints,
        run_profile=request.command.run_profile, diagnosed_at=now, requests=live.requests,
        profile=live.profile, escalate_button=offer.button if offer else None,
        validate_button=validate.button if validate else None,
        verdict=live.terminal if live.layer_report is None else None,
    )
    gap = handoff_gap(services, live) if offer is None else None
    if gap is not None:
        context = context.with_note_first(gap)
    posted = deliver(services, request, parent_ts, context, job)
    if offer is not None and posted is not None:
        offer.attach(posted.ts)
    if validate is not None and posted is not None:
        validate.attach(posted.ts)
    if parent_ts is not None and posted is not None:  # the card first; its pictures follow it
        attach_charts(services, request.channel, parent_ts, posted.ts, live, now)
    return StatusOutcome(parent_ts, posted.ts if posted else None, diagnosis.first_incomplete,
                         diagnosis.layer, live.requests)


async def check_workspace(services: Services, request: WorkspaceRequest) -> Any:
    """Layer 1 or layer 2, live, as the user."""
    timeout = services.settings.kube_request_timeout_seconds
    command = request.command
    if isinstance(command, WorkspaceStatusCommand):
        return await workspace_status(services.registry, command.workspace, identity=request.identity,
                                      kube=services.kube,
                                      timeout=timeout)
    return await check_connection(services.registry, workspace=command.workspace, channel=request.channel,
                                  kube=services.kube,
                                  identity=request.identity, timeout=timeout)


def run_workspace(services: Services, request: WorkspaceRequest, *, job: Job | None) -> dict[str, Any]:
    """Post the parent, run the layer check, post its card in the thread."""
    parent_ts = ensure_parent(services, request, job)
    report = services.run(check_workspace(services, request))
    context = build_workspace_card(report, command=request.display())
    posted = deliver(services, request, parent_ts, context, job)
    return {"parent_ts": parent_ts, "card_ts": posted.ts if posted else None, "ok": report.ok,
            "layer": report.layer}


__all__ = ["CardReads", "SlackUnavailable", "StatusOutcome", "deliver", "diagnose_for_card", "ensure_parent",
           "parent_text", "recorded_parent", "run_status", "run_workspace"]
