"""The Slack front end: a Bolt `App` whose listeners ack, hand over and answer.

The same `App` serves HTTP mode (`taubot serve http`, production) and Socket
Mode (`taubot serve socket`, development); only the transport differs, and
over HTTP a signed `/tau` is acked beside Bolt's dispatch (`bot/slash.py`)
by the same `TauCommands` Bolt's `/tau` listener calls in Socket Mode.
Listeners hold no business logic (CONVENTIONS, bolt-python): `/tau` goes to
`bot/commands.py`, presses to `bot/buttons.py` and `bot/watch_buttons.py`,
and work is queued by name through `workers.plumbing.jobqueue` — this module imports the
contracts and the queue, never worker code or kubernetes_asyncio.
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.backoff import NoBackoff
from redis.retry import Retry as RedisRetry
from rq import Queue
from slack_bolt import Ack, App, BoltContext, Respond
from slack_sdk import WebClient

from bot.after_ack import AfterAck
from bot.buttons import DetailsButton, EscalateButton, MuteButton, ValidateNodesButton
from bot.commands import ARRIVED, DEADLINE, LISTENER_THREADS, NoMapping, Resolver, TauCommands, queue_enqueuer
from bot.identity import IdentityResolver, load_identity_map
from bot.presser import CONTEXT_KEY as PRESSER
from bot.presser import identity_middleware
from bot.runs_buttons import register_runs_listeners
from bot.slash import SlashCommands
from bot.watch_buttons import StopWatchingButton
from workers.config.settings import Settings
from workers.contracts.ids import (
    DETAILS_ACTION,
    ESCALATE_ACTION,
    MUTE_ACTION,
    STOP_WATCHING_ACTION,
    VALIDATE_NODES_ACTION,
)
from workers.plumbing.jobqueue import RqQueue
from workers.surfaces.slack_client import make_web_client

log = logging.getLogger(__name__)

IDENTITY_SLACK_TIMEOUT_SECONDS = 2
REDIS_CONNECT_TIMEOUT_SECONDS = 0.5
REDIS_SOCKET_TIMEOUT_SECONDS = 1.0
SLASH_COMMAND = "/tau"


def redis_for_front_end(url: str) -> Redis:
    """A Redis client that fails fast: the ack deadline cannot wait for reconnect backoff."""
    return Redis.from_url(
        url,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_SECONDS,
        socket_timeout=REDIS_SOCKET_TIMEOUT_SECONDS,
        retry=RedisRetry(NoBackoff(), 1),
    )


def build_resolver(settings: Settings, client: WebClient, conn: Redis) -> Resolver:
    """`IdentityResolver` from the identity file; a bad file raises `IdentityConfigError` now,
    at start-up, rather than refusing every user later."""
    if settings.identity_file is None:
        return NoMapping()
    return IdentityResolver(load_identity_map(settings.identity_file), client, conn)


@dataclass(frozen=True)
class FrontEnd:
    """What `taubot serve` serves: Bolt's app (every request Slack sends, and `/tau` in Socket
    Mode), over HTTP the lean path of a signed `/tau` (None in Socket Mode: no signature), and the
    pool where presses and events do their work once acked (`bot/after_ack.py`)."""

    bolt: App
    slash: SlashCommands | None
    after_ack: AfterAck


def build_app(
    settings: Settings,
    *,
    client: WebClient | None = None,
    redis: Redis | None = None,
    queue: Queue | None = None,
    resolver: Resolver | None = None,
    socket_mode: bool = False,
    token_verification: bool = True,
    process_before_response: bool = True,
) -> FrontEnd:
    """The Bolt app with taubot's listeners, and the HTTP path of `/tau` beside it.

    ``process_before_response`` (Bolt's option) answers the HTTP request with the listener's
    return, with no polling for its ack; a press's listener acks and hands its work to the
    FrontEnd's `after_ack` pool, whose `wait_idle` tells a test when it has run.

    ``client``/``redis``/``queue``/``resolver`` default to ones built from
    ``settings``. ``socket_mode`` turns off request signature checks (Socket
    Mode has no HTTP requests to sign); ``token_verification`` is Bolt's
    `auth.test` at construction.
    """
    identity_client = client or make_web_client(
        settings, timeout=IDENTITY_SLACK_TIMEOUT_SECONDS, rate_limit_retries=0
    )
    conn = redis if redis is not None else redis_for_front_end(settings.redis_url)
    jobs = RqQueue(queue or Queue(settings.queue_name, connection=conn))
    commands = TauCommands(
        resolver or build_resolver(settings, identity_client, conn),
        queue_enqueuer(jobs, settings),
    )
    secret = settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else None
    web_client = client or make_web_client(settings)
    app = App(
        process_before_response=process_before_response,
        client=web_client,
        signing_secret=secret,
        request_verification_enabled=not socket_mode,
        token_verification_enabled=token_verification,
        listener_executor=ThreadPoolExecutor(max_workers=LISTENER_THREADS, thread_name_prefix="bolt"),
    )
    after_ack = AfterAck()
    # before the catch-all button listener
    register_runs_listeners(app, settings, commands.resolver, jobs, after_ack)
    register_listeners(app, commands, after_ack, EscalateButton(settings, commands.resolver, jobs),
                       StopWatchingButton(commands.resolver, jobs),
                       MuteButton(settings, commands.resolver, jobs),
                       ValidateNodesButton(settings, commands.resolver, jobs),
                       DetailsButton(settings, commands.resolver, jobs))
    slash = None if socket_mode or not secret else SlashCommands(commands, secret, web_client, SLASH_COMMAND)
    return FrontEnd(bolt=app, slash=slash, after_ack=after_ack)


def register_listeners(app: App, commands: TauCommands, after_ack: AfterAck, escalate: EscalateButton,
                       stop: StopWatchingButton, mute: MuteButton, validate: ValidateNodesButton,
                       details: DetailsButton) -> None:
    """Thin listeners: ack, hand the payload over (a press's work to ``after_ack``: Slack reads
    nothing in a press's answer), answer with what comes back. The button listeners come before
    the catch-all: Bolt runs the first listener that matches. Who is asking is resolved in one
    place: the identity middleware's `Presser` (`bot/presser.py`)."""
    app.use(identity_middleware(commands.resolver))

    @app.command(SLASH_COMMAND)
    def on_tau(ack: Ack, command: dict[str, Any], respond: Respond, context: BoltContext) -> None:
        ack(**commands.handle(command, respond, arrived=context.get(ARRIVED),
                             presser=context.get(PRESSER), deadline=context.get(DEADLINE)).ack_kwargs())

    @app.action(ESCALATE_ACTION)
    def on_escalate(ack: Ack, body: dict[str, Any], respond: Respond, context: BoltContext) -> None:
        ack()
        after_ack.submit(escalate.handle, body, respond, context.get(PRESSER))

    @app.action(STOP_WATCHING_ACTION)
    def on_stop_watching(ack: Ack, body: dict[str, Any], respond: Respond, context: BoltContext) -> None:
        ack()
        after_ack.submit(stop.handle, body, respond, context.get(PRESSER))

    @app.action(MUTE_ACTION)
    def on_mute(ack: Ack, body: dict[str, Any], respond: Respond, context: BoltContext) -> None:
        ack()
        after_ack.submit(mute.handle, body, respond, context.get(PRESSER))

    @app.action(VALIDATE_NODES_ACTION)
    def on_validate_nodes(ack: Ack, body: dict[str, Any], respond: Respond, context: BoltContext) -> None:
        ack()
        after_ack.submit(validate.handle, body, respond, context.get(PRESSER))

    @app.action(DETAILS_ACTION)
    def on_details(ack: Ack, body: dict[str, Any], respond: Respond, context: BoltContext) -> None:
        ack()
        after_ack.submit(details.handle, body, respond, context.get(PRESSER))

    @app.action(re.compile(".*"))
    def on_button(ack: Ack, body: dict[str, Any]) -> None:
        """Any other button (an old card's): acked so Slack shows no error."""
        ack()
        actions = body.get("actions") or [{}]
        log.info("button %s pressed by %s", actions[0].get("action_id"), (body.get("user") or {}).get("id"))


__all__ = ["FrontEnd", "build_app", "build_resolver", "redis_for_front_end", "register_listeners"]
