"""*Details* on a phase card (SPEC §7, issue 27): the rest of the card, posted in its thread.

The first screen of a card answers what is stuck, whose it is and what to do
next; everything else — the full phase tree, every evidence line, what the
layer proves and does not prove, recovery, the TauGrid command, operator
commands (only where the requester's access review allowed them, as on the
card before) and the GPU run profile — is one press away, never lost.

What is posted is the card's *current* stored context (`details`), found
through the record the card store wrote when it posted the card, never from
what Slack echoes back. A press counts only on the card the button was
offered on (`presses.py`). One post per version of the card: a second press
on an unchanged card points to the reply already in the thread instead of
posting it again, so a channel cannot be flooded from one button.
"""

from __future__ import annotations

import logging

from workers.contracts.requests import DetailsRequest
from workers.records import keys
from workers.render.cards import PhaseCardContext, render_details
from workers.services import Services
from workers.surfaces.base import Failed

from .presses import NOT_HERE, offered_here
from .presses import tell as _tell

log = logging.getLogger(__name__)

EXPIRED = ("⌛ This card is too old for its *Details* (taubot keeps a card {days} days). "
           "Run `/tau status` again for a fresh card.")
ALREADY = "📋 The details of this card are already in its thread (posted by @{by}); nothing was posted again."
NOT_POSTED = "⚠️ taubot could not post the details in the thread ({error}); press *Details* again in a minute."


def run_details(services: Services, request: DetailsRequest) -> str:
    """Post the pressed card's details in its thread; what happened, for the job's result."""
    record = services.cards.details_record(request.record_id)
    card = services.cards.load(record.channel, record.ts) if record is not None else None
    if record is None or card is None:
        days = max(services.settings.diagnosis_ttl_seconds // 86400, 1)
        _tell(services, request, EXPIRED.format(days=days))
        return "expired"
    if not offered_here(channel=record.channel, card_ts=record.ts, thread_ts=None,
                        press_channel=request.channel, press_ts=request.message_ts):
        _tell(services, request, NOT_HERE.format(verb="posted"))
        return "elsewhere"
    context = card.model()
    if not isinstance(context, PhaseCardContext) or context.details is None:
        _tell(services, request, EXPIRED.format(days=1))
        return "expired"
    once = keys.details_posted_key(request.record_id, card.hash)
    if not services.redis.set(once, request.user, nx=True, ex=services.settings.diagnosis_ttl_seconds):
        by = services.redis.get(once)
        _tell(services, request, ALREADY.format(by=by.decode() if isinstance(by, bytes) else by))
        return "already"
    rendered = render_details(context.details)
    thread = record.thread_ts or record.ts  # an auto-post is a channel message: its own thread
    sent = services.surface.post(record.channel, rendered.text, rendered.blocks, thread_ts=thread)
    if isinstance(sent, Failed):
        services.redis.delete(once)
        log.warning("details of %s:%s not posted: %s", record.channel, record.ts, sent.error or sent.kind)
        _tell(services, request, NOT_POSTED.format(error=sent.error or sent.kind))
        return "failed"
    return "posted"


__all__ = ["run_details"]
