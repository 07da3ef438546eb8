"""The Slack front end: a Bolt `App` whose listeners parse, authorize, ack and enqueue.

The same `App` serves HTTP mode (`taubot serve http`, production) and Socket
Mode (`taubot serve socket`, development); only the transport differs.

Why the ack has a deadline of its own: Slack shows the user an error when a
slash command is not answered within 3 seconds, and two of the steps before
the answer can stall — identity resolution may ask Slack (`users.info`,
`usergroups.list`) and enqueueing talks to Redis. So parsing happens inline
(pure, fast) and "authorize + enqueue" runs on a small pool with
`ACK_BUDGET_SECONDS`; when it is slower than that, the user is acked with a
"still working" note and the eventual refusal or error arrives through the
command's `response_url`. Every outcome is an ephemeral message; no
exception escapes a listener, because an escaped exception is a silent
"dispatch_failed" for the user.

Listeners hold no business logic (CONVENTIONS, bolt-python): the reply texts
live in `TauCommands`, the work in `workers/jobs.py`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Protocol

from redis import Redis, RedisError
from redis.backoff import NoBackoff
from redis.retry import Retry as RedisRetry
from rq import Queue
from slack_bolt import Ack, App, Respond
from slack_sdk import WebClient

from bot.grammar import (
    Command,
    HelpCommand,
    StatusCommand,
    UsageError,
    WorkspaceConnectionCommand,
    WorkspaceStatusCommand,
    help_lines,
    parse,
)
from bot.identity import ASK_OPERATOR, IdentityResolver, Unmapped, load_identity_map
from workers.kube.client import Identity
from workers.render.mrkdwn import code, escape
from workers.settings import Settings
from workers.slack_client import make_web_client

log = logging.getLogger(__name__)

ACK_BUDGET_SECONDS = 2.0
IDENTITY_SLACK_TIMEOUT_SECONDS = 2
REDIS_CONNECT_TIMEOUT_SECONDS = 0.5
REDIS_SOCKET_TIMEOUT_SECONDS = 1.0
LISTENER_THREADS = 32
SLASH_COMMAND = "/tau"


class Resolver(Protocol):
    """What the front end needs from identity resolution (`IdentityResolver` has it)."""

    def resolve(self, slack_user_id: str) -> Identity | Unmapped: ...


class NoMapping:
    """Refuses everyone: used when no identity file is configured.

    taubot must never fall back to the bot's own permissions for a user, so
    a missing mapping means nobody is mapped, with a message saying so.
    """

    def resolve(self, slack_user_id: str) -> Identity | Unmapped:
        return Unmapped(
            slack_user_id=slack_user_id,
            reason="taubot has no identity mapping configured, so it cannot act as you in "
            "Kubernetes. " + ASK_OPERATOR,
            detail="TAUBOT_IDENTITY_FILE is not set",
        )


@dataclass(frozen=True)
class Reply:
    """An ephemeral answer to the invoking user; ``queued`` when a job now exists."""

    text: str
    queued: bool = False

    def ack_kwargs(self) -> dict[str, Any]:
        return {"text": self.text, "response_type": "ephemeral"}


def usage_reply(error: UsageError) -> Reply:
    """The mistake, then the usage of the command the user tried. The mistake quotes the
    user's own words, so it is escaped like any other untrusted text."""
    lines = [f"⚠️ {escape(str(error), 500)}", "", "*Usage*"]
    lines += [code(u, 300) for u in error.usage]
    lines.append("`/tau help` lists every command.")
    return Reply("\n".join(lines))


def help_reply() -> Reply:
    lines = ["*taubot* diagnoses TauGrid training runs, layer by layer. Commands:"]
    lines += [f"• {code(usage, 300)} — {description}" for usage, description in help_lines()]
    lines.append(
        "Answers are posted in a thread in this channel; Kubernetes is read as *you* "
        "(your mapped identity), so you see what your RBAC allows."
    )
    return Reply("\n".join(lines))


def queued_reply(command: Command) -> Reply:
    if isinstance(command, StatusCommand):
        where = f" in workspace {code(command.workspace, 80)}" if command.workspace else ""
        lines = [f"🔎 Diagnosing {code(command.run, 80)}{where}… the phase card will appear in a "
                 "thread in this channel."]
        if command.watch:
            lines.append("👀 `--watch`: the card then updates in place until the run settles; if this "
                         "run is already watched in this channel, you join that watch instead.")
        if command.run_profile:
            lines.append("`--run-profile` is not available yet: the card has no GPU telemetry.")
        return Reply("\n".join(lines), queued=True)
    return Reply(
        f"🔎 Checking {code(command.display(), 200)}… the answer will appear in a thread in this channel.",
        queued=True,
    )


QUEUE_DOWN = Reply(
    "⚠️ taubot could not queue your command: its job queue (Redis) is unreachable. Nothing was "
    "started. Try again in a minute; if it keeps failing, tell your TauGrid platform operator."
)
INTERNAL_ERROR = Reply(
    "⚠️ taubot hit an internal error and did not start your command. Try again; if it keeps "
    "failing, tell your TauGrid platform operator."
)
STILL_WORKING = Reply(
    "🔎 Working on it… if taubot cannot start your command you will hear why here.",
    queued=True,
)


class Enqueuer(Protocol):
    def __call__(self, command: Command, identity: Identity, payload: dict[str, Any]) -> object: ...


class TauCommands:
    """`/tau` handling behind the listener: parse → authorize → enqueue, under a deadline."""

    def __init__(
        self,
        resolver: Resolver,
        enqueue: Enqueuer,
        *,
        ack_budget: float = ACK_BUDGET_SECONDS,
        executor: ThreadPoolExecutor | None = None,
    ) -> None:
        self.resolver = resolver
        self.enqueue = enqueue
        self.ack_budget = ack_budget
        self.executor = executor or ThreadPoolExecutor(
            max_workers=LISTENER_THREADS, thread_name_prefix="tau-authorize"
        )

    def handle(self, payload: dict[str, Any], respond: Callable[..., Any]) -> Reply:
        """The ephemeral ack for one slash command; later news, if any, goes to ``respond``."""
        try:
            command = parse(str(payload.get("text") or ""))
        except UsageError as error:
            return usage_reply(error)
        if isinstance(command, HelpCommand):
            return help_reply()
        future = self.executor.submit(self.authorize_and_enqueue, command, payload)
        try:
            return future.result(timeout=self.ack_budget)
        except FutureTimeout:
            future.add_done_callback(lambda done: self._late(done, respond))
            return STILL_WORKING

    def authorize_and_enqueue(self, command: Command, payload: dict[str, Any]) -> Reply:
        """Never raises: every outcome is a reply the user can read."""
        user = str(payload.get("user_id") or "")
        try:
            identity = self.resolver.resolve(user)
        except Exception:  # noqa: BLE001 - the resolver promises values; be safe anyway
            log.exception("identity resolution raised for %s", user)
            return INTERNAL_ERROR
        if isinstance(identity, Unmapped):
            log.info("refused %s: %s", user, identity.detail)
            return Reply(f"⛔ {escape(identity.reason, 1000)}")
        try:
            self.enqueue(command, identity, payload)
        except RedisError as exc:
            log.warning("enqueue failed, Redis unreachable: %s", exc)
            return QUEUE_DOWN
        except Exception:  # noqa: BLE001 - never let the user wait for a dispatch_failed
            log.exception("enqueue failed")
            return INTERNAL_ERROR
        return queued_reply(command)

    def _late(self, done: Future[Reply], respond: Callable[..., Any]) -> None:
        """After a "still working" ack: tell the user only if nothing was started."""
        try:
            reply = done.result()
            if not reply.queued:
                respond(text=reply.text, response_type="ephemeral", replace_original=False)
        except Exception:  # noqa: BLE001 - a thread callback has nobody to raise to
            log.exception("could not deliver a late /tau reply")


def redis_for_front_end(url: str) -> Redis:
    """A Redis client that fails fast: the ack deadline cannot wait for reconnect backoff."""
    return Redis.from_url(
        url,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_SECONDS,
        socket_timeout=REDIS_SOCKET_TIMEOUT_SECONDS,
        retry=RedisRetry(NoBackoff(), 1),
    )


def queue_enqueuer(queue: Queue, settings: Settings) -> Enqueuer:
    """The production `Enqueuer`: one RQ job per command, with the settings' timeout and retries."""
    from workers.jobs import enqueue_status, enqueue_workspace

    def enqueue(command: Command, identity: Identity, payload: dict[str, Any]) -> object:
        common = {
            "identity": identity,
            "channel": str(payload.get("channel_id") or ""),
            "user": str(payload.get("user_id") or ""),
            "response_url": payload.get("response_url"),
            "job_timeout": settings.job_timeout_seconds,
            "retries": settings.job_retries,
        }
        if isinstance(command, StatusCommand):
            return enqueue_status(queue, command, **common)
        if isinstance(command, WorkspaceConnectionCommand | WorkspaceStatusCommand):
            return enqueue_workspace(queue, command, **common)
        raise TypeError(f"no job for {type(command).__name__}")

    return enqueue


def build_resolver(settings: Settings, client: WebClient, conn: Redis) -> Resolver:
    """`IdentityResolver` from the identity file; a bad file raises `IdentityConfigError` now,
    at start-up, rather than refusing every user later."""
    if settings.identity_file is None:
        return NoMapping()
    return IdentityResolver(load_identity_map(settings.identity_file), client, conn)


def build_app(
    settings: Settings,
    *,
    client: WebClient | None = None,
    redis: Redis | None = None,
    queue: Queue | None = None,
    resolver: Resolver | None = None,
    socket_mode: bool = False,
    token_verification: bool = True,
) -> App:
    """The Bolt app with taubot's listeners.

    ``client``/``redis``/``queue``/``resolver`` default to ones built from
    ``settings``. ``socket_mode`` turns off request signature checks (Socket
    Mode has no HTTP requests to sign); ``token_verification`` is Bolt's
    `auth.test` at construction.
    """
    identity_client = client or make_web_client(
        settings, timeout=IDENTITY_SLACK_TIMEOUT_SECONDS, rate_limit_retries=0
    )
    conn = redis if redis is not None else redis_for_front_end(settings.redis_url)
    queue = queue or Queue(settings.queue_name, connection=conn)
    commands = TauCommands(
        resolver or build_resolver(settings, identity_client, conn),
        queue_enqueuer(queue, settings),
    )
    secret = settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else None
    app = App(
        client=client or make_web_client(settings),
        signing_secret=secret,
        request_verification_enabled=not socket_mode,
        token_verification_enabled=token_verification,
        listener_executor=ThreadPoolExecutor(max_workers=LISTENER_THREADS, thread_name_prefix="bolt"),
    )
    from bot.buttons import EscalateButton, register_escalation  # issue 7; before the catch-all

    register_escalation(app, EscalateButton(settings, commands.resolver, queue))
    from bot.watch_buttons import StopWatchingButton, register_stop_watching  # issue 5; likewise

    register_stop_watching(app, StopWatchingButton(commands.resolver, queue))
    register_listeners(app, commands)
    return app


def register_listeners(app: App, commands: TauCommands) -> None:
    """Thin listeners: hand the payload over and ack with what comes back."""

    @app.command(SLASH_COMMAND)
    def on_tau(ack: Ack, command: dict[str, Any], respond: Respond) -> None:
        ack(**commands.handle(command, respond).ack_kwargs())

    @app.action(re.compile(".*"))
    def on_button(ack: Ack, body: dict[str, Any]) -> None:
        """Buttons (Stop watching, Escalate) arrive in later issues; acked so Slack shows no error."""
        ack()
        actions = body.get("actions") or [{}]
        log.info("button %s pressed by %s", actions[0].get("action_id"), (body.get("user") or {}).get("id"))


__all__ = [
    "ACK_BUDGET_SECONDS",
    "NoMapping",
    "Reply",
    "TauCommands",
    "build_app",
    "build_resolver",
    "help_reply",
    "queue_enqueuer",
    "redis_for_front_end",
    "register_listeners",
    "usage_reply",
]
