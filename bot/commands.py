"""`/tau` handling behind any front end: parse → authorize → enqueue, under the ack deadline.

Shared by the Bolt app (`bot/app.py`) and `taubot shell`: both hand a
payload (Slack's slash-command fields) to `TauCommands.handle` and show the
`Reply` it returns. Why the ack has a deadline of its own: Slack shows the
user an error when a slash command is not answered within 3 seconds, and two
steps before the answer can stall — identity resolution may ask Slack
(`users.info`, `usergroups.list`) and enqueueing talks to Redis. So parsing
happens inline (pure, fast) and "authorize + enqueue" runs within
`ACK_BUDGET_SECONDS`; when it is slower, the user gets a "still working" note
and the eventual refusal or error through `response_url`.

Who keeps the deadline: behind `taubot serve http` the HTTP server does (an
`AckDeadline` in the request context): the listener authorizes and enqueues on
its own dispatch thread, and should it still be at it when the budget is spent,
the server's event loop answers "still working" itself. Elsewhere (Socket Mode,
the shell) the work goes to a small pool and the listener waits for it at most
the budget. Why not the pool everywhere: each ack then crossed threads four
times instead of two, and under a burst on a busy machine every crossing is a
wait for the scheduler (bench/ack_latency.py, issue 36).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from redis import RedisError

from bot.identity import ASK_OPERATOR, Unmapped
from bot.presser import Presser
from workers.config.settings import Settings
from workers.contracts.commands import (
    USAGE,
    Command,
    HelpCommand,
    LogsCommand,
    NodesValidateCommand,
    RunsCommand,
    StatusCommand,
    TopologyValidateCommand,
    ValidateCommand,
    WorkspaceConnectionCommand,
    WorkspaceStatusCommand,
)
from workers.contracts.grammar import EXAMPLE_MANIFESTS, VERBS, CommandError, help_lines, help_topic, parse
from workers.contracts.identity import Identity
from workers.contracts.requests import (
    ClusterRequest,
    CommandRequest,
    LogsRequest,
    RunsRequest,
    StatusRequest,
    ValidateRequest,
    WorkspaceRequest,
)
from workers.outside.logsafe import audit
from workers.plumbing.jobqueue import JobQueue, enqueue_request
from workers.plumbing.metrics import ACK_SECONDS, COMMANDS
from workers.render.mrkdwn import code, code_block, escape

log = logging.getLogger(__name__)

ACK_BUDGET_SECONDS = 2.0
# The request context key the HTTP server sets to the request's arrival (`time.monotonic`).
ARRIVED = "taubot_arrived"
# …and the key of its `AckDeadline` for the command (the server keeps the deadline).
DEADLINE = "taubot_ack_deadline"
LISTENER_THREADS = 32


class AckDeadline:
    """When a command's ack is due, and who gives it: the listener (its reply) or, once the
    budget is spent, the HTTP server ("still working"). Each side claims under one lock, so
    exactly one of them answers Slack."""

    def __init__(self, at: float) -> None:
        self.at = at  # on `time.monotonic`
        self._lock = threading.Lock()
        self._armed = False  # the listener runs the command inline, held to `at`
        self._passed = False  # the server passed `at` with nothing armed: it waits for the listener
        self._owner: str | None = None

    def arm(self) -> bool:
        """The listener will authorize and enqueue inline; False when the server already passed
        the deadline unarmed (the listener then answers "still working" at once itself)."""
        with self._lock:
            if self._passed:
                return False
            self._armed = True
            return True

    def expire(self) -> bool:
        """The server at the deadline: True when it answers now ("still working")."""
        with self._lock:
            if self._armed and self._owner is None:
                self._owner = "server"
                return True
            self._passed = True
            return False

    def settle(self) -> bool:
        """The listener is done: True when its reply is the ack (the server did not answer)."""
        with self._lock:
            if self._owner is None:
                self._owner = "listener"
            return self._owner == "listener"


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


def usage_reply(error: CommandError) -> Reply:
    """The mistake (with "did you mean …" when a close word exists), then the usage of the
    command the user tried, or one line of the commands when that is unclear: a few lines,
    never every usage. The mistake quotes the user's own words, so it is escaped like any
    other untrusted text."""
    lines = [f"⚠️ {escape(str(error), 500)}"]
    if error.usage:
        lines += ["*Usage*", *(code(u, 300) for u in error.usage)]
        topic = error.verb if error.verb and error.verb != "help" else "<command>"
        lines.append(f"{code(f'/tau help {topic}', 120)} explains the flags, with an example.")
    else:
        lines.append("Commands: " + " ".join(code(v, 40) for v in VERBS)
                     + f" — {code('/tau help <command>', 60)} explains one.")
    return Reply("\n".join(lines))


def help_reply(topic: str | None = None) -> Reply:
    """`/tau help`: one line per command; `/tau help <topic>`: that command (or family) with
    what each flag does and an example (SPEC §7)."""
    if topic:
        lines: list[str] = []
        for usage, description, flags, examples in help_topic(topic):
            lines += [f"*{code(usage, 300)}*", description]
            lines += [f"• {code(flag, 60)} — {meaning}" for flag, meaning in flags]
            lines += [f"Example: {code(example, 300)}" for example in examples]
            verb = next(v for v, u in USAGE.items() if u == usage)
            if manifest := EXAMPLE_MANIFESTS.get(verb):
                lines.append(code_block(manifest.rstrip("\n"), 1500))  # a real fence, pasteable as it is
            lines.append("")
        return Reply("\n".join(lines).rstrip())
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
        return Reply("\n".join(lines), queued=True)
    if isinstance(command, ValidateCommand):
        return Reply("🧪 Checking your manifest and dry-running it on the API server as you (nothing is "
                     "created)… the answer will appear in a thread in this channel.", queued=True)
    if isinstance(command, RunsCommand):
        return Reply("🗂 Listing your runs… the list will appear in a thread in this channel.", queued=True)
    if isinstance(command, LogsCommand):
        return Reply(f"📜 Fetching the log of {code(command.run, 80)}… it will appear in a thread in this "
                     "channel.", queued=True)
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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.resolver = resolver
        self.enqueue = enqueue
        self.ack_budget = ack_budget
        self.clock = clock
        self.executor = executor or ThreadPoolExecutor(
            max_workers=LISTENER_THREADS, thread_name_prefix="tau-authorize"
        )

    def handle(self, payload: dict[str, Any], respond: Callable[..., Any], *,
               arrived: float | None = None, presser: Presser | None = None,
               deadline: AckDeadline | None = None) -> Reply:
        """The ephemeral ack for one slash command; later news, if any, goes to ``respond``.

        ``arrived`` (on ``clock``) is when the HTTP server read the request: the budget runs
        from then, not from when a dispatch thread got to it, so a command that queued behind
        stalled ones (Redis hanging) still acks within Slack's 3 s — "still working" at once —
        instead of waiting a whole budget of its own. With ``deadline`` (the HTTP server's) the
        work runs on this thread and the server answers "still working" should it be late."""
        started = self.clock() if arrived is None else arrived
        presser = presser or Presser(self.resolver, str(payload.get("user_id") or ""))
        if deadline is not None:
            return self._under(deadline, payload, respond, presser, started)
        try:
            command = parse(str(payload.get("text") or ""))
        except CommandError as error:
            self._audit(payload, None, error.verb or "unknown", None, "usage", started)
            return usage_reply(error)
        if isinstance(command, HelpCommand):
            self._audit(payload, None, "help", None, "help", started)
            return help_reply(command.topic)
        future = self.executor.submit(self.authorize_and_enqueue, command, payload, presser)
        try:
            left = max(0.0, started + self.ack_budget - self.clock())
            reply, outcome, identity = future.result(timeout=left)
        except FutureTimeout:
            future.add_done_callback(lambda done: self._late(done, respond))
            self._audit(payload, None, command.verb, command, "pending", started)
            return STILL_WORKING
        self._audit(payload, identity, command.verb, command, outcome, started)
        return reply

    def _under(self, deadline: AckDeadline, payload: dict[str, Any], respond: Callable[..., Any],
               presser: Presser, started: float) -> Reply:
        """Behind the HTTP server, which keeps ``deadline``: decided on this thread and claimed
        through the deadline, so exactly one of the two answers Slack. A command this thread
        reaches after its deadline — the server answers it "still working" then, whatever its
        thread is doing — is decided on the pool, and what it comes to, a usage line or a
        refusal alike, is told on ``respond`` (a queued command needs no word)."""
        if not (deadline.at > self.clock() and deadline.arm()):
            future = self.executor.submit(self.decide, payload, presser)
            future.add_done_callback(lambda done: self._late_decision(done, payload, respond, started))
            return STILL_WORKING  # unheard: the server's answer is the ack
        reply, outcome, identity, kind, command = self.decide(payload, presser)
        if deadline.settle():
            self._audit(payload, identity, kind, command, outcome, started)
            return reply
        self._audit(payload, None, kind, command, "pending", started)  # the server said so
        self._deliver_late(reply, outcome, respond)
        return STILL_WORKING

    def decide(self, payload: dict[str, Any], presser: Presser
               ) -> tuple[Reply, str, Identity | None, str, Command | None]:
        """What one command comes to: its reply, the audit's outcome, the identity it ran as, the
        kind of command and the command (None for usage or help). Never raises."""
        try:
            command = parse(str(payload.get("text") or ""))
        except CommandError as error:
            return usage_reply(error), "usage", None, error.verb or "unknown", None
        if isinstance(command, HelpCommand):
            return help_reply(command.topic), "help", None, "help", None
        reply, outcome, identity = self.authorize_and_enqueue(command, payload, presser)
        return reply, outcome, identity, command.verb, command

    def _audit(self, payload: dict[str, Any], identity: Identity | None, kind: str, command: Command | None,
               outcome: str, started: float) -> None:
        """The audit line and the metrics of one command, once its ack is decided."""
        COMMANDS.labels(kind if kind in USAGE else "unknown", outcome).inc()
        ACK_SECONDS.observe(self.clock() - started)
        audit("command", slack_user=str(payload.get("user_id") or ""),
              channel=str(payload.get("channel_id") or ""),
              k8s_user=identity.user if identity else None,
              k8s_groups=list(identity.groups) if identity else None,
              command=command.display() if command is not None and hasattr(command, "display") else kind,
              run=getattr(command, "run", None), workspace=getattr(command, "workspace", None),
              outcome=outcome)

    def authorize_and_enqueue(self, command: Command, payload: dict[str, Any], presser: Presser
                              ) -> tuple[Reply, str, Identity | None]:
        """Never raises: every outcome is a reply the user can read, with its audit outcome and
        the identity it ran as."""
        user = presser.slack_user
        try:
            identity = presser.identity()
        except Exception:  # noqa: BLE001 - the resolver promises values; be safe anyway
            log.exception("identity resolution raised for %s", user)
            return INTERNAL_ERROR, "error", None
        if isinstance(identity, Unmapped):
            log.info("refused %s: %s", user, identity.detail)
            return Reply(f"⛔ {escape(identity.reason, 1000)}"), "unmapped", None
        try:
            self.enqueue(command, identity, payload)
        except RedisError as exc:
            log.warning("enqueue failed, Redis unreachable: %s", exc)
            return QUEUE_DOWN, "queue_down", identity
        except Exception:  # noqa: BLE001 - never let the user wait for a dispatch_failed
            log.exception("enqueue failed")
            return INTERNAL_ERROR, "error", identity
        return queued_reply(command), "queued", identity

    def _late_decision(self, done: Future[tuple[Reply, str, Identity | None, str, Command | None]],
                       payload: dict[str, Any], respond: Callable[..., Any], started: float) -> None:
        """A decision made after the server answered "still working": audited, and told unless queued."""
        try:
            reply, outcome, _identity, kind, command = done.result()
        except Exception:  # noqa: BLE001 - a thread callback has nobody to raise to
            log.exception("could not deliver a late /tau reply")
            return
        self._audit(payload, None, kind, command, "pending", started)
        self._deliver_late(reply, outcome, respond)

    def _late(self, done: Future[tuple[Reply, str, Identity | None]], respond: Callable[..., Any]) -> None:
        """After a "still working" ack: tell the user only if nothing was started."""
        try:
            reply, outcome, _ = done.result()
        except Exception:  # noqa: BLE001 - a thread callback has nobody to raise to
            log.exception("could not deliver a late /tau reply")
            return
        self._deliver_late(reply, outcome, respond)

    @staticmethod
    def _deliver_late(reply: Reply, outcome: str, respond: Callable[..., Any]) -> None:
        try:
            audit("command-late", outcome=outcome)
            if not reply.queued:
                respond(text=reply.text, response_type="ephemeral", replace_original=False)
        except Exception:  # noqa: BLE001 - after the ack nobody is there to raise to
            log.exception("could not deliver a late /tau reply")




def queue_enqueuer(queue: JobQueue, settings: Settings) -> Enqueuer:
    """The production `Enqueuer`: one job per command, with the settings' timeout and retries."""

    def enqueue(command: Command, identity: Identity, payload: dict[str, Any]) -> object:
        common = {
            "identity": identity,
            "channel": str(payload.get("channel_id") or ""),
            "user": str(payload.get("user_id") or ""),
            "response_url": payload.get("response_url"),
            "requested_at": datetime.now(UTC),
        }
        if isinstance(command, StatusCommand):
            request: CommandRequest = StatusRequest(command=command, **common)
        elif isinstance(command, WorkspaceConnectionCommand | WorkspaceStatusCommand):
            request = WorkspaceRequest(command=command, **common)
        elif isinstance(command, LogsCommand):
            request = LogsRequest(command=command, **common)
        elif isinstance(command, RunsCommand):
            request = RunsRequest(command=command, **common)
        elif isinstance(command, TopologyValidateCommand | NodesValidateCommand):
            request = ClusterRequest(command=command, **common)
        elif isinstance(command, ValidateCommand):
            request = ValidateRequest(command=command, **common)
        else:
            raise TypeError(f"no job for {type(command).__name__}")
        timeout = settings.job_timeout_seconds
        if isinstance(command, NodesValidateCommand):  # the pods may take their --timeout to finish
            timeout = max(timeout, command.timeout_seconds + 60)
        return enqueue_request(queue, request, timeout=timeout, job_retries=settings.job_retries)

    return enqueue


__all__ = ["ACK_BUDGET_SECONDS", "ARRIVED", "DEADLINE", "STILL_WORKING", "AckDeadline", "NoMapping", "Reply",
           "TauCommands", "help_reply", "queue_enqueuer", "usage_reply"]
