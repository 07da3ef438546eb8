"""Pressing *Details* on a card as Slack would, and reading what it posted in the thread."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.slack_signing import block_action_body
from workers.contracts.ids import DETAILS_ACTION

from .conftest import ALICE, CHANNEL, SlackApp
from .test_cards import card_text


def blocks_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = message.get("blocks") or []
    return blocks if isinstance(blocks, list) else json.loads(blocks)


def details_button(message: dict[str, Any]) -> dict[str, Any]:
    [button] = [e for b in blocks_of(message) if b["type"] == "actions" for e in b["elements"]
                if e["action_id"] == DETAILS_ACTION]
    return button


def press_details(app: SlackApp, card: dict[str, Any], *, response_id: str = "details", user: str = ALICE,
                  channel: str = CHANNEL, message_ts: str | None = None) -> None:
    """Press the card's *Details* (on the card's own message unless told otherwise), then work."""
    body = block_action_body(DETAILS_ACTION, details_button(card)["value"], user_id=user, channel_id=channel,
                             message_ts=message_ts or card["ts"], thread_ts=card.get("thread_ts"),
                             message={"blocks": []}, response_url=app.fake.response_url(response_id))
    status, _, seconds = app.post(body)
    assert status == 200 and seconds < 3
    app.work()


def details_replies(app: SlackApp, thread_ts: str, channel: str = CHANNEL) -> list[str]:
    """The texts of the *Details* replies in a thread."""
    return [card_text(blocks_of(m)) for m in app.fake.thread(channel, thread_ts)
            if card_text(blocks_of(m)).startswith("📋 Details")]


def details_of(app: SlackApp, card: dict[str, Any], **kwargs: Any) -> str:
    """Press *Details* on ``card`` and return the one reply it posted in the card's thread."""
    thread = card.get("thread_ts") or card["ts"]
    before = len(details_replies(app, thread))
    press_details(app, card, **kwargs)
    replies = details_replies(app, thread)
    assert len(replies) == before + 1, replies
    return replies[-1]


def action_ids(blocks: list[dict[str, Any]] | str) -> set[str]:
    """The action ids of a card's buttons (which buttons a reader can press)."""
    listed = blocks if isinstance(blocks, list) else json.loads(blocks)
    return {e["action_id"] for b in listed if b["type"] == "actions" for e in b["elements"]}
