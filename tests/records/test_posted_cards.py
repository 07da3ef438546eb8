"""The posted-card store against the fake Slack Web API and the suite's Redis.

One `update_if_changed` serves every writer of a card (status, watch,
escalation): it re-renders from the context it stored, sends only when the
hash moved, and turns a deleted message into an outcome.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from slack_sdk import WebClient

from tests.fakes.slack_api import FakeSlack, running_fake_slack
from tests.live.conftest import write_descriptor
from tests.slack.conftest import EXAMPLE_NOW, example_objects
from workers.diagnosis.evaluate import evaluate
from workers.records.cards import CardStore, PostedCard
from workers.render.buttons import EscalatedNote
from workers.render.cards import build_phase_card
from workers.render.slots import EscalationSlot
from workers.services import DescriptorSource
from workers.surfaces.slack import SlackSurface

TOKEN = "xoxb-cards"
CHANNEL = "C012VISION"


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with running_fake_slack(token=TOKEN) as slack:
        yield slack


@pytest.fixture
def store(fake: FakeSlack, redis_url: str) -> CardStore:
    surface = SlackSurface(WebClient(token=TOKEN, base_url=fake.api_url), pacer=None)
    return CardStore(redis.Redis.from_url(redis_url), surface, ttl=600)


def card_context():  # noqa: ANN201 - a PhaseCardContext
    # tests/slack/conftest.py: the bundled example, judged at its own time
    d = evaluate(example_objects("l4-job-waiting-for-quota"), "llama-ft-7b", EXAMPLE_NOW)
    return build_phase_card(d, workspace="vision", operator_hints_allowed=False)


def test_an_unchanged_render_sends_nothing_and_a_change_sends_one_update(store: CardStore,
                                                                         fake: FakeSlack) -> None:
    posted = store.post(CHANNEL, card_context(), thread_ts="1700000000.000100")
    assert isinstance(posted, PostedCard)
    assert store.update_if_changed(CHANNEL, posted.ts, lambda c: card_context()).outcome == "unchanged"
    assert fake.calls_to("chat.update") == []
    note = EscalatedNote(owner="queue-owner", by="U012ALICE", at=EXAMPLE_NOW)
    change = lambda c: c.with_slot(EscalationSlot(note=note))  # noqa: E731
    assert store.update_if_changed(CHANNEL, posted.ts, change).outcome == "updated"
    assert store.update_if_changed(CHANNEL, posted.ts, change).outcome == "unchanged"
    [update] = fake.calls_to("chat.update")
    assert "Escalated to *queue-owner*" in str(update.params["blocks"])
    assert store.load(CHANNEL, posted.ts).updates == 1  # type: ignore[union-attr]


def test_edits_start_from_the_stored_context_not_from_slack(store: CardStore, fake: FakeSlack) -> None:
    posted = store.post(CHANNEL, card_context())
    assert isinstance(posted, PostedCard)
    seen = []
    store.update_if_changed(CHANNEL, posted.ts, lambda c: seen.append(c) or c)
    assert seen == [card_context()]  # exactly what was posted, whatever Slack holds now


def test_a_deleted_message_is_gone_and_an_unknown_card_is_missing(store: CardStore, fake: FakeSlack) -> None:
    posted = store.post(CHANNEL, card_context())
    assert isinstance(posted, PostedCard)
    fake.fail_next("chat.update", "message_not_found")
    change = lambda c: c.model_copy(update={"notes": ["changed"]})  # noqa: E731
    assert store.update_if_changed(CHANNEL, posted.ts, change).outcome == "gone"
    assert store.update_if_changed(CHANNEL, "1.000000", change).outcome == "missing"


def test_descriptors_are_reread_only_when_a_file_changes(tmp_path: Path) -> None:
    source = DescriptorSource(tmp_path)
    assert source.get().names == []
    write_descriptor(tmp_path, "http://127.0.0.1:1", name="vision")
    first = source.get()
    assert first.names == ["vision"]
    assert source.get() is first  # nothing changed: not parsed again
    write_descriptor(tmp_path, "http://127.0.0.1:1", name="audio")
    assert source.get().names == ["audio", "vision"]
