"""Posted cards: one store for a card that lives in a message, and one `update_if_changed`.

Why one place: a card is edited by several writers — watch ticks, the
escalation job ("escalated by … at …"), later the stall monitor and logs —
and each must (a) never re-send an unchanged card (tier 3 is ~50
`chat.update` a minute per workspace, shared by every watch), (b) never undo
another writer's edit, and (c) never trust what Slack echoes back of a card
(a press carries blocks anyone could forge). So the store keeps, per
message, the last rendered *context* (the validated model the template
renders) and its hash, in Redis beside a lock. Every edit loads the stored
context under the lock, derives the new one from it, and renders and sends
only when the hash moved.

The hash covers everything a reader sees except fields each card kind
declares volatile (a watched card's "updated 10:02:05").

A phase card's *Details* button is the store's too: the button must name the
message it is on (a press anywhere else is refused), and only the store
knows that message — so `post` signs a fresh record id into the button,
and once Slack answers records where the card landed under that id; every
edit keeps the button. A press then finds the card's current context (its
`details`) through that record, never through what Slack echoes.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import redis
from pydantic import BaseModel, ValidationError

from workers.contracts.ids import DETAILS_ACTION
from workers.contracts.signing import sign_id
from workers.records import keys
from workers.render.buttons import CardButton
from workers.render.cards import (
    ErrorCardContext,
    GroupCardContext,
    LogsCardContext,
    PhaseCardContext,
    RenderedCard,
    WorkspaceCardContext,
    render_error_card,
    render_group_card,
    render_logs_card,
    render_phase_card,
    render_workspace_card,
)
from workers.render.slots import VOLATILE
from workers.surfaces.base import Failed, Sent, Surface

log = logging.getLogger(__name__)

KEY_PREFIX = keys.CARD
DETAILS_PREFIX = keys.DETAILS
DETAILS_LABEL = "📋 Details"
LOCK_TIMEOUT_SECONDS = 60
LOCK_WAIT_SECONDS = 30
UPDATE_MAX_WAIT_SECONDS = 5.0

CardContext = (PhaseCardContext | WorkspaceCardContext | ErrorCardContext | LogsCardContext
               | GroupCardContext)
Outcome = Literal["unchanged", "updated", "deferred", "gone", "missing"]


KINDS: dict[type[BaseModel], tuple[str, Callable[..., RenderedCard], dict[str, Any]]] = {
    PhaseCardContext: ("phase", render_phase_card, VOLATILE),
    WorkspaceCardContext: ("workspace", render_workspace_card, {}),
    ErrorCardContext: ("error", render_error_card, {}),
    LogsCardContext: ("logs", render_logs_card, {}),
    GroupCardContext: ("group", render_group_card, VOLATILE),
}
MODELS: dict[str, type[BaseModel]] = {name: model for model, (name, _, _) in KINDS.items()}


def context_hash(context: BaseModel) -> str:
    """What a reader sees, minus the kind's volatile fields: equal hashes mean "do not re-send"."""
    _, _, volatile = KINDS[type(context)]
    data = context.model_dump_json(exclude=volatile)
    return hashlib.sha256(f"{type(context).__name__}:{data}".encode()).hexdigest()


def render(context: BaseModel) -> RenderedCard:
    return KINDS[type(context)][1](context)


class PostedCard(BaseModel):
    """A card in a message: where it is, what it last showed, and that context's hash."""

    channel: str
    ts: str
    thread_ts: str | None = None
    kind: str
    context: dict
    hash: str
    updates: int = 0

    def model(self) -> BaseModel:
        return MODELS[self.kind].model_validate(self.context)


class DetailsRecord(BaseModel):
    """Where the card a *Details* button was offered on is (its value is this record's signed id)."""

    channel: str
    ts: str
    thread_ts: str | None = None


card_key = keys.card_key


def details_button(key: bytes | None) -> tuple[CardButton | None, str | None]:
    """A fresh *Details* button and its record id (none without a signing key: no buttons)."""
    if key is None:
        return None, None
    record_id = secrets.token_urlsafe(18)
    return CardButton(action_id=DETAILS_ACTION, text=DETAILS_LABEL, value=sign_id(key, record_id)), record_id


def _keep_details_button(old: BaseModel, new: BaseModel) -> BaseModel:
    """An edit keeps the card's *Details* button (a watch tick builds a fresh context without it)."""
    if (isinstance(old, PhaseCardContext) and isinstance(new, PhaseCardContext) and new.details is not None
            and new.details_button is None and old.details_button is not None):
        return new.replace(details_button=old.details_button)
    return new


class CardStore:
    """Cards in Redis (kept ``ttl`` seconds) and the surface they live on."""

    def __init__(self, conn: redis.Redis, surface: Surface, *, ttl: int, key: bytes | None = None) -> None:
        self.conn = conn
        self.surface = surface
        self.ttl = ttl
        self.key = key  # signs *Details* buttons (None: phase cards get none)

    def load(self, channel: str, ts: str) -> PostedCard | None:
        """The stored card, or None — also for one stored by an older taubot whose context no
        longer validates (an edit then finds it "missing", as if it had expired)."""
        raw = self.conn.get(card_key(channel, ts))
        if not raw:
            return None
        try:
            card = PostedCard.model_validate_json(raw)
            card.model()
        except (ValidationError, KeyError) as exc:
            log.warning("stored card %s:%s no longer readable, treated as missing: %s", channel, ts, exc)
            return None
        return card

    def details_record(self, record_id: str) -> DetailsRecord | None:
        raw = self.conn.get(keys.details_key(record_id))
        return DetailsRecord.model_validate_json(raw) if raw else None

    def _save(self, card: PostedCard) -> None:
        self.conn.set(card_key(card.channel, card.ts), card.model_dump_json(), ex=self.ttl)

    def post(self, channel: str, context: BaseModel, *, thread_ts: str | None = None,
             metadata: dict[str, Any] | None = None) -> PostedCard | Failed:
        """Post a new card and remember it; a failure to post is the caller's outcome to handle.
        A phase card with details gets its *Details* button here (see the module docstring);
        ``metadata`` is Slack message metadata (the monitor's auto-posts carry theirs)."""
        details_id = None
        if (isinstance(context, PhaseCardContext) and context.details is not None
                and context.details_button is None):
            button, details_id = details_button(self.key)
            context = context.replace(details_button=button)
        card = render(context)
        sent = self.surface.post(channel, card.text, card.blocks, thread_ts=thread_ts, metadata=metadata)
        if isinstance(sent, Failed):
            return sent
        if details_id is not None:
            record = DetailsRecord(channel=sent.channel, ts=sent.ts, thread_ts=thread_ts)
            self.conn.set(keys.details_key(details_id), record.model_dump_json(), ex=self.ttl)
        posted = PostedCard(channel=sent.channel, ts=sent.ts, thread_ts=thread_ts,
                            kind=KINDS[type(context)][0], context=context.model_dump(mode="json"),
                            hash=context_hash(context))
        self._save(posted)
        return posted

    def lock(self, channel: str, ts: str) -> redis.lock.Lock:
        return self.conn.lock(card_key(channel, ts) + ":lock", timeout=LOCK_TIMEOUT_SECONDS,
                              blocking_timeout=LOCK_WAIT_SECONDS)

    def update_if_changed(self, channel: str, ts: str, change: Callable[[BaseModel], BaseModel], *,
                          max_wait: float = UPDATE_MAX_WAIT_SECONDS, reserve_within: float = 0.0,
                          reserved: bool = False) -> Edit:
        """Derive the card's next context from its stored one; send it only if it changed.

        "deferred": the pace or a 429 said not now (the stored card is kept, so the next attempt
        compares against what Slack really shows), with when to try again and whether a slot within
        ``reserve_within`` is now held for this card (then send at that time with ``reserved``);
        "gone": the message was deleted; "missing": the store does not know this card.
        ``max_wait=0`` never sleeps.
        """
        with self.lock(channel, ts):
            card = self.load(channel, ts)
            if card is None:
                return Edit("missing")
            old = card.model()
            new = _keep_details_button(old, change(old))
            digest = context_hash(new)
            if digest == card.hash:
                return Edit("unchanged")
            rendered = render(new)
            sent = self.surface.update(channel, ts, rendered.text, rendered.blocks, max_wait=max_wait,
                                       reserve_within=reserve_within, reserved=reserved)
            if isinstance(sent, Failed):
                if sent.kind == "gone":
                    return Edit("gone")
                if sent.kind == "deferred":
                    return Edit("deferred", retry_after=sent.retry_after, slot_reserved=sent.slot_reserved)
                raise RuntimeError(f"chat.update failed: {sent.error or sent.kind}")
            assert isinstance(sent, Sent)
            self._save(card.model_copy(update={"context": new.model_dump(mode="json"), "hash": digest,
                                               "updates": card.updates + 1}))
            return Edit("updated")


@dataclass(frozen=True)
class Edit:
    """What `update_if_changed` did: ``outcome``, and for "deferred" when to try again and whether
    the pace now holds a slot for this card (`surfaces/pacing.py`: send then with ``reserved``)."""

    outcome: Outcome
    retry_after: float | None = None
    slot_reserved: bool = False

    @property
    def shown(self) -> bool:
        """The card in Slack now shows the new context (sent, or it already did)."""
        return self.outcome in ("updated", "unchanged")


__all__ = ["DETAILS_LABEL", "CardStore", "Edit", "DetailsRecord", "PostedCard", "card_key", "context_hash",
           "details_button", "render"]
