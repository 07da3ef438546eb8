"""RQ job entry points for `/tau` commands: the worker half of SPEC §1's shape.

Thin on purpose. A job entry point reads the settings, builds its clients,
and starts the one event loop of the job (`asyncio.run`; CONVENTIONS: no
other code starts a loop) around the diagnosis, then renders and posts.
Everything it calls takes its clients and `now` as parameters.

Why the thread is anchored in `job.meta`: a job may run more than once
(`Retry`). The parent message is posted once and its `ts` saved in the job's
meta before anything that can fail; a retry finds it and replies in the
same thread instead of posting a second parent, and the failure callback
knows which thread to put the error card in.

Why a failure callback and not only `try/except` in the job: the callback
also runs for failures the job cannot catch (the job timeout, an error
while importing or deserialising), so a command is never silently lost.
rq 3 calls it on every failed attempt, including those it will retry; it
posts only when no retry is left.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field
from rq import Callback, Queue, Retry
from rq.job import Job
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from bot.grammar import StatusCommand, WorkspaceConnectionCommand, WorkspaceStatusCommand
from workers.kube.client import Identity
from workers.render.cards import (
    MAX_BLOCKS,
    RenderedCard,
    build_error_card,
    build_phase_card,
    build_workspace_card,
    render_error_card,
    render_phase_card,
    render_workspace_card,
)
from workers.render.mrkdwn import code, truncate
from workers.settings import Settings, load_settings
from workers.slack_client import make_web_client
from workers.workspaces import Registry, Resolved, load_descriptors

log = logging.getLogger(__name__)

RETRY_INTERVALS = [2, 5]
RESULT_TTL_SECONDS = 3600
FAILURE_TTL_SECONDS = 7 * 24 * 3600
META_PARENT_TS = "parent_ts"
META_CARD_TS = "card_ts"
CANNOT_POST_HERE = frozenset({"not_in_channel", "channel_not_found", "is_archived", "restricted_action"})
PRIVATE_NOTE = (
    "Only you can see this: taubot cannot post in this channel. Invite it (`/invite @taubot`) "
    "to get answers in a thread everyone can follow."
)


class CommandRequest(BaseModel):
    """Who asked what, where: everything a job needs from the slash command.

    Travels through Redis as JSON-able data (no secrets: the identity is the
    user's Kubernetes name and groups, which the cluster's audit log records
    anyway).
    """

    model_config = ConfigDict(frozen=True)

    identity: Identity
    channel: str = Field(pattern=r"^[CGD][A-Z0-9]{2,}$")
    user: str = Field(pattern=r"^[UW][A-Z0-9]{2,}$", description="Mentioned in the parent message")
    response_url: str | None = None
    requested_at: datetime


class StatusRequest(CommandRequest):
    command: StatusCommand


class WorkspaceRequest(CommandRequest):
    command: WorkspaceConnectionCommand | WorkspaceStatusCommand


@dataclass
class Services:
    """The clients a job uses, built once per job from the settings."""

    settings: Settings
    slack: WebClient
    redis: redis.Redis
    registry: Registry

    @classmethod
    def from_settings(cls, settings: Settings) -> Services:
        """Descriptors are re-read per job: a ConfigMap update must not need a worker restart."""
        return cls(
            settings=settings,
            slack=make_web_client(settings),
            redis=redis.Redis.from_url(settings.redis_url),
            registry=load_descriptors(settings.workspaces_dir),
        )


# ----------------------------------------------------------------- enqueue


def _enqueue(
    queue: Queue,
    func: Any,
    request: CommandRequest,
    *,
    job_timeout: int,
    retries: int,
) -> Job:
    meta = {
        "channel": request.channel,
        "user": request.user,
        "command": request.command.display(),  # type: ignore[attr-defined]
        "response_url": request.response_url,
        "max_retries": retries,
    }
    return queue.enqueue(
        func,
        request.model_dump(mode="json"),
        job_id=f"tau-{uuid.uuid4().hex}",
        job_timeout=job_timeout,
        retry=Retry(max=retries, interval=RETRY_INTERVALS) if retries > 0 else None,
        on_failure=Callback(on_command_failure),
        result_ttl=RESULT_TTL_SECONDS,
        failure_ttl=FAILURE_TTL_SECONDS,
        meta=meta,
        description=meta["command"],
    )


def _enqueue_command(
    queue: Queue,
    job_fn: Callable[[dict[str, Any]], dict[str, Any]],
    request_cls: type[CommandRequest],
    command: Any,
    identity: Identity,
    channel: str,
    user: str,
    response_url: str | None,
    *,
    job_timeout: int,
    retries: int,
    requested_at: datetime | None,
) -> Job:
    request = request_cls(
        command=command,
        identity=identity,
        channel=channel,
        user=user,
        response_url=response_url,
        requested_at=requested_at or datetime.now(UTC),
    )
    return _enqueue(queue, job_fn, request, job_timeout=job_timeout, retries=retries)


def enqueue_status(
    queue: Queue,
    command: StatusCommand,
    identity: Identity,
    channel: str,
    user: str,
    response_url: str | None,
    *,
    job_timeout: int = 120,
    retries: int = 2,
    requested_at: datetime | None = None,
) -> Job:
    """Queue a `/tau status` diagnosis; raises redis errors for the caller to report."""
    return _enqueue_command(queue, status_job, StatusRequest, command, identity, channel, user,
                            response_url, job_timeout=job_timeout, retries=retries,
                            requested_at=requested_at)


def enqueue_workspace(
    queue: Queue,
    command: WorkspaceConnectionCommand | WorkspaceStatusCommand,
    identity: Identity,
    channel: str,
    user: str,
    response_url: str | None,
    *,
    job_timeout: int = 120,
    retries: int = 2,
    requested_at: datetime | None = None,
) -> Job:
    """Queue a `/tau workspace connection|status` check."""
    return _enqueue_command(queue, workspace_job, WorkspaceRequest, command, identity, channel, user,
                            response_url, job_timeout=job_timeout, retries=retries,
                            requested_at=requested_at)


# ------------------------------------------------------------ the threads


def parent_text(request: CommandRequest) -> str:
    """The channel message a card hangs under. The user id is Slack's (from the signed
    request) and the command is our own rendering of validated names; still coded."""
    command = code(request.command.display(), 400)  # type: ignore[attr-defined]
    return f"🔎 <@{request.user}> asked {command} — the answer is in the thread."


def ensure_parent(slack: WebClient, request: CommandRequest, job: Job | None) -> str | None:
    """The parent message's ts: posted now, or found in the job's meta on a retry.

    None when Slack says the bot cannot post in this channel (not invited,
    archived, a DM the bot is not part of): retrying cannot change that, so
    the answer goes to the user privately instead (`deliver`).
    """
    if job is not None:
        existing = job.get_meta(refresh=True).get(META_PARENT_TS)
        if existing:
            return str(existing)
    try:
        response = slack.chat_postMessage(
            channel=request.channel,
            text=parent_text(request),
            unfurl_links=False,
            unfurl_media=False,
        )
    except SlackApiError as exc:
        error = exc.response.get("error") if exc.response is not None else None
        if error in CANNOT_POST_HERE and request.response_url:
            log.info("cannot post in %s (%s): answering privately", request.channel, error)
            return None
        raise
    ts = str(response["ts"])
    if job is not None:
        job.meta[META_PARENT_TS] = ts
        job.save_meta()
    return ts


def _post_card(slack: WebClient, channel: str, thread_ts: str | None, text: str,
               blocks: list[dict[str, Any]]) -> str:
    response = slack.chat_postMessage(
        channel=channel,
        thread_ts=thread_ts,
        text=text,
        blocks=blocks,
        unfurl_links=False,
        unfurl_media=False,
    )
    return str(response["ts"])


def deliver(slack: WebClient, request: CommandRequest, parent_ts: str | None, card: RenderedCard,
            job: Job | None) -> str:
    """Post ``card`` in the parent's thread; without a parent, privately to the requester.

    Returns the card's ts, or ``"ephemeral"`` for a private answer (which has none).
    """
    if parent_ts is None:
        note = {"type": "context", "elements": [{"type": "mrkdwn", "text": PRIVATE_NOTE}]}
        blocks = [*card.blocks, note] if len(card.blocks) < MAX_BLOCKS else card.blocks
        WebhookClient(str(request.response_url), timeout=10).send(
            text=card.text, blocks=blocks, response_type="ephemeral", replace_original=False
        )
        return "ephemeral"
    card_ts = _post_card(slack, request.channel, parent_ts, card.text, card.blocks)
    if job is not None:
        job.meta[META_CARD_TS] = card_ts
        job.save_meta()
    return card_ts


# ------------------------------------------------------------ /tau status


@dataclass
class StatusOutcome:
    """What a status job produced; returned as the job's result for operators' inspection."""

    parent_ts: str | None
    card_ts: str
    first_incomplete: str | None
    layer: int
    requests: int


async def diagnose_for_card(
    request: StatusRequest, services: Services, now: datetime
) -> tuple[Any, bool]:
    """The live diagnosis and, concurrently, the operator access review, both as the user."""
    from workers.diagnosis.live import diagnose_live  # pulls in the Kubernetes client
    from workers.operator_access import may_see_operator_hints

    command = request.command
    settings = services.settings
    live_call = diagnose_live(
        services.registry,
        run=command.run,
        identity=request.identity,
        now=now,
        workspace=command.workspace,
        channel=request.channel,
        timeout=settings.kube_request_timeout_seconds,
        profile=command.run_profile,
    )
    resolution = services.registry.resolve(workspace=command.workspace, channel=request.channel)
    if not isinstance(resolution, Resolved):
        return await live_call, False
    review = may_see_operator_hints(
        resolution.descriptor.cluster_target(),
        request.identity,
        scope=resolution.descriptor.name,
        cache=services.redis,
        timeout=settings.kube_request_timeout_seconds,
    )
    live, allowed = await asyncio.gather(live_call, review, return_exceptions=True)
    if isinstance(live, BaseException):
        raise live
    if isinstance(allowed, BaseException):
        log.warning("operator access review raised, hiding hints: %r", allowed)
        allowed = False
    return live, bool(allowed)


def run_status(request: StatusRequest, services: Services, *, job: Job | None,
               now: datetime) -> StatusOutcome:
    """Post the parent, diagnose under the user's identity, post the card in the thread."""
    if request.command.watch:  # issue 5: the same card, then kept up to date (or a join)
        from workers.watch import start_watch

        return start_watch(request, services, job=job, now=now)
    parent_ts = ensure_parent(services.slack, request, job)
    live, operator_ok = asyncio.run(diagnose_for_card(request, services, now))
    diagnosis = live.diagnosis
    from workers.escalation import offer_escalation  # issue 7: the card's Escalate button

    offer = offer_escalation(services, live, channel=request.channel, thread_ts=parent_ts,
                             requested_by=request.user, now=now)
    context = build_phase_card(
        diagnosis,
        workspace=live.workspace,
        operator_hints_allowed=operator_ok,
        watch=request.command.watch,
        run_profile=request.command.run_profile,
        diagnosed_at=now,
        requests=live.requests,
        profile=live.profile,
        escalate_button=offer.button if offer else None,
    )
    card = render_phase_card(context)
    card_ts = deliver(services.slack, request, parent_ts, card, job)
    if offer is not None:
        offer.attach(card_ts)
    return StatusOutcome(parent_ts, card_ts, diagnosis.first_incomplete, diagnosis.layer, live.requests)


def status_job(request: dict[str, Any]) -> dict[str, Any]:
    """RQ entry point of `/tau status`."""
    from rq import get_current_job

    services = Services.from_settings(load_settings())
    outcome = run_status(
        StatusRequest.model_validate(request), services, job=get_current_job(), now=datetime.now(UTC)
    )
    return outcome.__dict__


# --------------------------------------------------------- /tau workspace


async def check_workspace(request: WorkspaceRequest, services: Services) -> Any:
    """Layer 1 or layer 2, live, as the user."""
    from workers.diagnosis.workspace_checks import check_connection, workspace_status

    timeout = services.settings.kube_request_timeout_seconds
    command = request.command
    if isinstance(command, WorkspaceStatusCommand):
        return await workspace_status(
            services.registry, command.workspace, identity=request.identity, timeout=timeout
        )
    return await check_connection(
        services.registry,
        workspace=command.workspace,
        channel=request.channel,
        identity=request.identity,
        timeout=timeout,
    )


def run_workspace(request: WorkspaceRequest, services: Services, *, job: Job | None) -> dict[str, Any]:
    """Post the parent, run the layer check, post its card in the thread."""
    parent_ts = ensure_parent(services.slack, request, job)
    report = asyncio.run(check_workspace(request, services))
    card = render_workspace_card(build_workspace_card(report, command=request.command.display()))
    card_ts = deliver(services.slack, request, parent_ts, card, job)
    return {"parent_ts": parent_ts, "card_ts": card_ts, "ok": report.ok, "layer": report.layer}


def workspace_job(request: dict[str, Any]) -> dict[str, Any]:
    """RQ entry point of `/tau workspace connection|status`."""
    from rq import get_current_job

    services = Services.from_settings(load_settings())
    return run_workspace(WorkspaceRequest.model_validate(request), services, job=get_current_job())


# ----------------------------------------------------------------- failure


def describe_failure(exc_type: type[BaseException] | None, exc: BaseException | None) -> str:
    """One line for the error card: what went wrong, without a traceback."""
    from rq.timeouts import JobTimeoutException

    if isinstance(exc, JobTimeoutException):
        return "the diagnosis took longer than the job timeout"
    if isinstance(exc, SlackApiError):
        error = exc.response.get("error") if exc.response is not None else None
        return f"Slack API error: {error or exc}"
    name = exc_type.__name__ if exc_type is not None else "error"
    text = " ".join(str(exc).split()) if exc is not None else ""
    return truncate(f"{name}: {text}" if text else name, 500)


def post_failure(slack: WebClient, job: Job, error: str) -> str:
    """Put the error card where the user will look; returns where it went.

    The thread if the parent was posted, else the channel; if Slack refuses
    both (the bot is not in the channel, or Slack is what failed), the
    command's ``response_url`` as an ephemeral reply is the last resort.
    """
    meta = job.get_meta(refresh=True)
    channel = meta.get("channel")
    thread_ts = meta.get(META_PARENT_TS)
    attempts = int(meta.get("max_retries") or 0) + 1
    card = render_error_card(
        build_error_card(command=str(meta.get("command") or "/tau"), error=error,
                         job_id=job.id, attempts=attempts)
    )
    if channel:
        try:
            _post_card(slack, str(channel), thread_ts, card.text, card.blocks)
            return "thread" if thread_ts else "channel"
        except Exception as exc:  # noqa: BLE001 - fall through to the response_url
            log.warning("job %s: could not post the error card: %s", job.id, exc)
    response_url = meta.get("response_url")
    if response_url:
        WebhookClient(str(response_url), timeout=10).send(
            text=card.text, blocks=card.blocks, response_type="ephemeral", replace_original=False
        )
        return "response_url"
    return "nowhere"


def on_command_failure(job: Job, connection: redis.Redis, exc_type: type[BaseException] | None,
                       exc_value: BaseException | None, traceback: TracebackType | None) -> None:
    """rq failure callback: post an error card once the last attempt failed. Never raises —
    rq would record the callback's error instead of the job's."""
    try:
        if job.should_retry:
            log.info("job %s failed, %s retries left: %s", job.id, job.retries_left, exc_value)
            return
        slack = make_web_client(load_settings())
        where = post_failure(slack, job, describe_failure(exc_type, exc_value))
        log.warning("job %s failed for good (%s); error card posted to %s", job.id, exc_value, where)
    except Exception:  # noqa: BLE001 - see docstring
        log.exception("job %s: failure callback could not tell the user", job.id)


__all__ = [
    "CommandRequest",
    "Services",
    "StatusRequest",
    "WorkspaceRequest",
    "enqueue_status",
    "enqueue_workspace",
    "on_command_failure",
    "run_status",
    "run_workspace",
    "status_job",
    "workspace_job",
]
