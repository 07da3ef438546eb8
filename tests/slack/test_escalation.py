"""Escalate to the layer's owner (issue 7), end to end.

`/tau status` runs for real (signed command → rq job → emulator → card in the
fake Slack); the card's button is then pressed with a signed ``block_actions``
request carrying exactly the value Slack stored, the press's rq job runs in a
real worker against the emulator (the access review) and the fake Slack, and
everything asserted is read back from what the fake Slack stored and what the
emulator recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.kube_api import running_emulator
from tests.fakes.slack_signing import block_action_body
from tests.live.conftest import workspace_objects, write_descriptor
from workers.contracts.ids import DETAILS_ACTION, ESCALATE_ACTION
from workers.flows.escalation import SUBMITTED_BY_ANNOTATION

from .conftest import ALICE, ALICE_IDENTITY, CHANNEL, SECRET, SlackApp, example_objects
from .details import action_ids
from .test_cards import card_text
from .test_charts_slack import seed_training_logs
from .test_end_to_end import cluster, parent_and_card

BOB = "U012BOB"
BOB_IDENTITY = {"user": "bob@example.com", "groups": ["team-vision"]}
CAROL = "U012CAROL"
PLATFORM_CHANNEL = "C0PLATFORM"  # the test descriptor's spec.owners.platform
QUEUE_CHANNEL = "C0QUEUE"  # settings' default route for queue-owner


@pytest.fixture
def app(slack_app_factory: Callable[..., SlackApp], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> SlackApp:
    """The app with Alice and Bob mapped, a default route for queue-owner and an audit file;
    the worker gets the same configuration through its environment, as in production."""
    owners = {"queue-owner": {"channel": QUEUE_CHANNEL, "usergroup": "S0QUEUE"}}
    audit = tmp_path / "audit.jsonl"
    monkeypatch.setenv("TAUBOT_SLACK_SIGNING_SECRET", SECRET)
    monkeypatch.setenv("TAUBOT_AUDIT_LOG", str(audit))
    monkeypatch.setenv("TAUBOT_DEFAULT_OWNERS", json.dumps(owners))
    identity = tmp_path / "identity-escalation.yaml"
    identity.write_text(yaml.safe_dump({"users": {ALICE: ALICE_IDENTITY, BOB: BOB_IDENTITY}}))
    return slack_app_factory(identity_file=identity, audit_log=audit, default_owners=owners)


def status_card(app: SlackApp, run: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run `/tau status <run>` through the worker; the parent and the card as Slack stored them."""
    status, _, _ = app.command(f"status {run}")
    assert status == 200
    app.work()
    return parent_and_card(app)


def escalate_button(card: dict[str, Any]) -> dict[str, Any]:
    found = [e for b in card["blocks"] if b["type"] == "actions" for e in b["elements"]
             if e.get("action_id") == ESCALATE_ACTION]
    assert len(found) == 1, card["blocks"]
    return found[0]


def press(app: SlackApp, parent: dict[str, Any], card: dict[str, Any], *, user: str = ALICE,
          value: str | None = None, response_id: str = "press") -> None:
    """Press the card's Escalate button as Slack would, then run whatever the press queued."""
    button = escalate_button(card)
    body = block_action_body(
        ESCALATE_ACTION, value if value is not None else button["value"], user_id=user,
        channel_id=CHANNEL, message_ts=card["ts"], thread_ts=parent["ts"], message=card,
        button_text=button["text"]["text"], response_url=app.fake.response_url(response_id),
    )
    status, _, seconds = app.post(body)
    assert status == 200 and seconds < 3
    app.work()


def ephemeral(app: SlackApp, response_id: str) -> str:
    [reply] = app.fake.wait_for_responses(response_id)
    assert reply["response_type"] == "ephemeral" and reply.get("replace_original") is False
    return reply["text"]


def audit_lines(app: SlackApp) -> list[dict[str, Any]]:
    path = app.settings.audit_log
    assert path is not None
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_press_posts_handoff_notes_thread_updates_card_once(app: SlackApp) -> None:
    with cluster(app, example_objects("l4-job-localqueue-missing")) as emu:
        parent, card = status_card(app, "bert-distill")
        button = escalate_button(card)
        assert button["text"]["text"] == "Escalate to platform"
        assert "bert-distill" not in button["value"] and "user-queue" not in button["value"]

        emu.clear_requests()
        press(app, parent, card, response_id="alice")

        # The access review ran as Alice: get on the run's own resource.
        [review] = emu.requests_to("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
        assert review.header_values("Impersonate-User") == [ALICE_IDENTITY["user"]]
        assert review.body["spec"]["resourceAttributes"] == {
            "verb": "get", "resource": "jobs", "group": "batch", "namespace": "team-vision",
            "name": "bert-distill"}

        [handoff] = app.fake.messages(PLATFORM_CHANNEL)
        text = card_text(handoff["blocks"])
        assert text.count("<!subteam^S0PLATFORM>") == 1
        assert f"<@{ALICE}> escalated it from taubot" in text
        assert "*Run*\n`bert-distill`" in text and "*Workspace*\n`vision`" in text
        assert "*Layer*\n4" in text and "*First incomplete*\nKueue admission" in text
        assert "LocalQueue user-queue doesn" in text  # the evidence
        assert "*Next action*\n" in text
        thread_link = app.fake.permalink(CHANNEL, card["ts"], parent["ts"])
        assert f"<{thread_link}|the diagnosis thread>" in text
        assert "<" not in text.replace("<!subteam^S0PLATFORM>", "").replace(f"<@{ALICE}>", "").replace(
            f"<{thread_link}|the diagnosis thread>", "")

        [_, note] = app.fake.thread(CHANNEL, parent["ts"])
        handoff_link = app.fake.permalink(PLATFORM_CHANNEL, handoff["ts"])
        assert note["text"] == (f"📣 <@{ALICE}> escalated this to *platform* in <#{PLATFORM_CHANNEL}> — "
                                f"<{handoff_link}|handoff>.")

        updated = app.fake.message(CHANNEL, card["ts"])
        assert updated is not None and "edited" in updated
        assert action_ids(updated["blocks"]) == {DETAILS_ACTION}  # Escalate is gone, Details stays
        assert f"📣 Escalated to *platform* by <@{ALICE}> at <!date^" in card_text(updated["blocks"])

        [line] = audit_lines(app)
        assert line["event"] == "escalation" and line["slack_user"] == ALICE
        assert line["as"] == ALICE_IDENTITY
        assert (line["workspace"], line["namespace"]) == ("vision", "team-vision")
        assert line["run"] == "bert-distill" and line["kind"] == "Job"
        assert (line["layer"], line["owner"], line["target"]) == (4, "platform", PLATFORM_CHANNEL)
        assert line["time"].endswith("+00:00")

        # A second press, by someone else, on the same (still visible elsewhere) button.
        press(app, parent, card, user=BOB, response_id="bob")
        answer = ephemeral(app, "bob")
        assert "Already done" in answer and f"escalated to *platform* by <@{ALICE}>" in answer
        assert f"<{handoff_link}|the handoff>" in answer
        assert len(app.fake.messages(PLATFORM_CHANNEL)) == 1
        assert len(app.fake.thread(CHANNEL, parent["ts"])) == 2
        assert len(audit_lines(app)) == 1
        assert not app.fake.responses("alice")  # success is shown on the card, not privately


def test_owner_without_descriptor_route_uses_settings_default(app: SlackApp) -> None:
    with cluster(app, example_objects("l4-job-waiting-for-quota")):
        parent, card = status_card(app, "llama-ft-7b")
        assert escalate_button(card)["text"]["text"] == "Escalate to queue-owner"
        press(app, parent, card)
        [handoff] = app.fake.messages(QUEUE_CHANNEL)
        assert "<!subteam^S0QUEUE> 📣 Escalation for *queue-owner*" in card_text(handoff["blocks"])
        assert audit_lines(app)[0]["owner"] == "queue-owner"


def test_tampered_value_is_refused(app: SlackApp) -> None:
    with cluster(app, example_objects("l4-job-localqueue-missing")):
        parent, card = status_card(app, "bert-distill")
        value = escalate_button(card)["value"]
        record_id, mac = value.split(".")
        forged = f"{record_id}.{('0' if mac[0] != '0' else '1')}{mac[1:]}"
        press(app, parent, card, value=forged, response_id="forged")
        assert "did not issue this button" in ephemeral(app, "forged")
        press(app, parent, card, value="ask-for-anything", response_id="junk")
        assert "did not issue this button" in ephemeral(app, "junk")
        assert not app.fake.messages(PLATFORM_CHANNEL)
        assert app.fake.message(CHANNEL, card["ts"]) == card  # card untouched
        assert audit_lines(app) == []


def test_clicker_without_access_is_refused_and_leaves_no_claim(app: SlackApp) -> None:
    with cluster(app, example_objects("l4-job-localqueue-missing")) as emu:
        parent, card = status_card(app, "bert-distill")
        emu.forbid("get", "jobs", user=BOB_IDENTITY["user"], namespace="team-vision")
        press(app, parent, card, user=BOB, response_id="bob")
        answer = ephemeral(app, "bob")
        assert ("`bob@\u200bexample.com` may not "
                "`get jobs.batch/bert-distill in namespace team-vision`") in answer
        assert "Nothing was posted" in answer
        assert not app.fake.messages(PLATFORM_CHANNEL)
        assert app.fake.thread(CHANNEL, parent["ts"]) == [card]
        assert audit_lines(app) == []

        press(app, parent, card, user=ALICE, response_id="alice")  # the refusal claimed nothing
        assert len(app.fake.messages(PLATFORM_CHANNEL)) == 1


def _crashloop_with(annotation: str | None) -> list[dict[str, Any]]:
    hostile = "boom <!channel> <@U123> <https://evil.example|click> @here"
    objects = json.loads(json.dumps(example_objects("l5-rayjob-head-crashloop")).replace(
        "No module named 'flash_attn'", hostile.replace('"', '\\"')))
    for obj in objects:
        if obj["kind"] == "RayJob" and obj["metadata"]["name"] == "ray-pretrain-13b" and annotation:
            obj["metadata"].setdefault("annotations", {})[SUBMITTED_BY_ANNOTATION] = annotation
    return objects


def test_researcher_button_notifies_the_submitter_by_dm(app: SlackApp) -> None:
    app.fake.set_profile(CAROL, {"email": "carol@example.com", "real_name": "Carol"})
    with cluster(app, _crashloop_with("Carol@Example.com")):
        parent, card = status_card(app, "ray-pretrain-13b")
        assert escalate_button(card)["text"]["text"] == "Escalate: notify submitter"
        press(app, parent, card)

        assert app.fake.last("users.lookupByEmail").params["email"] == "Carol@Example.com"
        dms = [m for m in app.fake.messages() if m["channel"].startswith("D")]
        [dm] = dms
        text = card_text(dm["blocks"])
        assert f"👋 <@{CAROL}> your run `ray-pretrain-13b` needs you" in text
        assert f"<@{ALICE}> asked taubot to let you know" in text
        raw = json.dumps(dm["blocks"], ensure_ascii=False)
        for markup in ("<!channel>", "<@U123>", "<https://evil", "<!here>"):
            assert markup not in raw
        assert "&lt;!channel&gt;" in text
        assert "subteam" not in raw

        [_, note] = app.fake.thread(CHANNEL, parent["ts"])
        assert note["text"].startswith(f"📣 <@{ALICE}> notified the submitter, <@{CAROL}>")
        updated = app.fake.message(CHANNEL, card["ts"])
        assert updated is not None
        assert f"📣 Submitter notified by <@{ALICE}> at" in card_text(updated["blocks"])
        [line] = audit_lines(app)
        assert (line["owner"], line["target"], line["kind"]) == ("researcher", dm["channel"], "RayJob")


def test_no_dead_end_button_without_a_known_submitter_the_card_says_why(app: SlackApp) -> None:
    """Issue 15: a button is shown only when pressing it can work."""
    with cluster(app, _crashloop_with(None)):
        _, card = status_card(app, "ray-pretrain-13b")
        assert ESCALATE_ACTION not in action_ids(card["blocks"])
        assert "carries no `taugrid.io/submitted-by` annotation" in card_text(card["blocks"])
        assert not [m for m in app.fake.messages() if m["channel"].startswith("D")]
        assert audit_lines(app) == []


def test_no_escalate_button_for_an_owner_without_a_route(app: SlackApp) -> None:
    with cluster(app, example_objects("l5-job-unschedulable-gpu")):
        _, card = status_card(app, "llama-ft-7b")
        assert ESCALATE_ACTION not in action_ids(card["blocks"])
        assert "no escalation channel is configured for it" in card_text(card["blocks"])


def test_healthy_run_has_nothing_to_hand_off(app: SlackApp) -> None:
    objects = example_objects("l7-job-running-healthy")
    with cluster(app, objects) as emu:
        # Its pods' logs progress up to a minute ago (HF Trainer dicts, transformers 4.46), so the
        # Runtime progress check is active: nothing to hand off.
        seed_training_logs(emu, objects)
        _, card = status_card(app, "resnet-sweep-3")
        assert ESCALATE_ACTION not in action_ids(card["blocks"])
        assert "🔄 *First incomplete: Runtime progress* (active) — loss 1.2 (falling) at 2026-11-30 10:28:00Z" in (
            card_text(card["blocks"]))


def test_a_running_job_silent_for_an_hour_is_a_stall_handed_to_the_researcher(app: SlackApp) -> None:
    with cluster(app, example_objects("l7-job-running-healthy")):
        _, card = status_card(app, "resnet-sweep-3")
        text = card_text(card["blocks"])
        assert "⚠️ *First incomplete: Runtime progress* (warning) — no log output since" in text
        assert "layer 7: Runtime progress" in text
        assert "*Owner:* researcher" in text


def test_unmapped_clicker_is_refused_before_anything_is_queued(app: SlackApp) -> None:
    with cluster(app, example_objects("l4-job-localqueue-missing")):
        parent, card = status_card(app, "bert-distill")
        press(app, parent, card, user="U012NOBODY", response_id="nobody")
        assert "is not mapped to a Kubernetes identity" in ephemeral(app, "nobody")
        assert not app.fake.messages(PLATFORM_CHANNEL)


def test_workspace_not_ready_escalates_to_platform_checked_on_the_tauworkspace(app: SlackApp) -> None:
    """Layer 2: no run was read, so the access review is `get` on the TauWorkspace itself."""
    with running_emulator(workspace_objects(phase="Degraded")) as emu:
        write_descriptor(app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        parent, card = status_card(app, "bert-distill")
        assert escalate_button(card)["text"]["text"] == "Escalate to platform"
        emu.clear_requests()
        press(app, parent, card)
        [review] = emu.requests_to("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
        assert review.body["spec"]["resourceAttributes"] == {
            "verb": "get", "resource": "tauworkspaces", "group": "taugrid.io", "name": "vision"}
        [handoff] = app.fake.messages(PLATFORM_CHANNEL)
        assert "*Layer*\n2" in card_text(handoff["blocks"])


def test_a_press_from_another_channel_or_on_another_message_is_refused(app: SlackApp) -> None:
    """Issue 26.6: the signed value replayed in a press from another channel, or on another
    message of this channel, escalates nothing (no handoff, no note, card untouched)."""
    with cluster(app, example_objects("l4-job-localqueue-missing")) as emu:
        parent, card = status_card(app, "bert-distill")
        button = escalate_button(card)
        emu.clear_requests()
        for response_id, channel, ts in (("other-channel", "C0OTHERCH", card["ts"]),
                                         ("other-message", CHANNEL, parent["ts"])):
            body = block_action_body(ESCALATE_ACTION, button["value"], user_id=ALICE, channel_id=channel,
                                     message_ts=ts, thread_ts=parent["ts"], message=card,
                                     response_url=app.fake.response_url(response_id))
            status, _, _ = app.post(body)
            assert status == 200
            app.work()
            assert "not pressed on the card taubot offered it on" in ephemeral(app, response_id)
        assert not app.fake.messages(PLATFORM_CHANNEL)
        assert app.fake.message(CHANNEL, card["ts"]) == card
        assert len(app.fake.thread(CHANNEL, parent["ts"])) == 1
        assert audit_lines(app) == []
        assert not emu.requests_to("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
