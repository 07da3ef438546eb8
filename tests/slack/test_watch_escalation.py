"""Escalate (issue 7) on a `--watch` card (issue 5), end to end.

The watch runs for real (signed command → rq status job → scheduled ticks run
by a real worker's scheduler against the emulator); the card's Escalate
button is pressed with a signed ``block_actions`` request carrying the value
the fake Slack stored, and the press's rq job runs in a real worker. What is
asserted is read back from the fake Slack: the card as it stands, the
handoffs posted, and how many `chat.update` calls there were.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.slack_signing import block_action_body
from tests.fixtures.blocks import card_text
from workers.contracts.ids import ESCALATE_ACTION
from workers.contracts.ids import watch_id as _watch_id
from workers.flows.watch import load_state

from .conftest import ALICE, CHANNEL, SECRET, SlackApp
from .test_watch import (
    BOB,
    RUN,
    admitted,
    apply,
    cluster,
    has_stop_button,
    identity_file,
    pending,
    start_watch,
    tick,
    updates,
)


def watch_id(channel: str, run: str) -> str:
    """The watch of ``run`` in workspace vision (the test descriptor's) in ``channel``."""
    return _watch_id(channel, "vision", run)


QUEUE_CHANNEL = "C0QUEUE"
NODE_POOL_CHANNEL = "C0NODEPOOL"


@pytest.fixture
def app(slack_app_factory: Callable[..., SlackApp], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> SlackApp:
    """The watch test's users, with buttons signed and routes for the two owners a run waiting
    for admission and then for nodes goes through; the worker reads the same from its env."""
    owners = {"queue-owner": {"channel": QUEUE_CHANNEL, "usergroup": "S0QUEUE"},
              "node-pool-owner": {"channel": NODE_POOL_CHANNEL, "usergroup": "S0NODEPOOL"}}
    audit = tmp_path / "audit.jsonl"
    monkeypatch.setenv("TAUBOT_SLACK_SIGNING_SECRET", SECRET)
    monkeypatch.setenv("TAUBOT_AUDIT_LOG", str(audit))
    monkeypatch.setenv("TAUBOT_DEFAULT_OWNERS", json.dumps(owners))
    return slack_app_factory(identity_file=identity_file(tmp_path), audit_log=audit, default_owners=owners)


def watched_card(app: SlackApp) -> dict[str, Any]:
    """The newest card in the run's channel (thread replies with blocks), as Slack stores it now."""
    posted = [c for c in app.fake.calls_to("chat.postMessage")
              if c.params.get("blocks") and c.params.get("channel") == CHANNEL]
    assert posted, "no card was posted"
    message = app.fake.message(CHANNEL, posted[-1].response["ts"])
    assert message is not None
    return message


def parent_ts(app: SlackApp) -> str:
    """The newest parent message in the run's channel (handoffs go to other channels)."""
    parents = [c for c in app.fake.calls_to("chat.postMessage")
               if c.params.get("channel") == CHANNEL and not c.params.get("thread_ts")]
    return str(parents[-1].response["ts"])


def escalate_buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]
            if e.get("action_id") == ESCALATE_ACTION]


def escalate_label(message: dict[str, Any]) -> str:
    [button] = escalate_buttons(message)
    return str(button["text"]["text"])


def press(app: SlackApp, message: dict[str, Any], *, user: str = ALICE, response_id: str = "press") -> None:
    """Press ``message``'s Escalate button as Slack would, then run the job the press queued."""
    [button] = escalate_buttons(message)
    body = block_action_body(
        ESCALATE_ACTION, button["value"], user_id=user, channel_id=CHANNEL, message_ts=message["ts"],
        thread_ts=parent_ts(app), message=message, button_text=button["text"]["text"],
        response_url=app.fake.response_url(response_id),
    )
    status, _, seconds = app.post(body)
    assert status == 200 and seconds < 3
    app.work()  # the press's job only: the next tick waits in the scheduled registry


def escalated_line(owner: str, user: str = ALICE) -> str:
    return f"📣 Escalated to *{owner}* by <@{user}> at <!date^"


def test_watched_card_escalates_once_and_keeps_the_note_across_ticks(app: SlackApp) -> None:
    with cluster(app, pending()):
        start_watch(app)
        first = watched_card(app)
        assert escalate_label(first) == "Escalate to queue-owner" and has_stop_button(first)

        # Unchanged ticks keep the same stored diagnosis, so the same button and no re-send.
        tick(app)
        assert updates(app) == [] and escalate_buttons(watched_card(app)) == escalate_buttons(first)

        press(app, first)
        [handoff] = app.fake.messages(QUEUE_CHANNEL)
        assert "<!subteam^S0QUEUE> 📣 Escalation for *queue-owner*" in card_text(handoff["blocks"])
        after_press = watched_card(app)
        assert escalated_line("queue-owner") in card_text(after_press["blocks"])
        assert escalate_buttons(after_press) == [] and has_stop_button(after_press)
        assert len(updates(app)) == 1  # the escalation's edit, made through the watch

        # The next ticks find the card they would draw: the note stays, nothing is re-sent.
        for _ in range(2):
            tick(app)
        assert len(updates(app)) == 1
        now_card = watched_card(app)
        assert now_card["blocks"] == after_press["blocks"]
        assert escalated_line("queue-owner") in card_text(now_card["blocks"])
        assert escalate_buttons(now_card) == []

        # The button Bob still sees (an old render) cannot hand off twice.
        press(app, first, user=BOB, response_id="bob")
        [reply] = app.fake.wait_for_responses("bob")
        assert "Already done" in reply["text"] and f"by <@{ALICE}>" in reply["text"]
        assert len(app.fake.messages(QUEUE_CHANNEL)) == 1
        assert len(updates(app)) == 1


def test_owner_change_offers_escalate_to_the_new_owner(app: SlackApp) -> None:
    """Waiting for admission (queue-owner, escalated) → admitted, pods not yet placed
    (node-pool-owner): the card drops the old note and offers the new owner, once."""
    with cluster(app, pending()) as emu:
        start_watch(app)
        press(app, watched_card(app))
        assert escalated_line("queue-owner") in card_text(watched_card(app)["blocks"])
        wid = watch_id(CHANNEL, RUN)
        queue_offer = load_state(app.redis, wid).escalation  # type: ignore[union-attr]

        apply(emu, admitted())
        tick(app)
        moved = watched_card(app)
        text = card_text(moved["blocks"])
        assert "*First incomplete: Pod scheduling*" in text and "Escalated to" not in text
        assert escalate_label(moved) == "Escalate to node-pool-owner" and has_stop_button(moved)
        state = load_state(app.redis, wid)
        assert state is not None and state.escalation is not None and queue_offer is not None
        assert (state.escalation.layer, state.escalation.owner) == (5, "node-pool-owner")
        assert state.escalation.record_id != queue_offer.record_id
        count = len(updates(app))

        tick(app)  # same (layer, owner): same button, nothing sent
        assert len(updates(app)) == count
        assert escalate_buttons(watched_card(app)) == escalate_buttons(moved)

        press(app, moved)
        [handoff] = app.fake.messages(NODE_POOL_CHANNEL)
        assert "<!subteam^S0NODEPOOL>" in card_text(handoff["blocks"])
        assert len(app.fake.messages(QUEUE_CHANNEL)) == 1
        final = watched_card(app)
        assert escalated_line("node-pool-owner") in card_text(final["blocks"])
        assert escalate_buttons(final) == []
        tick(app)
        assert len(updates(app)) == count + 1


def test_watch_started_after_an_escalation_shows_it_at_once(app: SlackApp) -> None:
    """Escalated from a plain status card, then watched: the first watched card already says so."""
    with cluster(app, pending()):
        status, _, _ = app.command(f"status {RUN}")
        assert status == 200
        app.work()
        press(app, watched_card(app))
        assert len(app.fake.messages(QUEUE_CHANNEL)) == 1

        start_watch(app)
        watched = watched_card(app)
        assert has_stop_button(watched) and escalate_buttons(watched) == []
        assert escalated_line("queue-owner") in card_text(watched["blocks"])
