"""Issue 27 / SPEC §7: a stuck run's card fits one screen, and *Details* posts the rest in its thread.

Driven end to end: a signed `/tau status` → rq worker → Kubernetes API emulator → the card the
fake Slack recorded; then a signed *Details* press → the reply the fake Slack recorded in the
card's thread. Sizes are counted strictly (`screen_size`: every text object on lines of its own).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.fixtures.blocks import card_text
from workers.render.cards import FIRST_SCREEN_CHARS, FIRST_SCREEN_LINES, screen_size

from .conftest import SlackApp, example_objects
from .details import blocks_of, details_of, details_replies, press_details
from .test_end_to_end import cluster, parent_and_card

# (example, run, first incomplete, owner, an evidence fragment only Details must show in full,
#  a fragment of what the layer does not prove)
STUCK = [
    ("l4-job-waiting-for-quota", "llama-ft-7b", "Kueue admission", "queue-owner",
     "insufficient unused quota for nvidia.com/gpu in flavor a100, 8 more needed", "admitted is not running"),
    ("l5-job-imagepull-unauthorized", "vit-pretrain", "Image pull", "image-owner",
     "insufficient_scope: authorization failed", "a Running pod means containers started"),
    ("l5-rayjob-head-crashloop", "ray-pretrain-13b", "RayCluster", "researcher",
     "ModuleNotFoundError: No module named 'flash_attn'", "a Running pod means containers started"),
]

_MARKUP = re.compile(r"[*`_]|◀ first incomplete|[^\w\s.,:;()/'=+-]")


def sentences(text: str) -> list[str]:
    """The card's sentences and lines, markup dropped: what a reader would notice said twice."""
    parts = re.split(r"\n|(?<=[.!?])\s+", text)
    return [s for s in (_MARKUP.sub("", p).strip(" .·") for p in parts) if len(s) >= 20]


def assert_no_sentence_twice(text: str) -> None:
    seen = sentences(text)
    twice = {s for s in seen if seen.count(s) > 1}
    assert not twice, twice


def assert_first_screen(blocks: list[dict[str, Any]]) -> str:
    chars, lines = screen_size(blocks)
    assert chars <= FIRST_SCREEN_CHARS and lines <= FIRST_SCREEN_LINES, (chars, lines)
    text = card_text(blocks)
    assert_no_sentence_twice(text)
    return text


@pytest.mark.parametrize(("example", "run", "phase", "owner", "evidence", "not_proved"), STUCK,
                         ids=[s[0] for s in STUCK])
def test_a_stuck_runs_card_fits_one_screen_and_details_posts_the_rest(
        slack_app: SlackApp, example: str, run: str, phase: str, owner: str, evidence: str,
        not_proved: str) -> None:
    with cluster(slack_app, example_objects(example)):
        slack_app.command(f"status {run}")
        slack_app.work()
        parent, card = parent_and_card(slack_app)
        text = assert_first_screen(blocks_of(card))
        assert f"*First incomplete: {phase}*" in text  # what is stuck
        assert f"*Owner:* {owner}" in text  # whose it is
        assert "*Next" in text  # what to do next
        assert "proves" not in text and "kubectl" not in text  # one press away, not here

        more = details_of(slack_app, card)
        assert evidence in more  # every evidence line, in full
        assert "What layer" in more and "proves when done" in more and not_proved in more
        assert f"*{phase}* — " in more and "◀ *first incomplete*" in more  # the full tree
        assert "*TauGrid command*" in more
        assert "kubectl" in more  # Alice passed the operator access review, as on the card before
        assert_no_sentence_twice(more)


def test_a_second_press_on_an_unchanged_card_posts_nothing_again(slack_app: SlackApp) -> None:
    with cluster(slack_app, example_objects("l4-job-waiting-for-quota")):
        slack_app.command("status llama-ft-7b")
        slack_app.work()
        parent, card = parent_and_card(slack_app)
        details_of(slack_app, card)
        press_details(slack_app, card, response_id="again")
        assert len(details_replies(slack_app, parent["ts"])) == 1
        [reply] = slack_app.fake.wait_for_responses("again")
        assert "already in its thread" in reply["text"]


def test_a_press_from_another_channel_or_message_is_refused(slack_app: SlackApp) -> None:
    with cluster(slack_app, example_objects("l5-rayjob-head-crashloop")):
        slack_app.command("status ray-pretrain-13b")
        slack_app.work()
        parent, card = parent_and_card(slack_app)
        press_details(slack_app, card, response_id="other-channel", channel="C0OTHERCH")
        press_details(slack_app, card, response_id="other-message", message_ts="1764464220.000100")
        for response_id in ("other-channel", "other-message"):
            [reply] = slack_app.fake.wait_for_responses(response_id)
            assert "not pressed on the card taubot offered it on" in reply["text"]
        assert details_replies(slack_app, parent["ts"]) == []
        assert slack_app.fake.messages("C0OTHERCH") == []
        details_of(slack_app, card)  # on its own card it works


def test_a_forged_details_value_is_refused_before_the_queue(slack_app: SlackApp) -> None:
    with cluster(slack_app, example_objects("l4-job-waiting-for-quota")):
        slack_app.command("status llama-ft-7b")
        slack_app.work()
        _, card = parent_and_card(slack_app)
        queued = len(slack_app.queue.job_ids)
        button = next(e for b in blocks_of(card) if b["type"] == "actions" for e in b["elements"]
                      if e["action_id"] == "taubot_details")
        forged = {**card, "blocks": [{"type": "actions", "elements": [
            {**button, "value": button["value"][:-4] + "beef"}]}]}
        press_details(slack_app, forged, response_id="forged")
        assert len(slack_app.queue.job_ids) == queued
        [reply] = slack_app.fake.wait_for_responses("forged")
        assert "taubot did not issue this button" in reply["text"]


def test_a_succeeded_runs_card_says_it_succeeded_and_its_evidence(slack_app: SlackApp) -> None:
    with cluster(slack_app, example_objects("l7-job-succeeded")):
        slack_app.command("status clip-eval-2")
        slack_app.work()
        _, card = parent_and_card(slack_app)
        text = assert_first_screen(blocks_of(card))
        assert "✅ clip-eval-2 · Job" in text and "*The run succeeded*" in text
        assert "*Evidence:*" in text
        assert "check the driver" not in text and "/tau logs" not in text  # nothing to check
        assert "OOMKilled" not in text  # the earlier attempt is not a ✔ row on the first screen
        assert "OOMKilled" in details_of(slack_app, card)  # …and is never lost


def test_the_card_in_a_channel_taubot_cannot_post_in_carries_its_details(slack_app: SlackApp) -> None:
    """No thread to post *Details* in: the private answer has the rest below the card."""
    with cluster(slack_app, example_objects("l4-job-waiting-for-quota")):
        slack_app.fake.fail_next("chat.postMessage", error="not_in_channel")
        slack_app.command("status llama-ft-7b", response_id="private")
        slack_app.work()
        [answer] = slack_app.fake.responses("private")
        text = card_text(answer["blocks"])
        assert "📋 Details · llama-ft-7b" in text and "admitted is not running" in text
        assert "taubot_details" not in str(answer["blocks"])  # no button that could only fail
