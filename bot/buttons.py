"""The *Escalate* button's listener: ack at once, check the value, resolve the clicker, enqueue.

Slack wants an interaction acked within 3 seconds, and the escalation itself
needs a Kubernetes access review (nothing in `bot/` talks to Kubernetes) and
several Slack calls. So the listener acks first and then does only what is
fast or must happen before queueing:

* refuse a value we did not sign — a tampered button never reaches Redis or
  the queue;
* resolve the clicker's Kubernetes identity, exactly as `/tau` does, so an
  unmapped user is told why at once and the worker impersonates the right
  person;
* enqueue one job with the press (ids only; the card is re-rendered from
  what taubot stored, never from what Slack echoes back).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from redis import RedisError

from bot.button_listener import ButtonListener, Resolver, press_place
from bot.identity import Unmapped
from bot.presser import Presser
from workers.config.settings import Settings
from workers.contracts.ids import (
    DETAILS_ACTION,
    ESCALATE_ACTION,
    MUTE_ACTION,
    SLACK_USER,
    VALIDATE_NODES_ACTION,
)
from workers.contracts.requests import (
    DetailsRequest,
    EscalateRequest,
    MuteRequest,
    RecordPressRequest,
    ValidateNodesRequest,
)
from workers.contracts.signing import verify_value
from workers.plumbing.jobqueue import JobQueue, enqueue_request
from workers.render.mrkdwn import escape

log = logging.getLogger(__name__)

TAMPERED = ("⛔ taubot did not issue this button (its value does not carry taubot's signature), "
            "so nothing was escalated.")
QUEUE_DOWN = ("⚠️ taubot could not queue the escalation: its job queue (Redis) is unreachable. "
              "Nothing was posted; press the button again in a minute.")
INTERNAL_ERROR = ("⚠️ taubot hit an internal error and did not escalate. Press the button again; if it "
                  "keeps failing, tell your TauGrid platform operator.")


class EscalateButton(ButtonListener):
    """What happens after an Escalate press was acked; see the module docstring."""

    name = "escalate"
    failure_text = INTERNAL_ERROR

    def __init__(self, settings: Settings, resolver: Resolver, queue: JobQueue) -> None:
        self.settings = settings
        self.resolver = resolver
        self.queue = queue
        self.key = settings.button_key()

    def _handle(self, body: dict[str, Any], presser: Presser) -> tuple[str, str | None]:
        action = next((a for a in body.get("actions") or [] if a.get("action_id") == ESCALATE_ACTION), {})
        record_id = verify_value(self.key, action.get("value"))
        user = str((body.get("user") or {}).get("id") or "")
        if record_id is None or not SLACK_USER.match(user):
            log.warning("escalate press by %r refused: value not signed by taubot", user[:20])
            return "tampered", TAMPERED
        identity = presser.identity()
        if isinstance(identity, Unmapped):
            log.info("escalate press refused for %s: %s", user, identity.detail)
            return "unmapped", f"⛔ {escape(identity.reason, 1000)}"
        request = EscalateRequest(
            record_id=record_id, user=user, identity=identity, response_url=body.get("response_url"),
            **press_place(body), pressed_at=datetime.now(UTC),
        )
        try:
            enqueue_request(self.queue, request, timeout=self.settings.job_timeout_seconds)
        except RedisError as exc:
            log.warning("escalate enqueue failed, Redis unreachable: %s", exc)
            return "queue-down", QUEUE_DOWN
        return "queued", None


class RecordButton(ButtonListener):
    """A press whose value is a signed record id, served as the presser by one queued job
    (*Mute 24 h*, *Validate these nodes*): refuse unsigned values, resolve the presser, enqueue.
    Subclasses name the action, the request and the words of a refusal."""

    action_id: str
    request_type: type[RecordPressRequest]
    verb: str  # "muted", "validated"
    noun: str  # "the mute", "the validation"
    failure_text = INTERNAL_ERROR

    def __init__(self, settings: Settings, resolver: Resolver, queue: JobQueue, *,
                 timeout: int | None = None) -> None:
        self.settings = settings
        self.resolver = resolver
        self.queue = queue
        self.key = settings.button_key()
        self.timeout = timeout or settings.job_timeout_seconds

    def _handle(self, body: dict[str, Any], presser: Presser) -> tuple[str, str | None]:
        action = next((a for a in body.get("actions") or [] if a.get("action_id") == self.action_id), {})
        record_id = verify_value(self.key, action.get("value"))
        user = str((body.get("user") or {}).get("id") or "")
        if record_id is None or not SLACK_USER.match(user):
            return "tampered", f"⛔ taubot did not issue this button, so nothing was {self.verb}."
        identity = presser.identity()
        if isinstance(identity, Unmapped):
            return "unmapped", f"⛔ {escape(identity.reason, 1000)}"
        request = self.request_type(record_id=record_id, user=user, identity=identity,
                                    response_url=body.get("response_url"), **press_place(body))
        try:
            enqueue_request(self.queue, request, timeout=self.timeout)
        except RedisError:
            return "queue-down", f"⚠️ taubot could not queue {self.noun}: its job queue is unreachable."
        return "queued", None


class MuteButton(RecordButton):
    """*Mute 24 h* on an auto-post (the mute itself and its access review are the worker's:
    nothing in bot/ talks to Kubernetes)."""

    name = "mute"
    action_id = MUTE_ACTION
    request_type = MuteRequest
    verb, noun = "muted", "the mute"


class DetailsButton(RecordButton):
    """*Details* on a phase card: the worker posts the rest of the card in its thread, once per
    version of the card, and only for a press on the card it was offered on."""

    name = "details"
    action_id = DETAILS_ACTION
    request_type = DetailsRequest
    verb, noun = "posted", "the details"


class ValidateNodesButton(RecordButton):
    """*Validate these nodes* on a layer-6 card: the pods are created as the presser, so the
    cluster's RBAC decides again (workers/flows/node_validation.py)."""

    name = "validate-nodes"
    action_id = VALIDATE_NODES_ACTION
    request_type = ValidateNodesRequest
    verb, noun = "validated", "the validation"

    def __init__(self, settings: Settings, resolver: Resolver, queue: JobQueue) -> None:
        super().__init__(settings, resolver, queue,
                         timeout=max(settings.job_timeout_seconds, settings.validation_timeout_seconds + 60))


__all__ = ["DetailsButton", "EscalateButton", "MuteButton", "RecordButton", "ValidateNodesButton"]
