"""`/tau validate` in Slack: a pasted code block or a shared file → rq job → dry run as the user → card.

Slack sends slash-command text with `&`, `<` and `>` as HTML entities
(api.slack.com/reference/surfaces/formatting#escaping), so the paste below is
escaped the way Slack would send it, and the dry run must carry the original.
Files: `files.info` and `url_private_download` as api.slack.com/methods/files.info
documents them (the fake Slack serves both).
"""

from __future__ import annotations

from tests.fakes.kube_api import CallerIdentity, running_emulator, webhook_denial
from tests.fixtures.manifests import SAMPLE_RAYJOB_YAML, dump, sample
from tests.live.conftest import workspace_objects, write_descriptor

from .conftest import ALICE, BOT_TOKEN, CHANNEL, SlackApp
from .test_cards import card_text

NOTE = "loss < 2 & lr > 1e-5"
FILE_ID = "F07ABCDEF12"
FILE_LINK = f"<https://taugrid.slack.com/files/{ALICE}/{FILE_ID}/rayjob.yaml>"


def slack_escaped(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def the_card(app: SlackApp) -> tuple[dict, str]:
    [card] = [c for c in app.fake.calls_to("chat.postMessage") if c.params.get("blocks")]
    return card.params, card_text(card.params["blocks"])


def test_a_pasted_rayjob_is_dry_run_as_the_user_and_passes(slack_app: SlackApp) -> None:
    doc = sample("RayJob")
    doc["metadata"]["annotations"] = {"taugrid.io/note": NOTE}
    with running_emulator(workspace_objects()) as emu:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        status, ack, _ = slack_app.command("validate ```yaml\n" + slack_escaped(dump(doc)) + "```")
        assert status == 200 and "dry-running it on the API server as you" in ack["text"]
        slack_app.work()
        [post] = [r for r in emu.requests if r.method == "POST"]
    assert post.query.get("dryRun") == "All"
    assert post.identity.user == "alice@example.com"
    assert post.body["metadata"]["annotations"]["taugrid.io/note"] == NOTE  # Slack's entities undone
    params, text = the_card(slack_app)
    assert "Manifest validation · RayJob team-vision/rayjob-sample · layers 1–4 ✅ passed" in text
    assert "would accept it as you" in text
    assert "(pasted manifest," in text


def test_a_webhook_denial_is_quoted_escaped(slack_app: SlackApp) -> None:
    def hostile_webhook(obj: dict, caller: CallerIdentity) -> dict | None:
        # A webhook's message is cluster text: it may carry anything, including a mention.
        return webhook_denial("vrayjob.kb.io", "<!channel> spec.entrypoint: Forbidden: ``` *Ready* ```")

    with running_emulator(workspace_objects()) as emu:
        emu.admit("rayjobs", hostile_webhook)
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        slack_app.command("validate\n" + slack_escaped(SAMPLE_RAYJOB_YAML))
        slack_app.work()
    _, text = the_card(slack_app)
    assert "layer 3 ❌ failed" in text and "*Owner:* researcher" in text
    assert "The API server said:" in text
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text
    assert "```" not in text


def test_a_file_shared_in_the_channel_is_read_with_the_bot_token(slack_app: SlackApp) -> None:
    slack_app.fake.seed_file(FILE_ID, "rayjob.yaml", SAMPLE_RAYJOB_YAML.encode(), user=ALICE, channels=[CHANNEL])
    with running_emulator(workspace_objects()) as emu:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        slack_app.command(f"validate {slack_escaped(FILE_LINK)}")
        slack_app.work()
        assert [r.query.get("dryRun") for r in emu.requests if r.method == "POST"] == ["All"]
    assert slack_app.fake.downloads() == [f"Bearer {BOT_TOKEN}"]
    assert slack_app.fake.last("files.info").params["file"] == FILE_ID
    _, text = the_card(slack_app)
    assert "layers 1–4 ✅ passed" in text and f"(file {FILE_ID})" in text


def test_a_file_from_another_channel_is_not_read(slack_app: SlackApp) -> None:
    slack_app.fake.seed_file(FILE_ID, "rayjob.yaml", SAMPLE_RAYJOB_YAML.encode(), user="U0SOMEONE",
                             channels=[], groups=["G0PRIVATE"])
    with running_emulator(workspace_objects()) as emu:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        slack_app.command(f"validate {FILE_ID}")
        slack_app.work()
        assert not [r for r in emu.requests if r.method == "POST"]
    assert slack_app.fake.downloads() == []
    _, text = the_card(slack_app)
    assert "not shared in this channel" in text and "*Owner:* researcher" in text


def test_a_file_larger_than_it_claims_is_cut_off(slack_app: SlackApp) -> None:
    huge = b"a: b\n" * (60 * 1024)  # 300 KiB, while files.info claims 1 KiB
    slack_app.fake.seed_file(FILE_ID, "big.yaml", huge, user=ALICE, channels=[CHANNEL], size=1024)
    with running_emulator(workspace_objects()) as emu:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        slack_app.command(f"validate {FILE_ID}")
        slack_app.work()
    _, text = the_card(slack_app)
    assert "at most 256 KiB" in text


def test_no_manifest_and_a_bad_argument_get_usage_at_once(slack_app: SlackApp) -> None:
    _, ack, _ = slack_app.command("validate --workspace vision")
    assert "no manifest: paste the Job or RayJob YAML in a code block" in ack["text"]
    assert "/tau validate [--workspace W]" in ack["text"]
    _, ack, _ = slack_app.command("validate job.yaml")
    assert "is not a Slack file" in ack["text"]
    _, ack, _ = slack_app.command("validate --watch ```x```")
    assert "unknown option '--watch' for `/tau validate`" in ack["text"]
    assert not slack_app.queue.jobs


def test_help_lists_validate(slack_app: SlackApp) -> None:
    _, ack, _ = slack_app.command("help")
    assert "/tau validate" in ack["text"] and "dry-run it on the API server as you" in ack["text"]
