"""`/tau validate` in Slack: a pasted code block or a shared file → rq job → dry run as the user → card.

Slack sends slash-command text with `&`, `<` and `>` as HTML entities
(api.slack.com/reference/surfaces/formatting#escaping), so the paste below is
escaped the way Slack would send it, and the dry run must carry the original.
Files: `files.info` and `url_private_download` as api.slack.com/methods/files.info
documents them (the fake Slack serves both).
"""

from __future__ import annotations

import http.server
import threading

import pytest

from tests.fakes.kube_api import CallerIdentity, running_emulator, webhook_denial
from tests.fixtures.manifests import SAMPLE_RAYJOB_YAML, dump, sample
from tests.live.conftest import workspace_objects, write_descriptor
from workers.surfaces.downloads import hop_policy

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


class FileHost:
    """Another host a redirect can name: 127.0.0.1 on a port of its own (so neither Slack's
    host nor the Web API's origin), recording the `Authorization` header of every request and
    answering a manifest, so a followed redirect would be dry-run."""

    def __init__(self) -> None:
        seen: list[str | None] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                seen.append(self.headers.get("Authorization"))
                body = SAMPLE_RAYJOB_YAML.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self.requests = seen
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/F07ABCDEF12/rayjob.yaml"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_off_slack_is_not_followed_and_never_gets_the_token(slack_app: SlackApp, code: int) -> None:
    """Issue 26.1: urllib copied `Authorization: Bearer xoxb-…` onto whatever host a redirect
    named, and dry-ran what that host answered. Now the other host is never asked."""
    host = FileHost()
    try:
        slack_app.fake.seed_file(FILE_ID, "rayjob.yaml", b"", user=ALICE, channels=[CHANNEL],
                                 redirect=(code, host.url))
        with running_emulator(workspace_objects()) as emu:
            write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
            slack_app.command(f"validate {FILE_ID}")
            slack_app.work()
            assert not [r for r in emu.requests if r.method == "POST"]  # nothing dry-run
    finally:
        host.close()
    assert host.requests == []  # not even a token-less request: the hop is refused
    assert slack_app.fake.downloads() == [f"Bearer {BOT_TOKEN}"]  # Slack's own host, once
    _, text = the_card(slack_app)
    assert "download redirected off Slack, not followed" in text
    assert BOT_TOKEN not in text


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_among_slack_file_hosts_keeps_the_token(slack_app: SlackApp, code: int) -> None:
    """Slack may redirect a download among its own hosts, which still want the token
    (github.com/nextlevelbuilder/goclaw/pull/233): followed, with the header, and read."""
    slack_app.fake.seed_file(FILE_ID, "rayjob.yaml", SAMPLE_RAYJOB_YAML.encode(), user=ALICE,
                             channels=[CHANNEL],
                             redirect=(code, slack_app.fake.origin_url(FILE_ID, "rayjob.yaml")))
    with running_emulator(workspace_objects()) as emu:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        slack_app.command(f"validate {FILE_ID}")
        slack_app.work()
        assert [r.query.get("dryRun") for r in emu.requests if r.method == "POST"] == ["All"]
    assert slack_app.fake.downloads() == [f"Bearer {BOT_TOKEN}"] * 2
    _, text = the_card(slack_app)
    assert "layers 1–4 ✅ passed" in text


@pytest.mark.parametrize(("url", "policy"), [
    ("https://files.slack.com/files-pri/T0-F1/download/a.yaml", "token"),
    ("https://taugrid.enterprise.slack.com/files-pri/T0-F1/a.yaml", "token"),
    ("http://files.slack.com/files-pri/T0-F1/download/a.yaml", "refuse"),  # never in clear text
    ("https://files.slack.com.evil.example/x", "refuse"),
    ("https://evilslack.com/x", "refuse"),
    ("https://a.slack-edge.com/presigned/x", "anonymous"),
    ("https://files.slack-files.com/x", "anonymous"),
    ("http://127.0.0.1:8089/files-pri/x", "token"),  # the configured API origin (here, the fake)
    ("http://127.0.0.1:8090/files-pri/x", "refuse"),  # the same host on another port
    ("https://127.0.0.1:8089/x", "refuse"),
    ("http://127.0.0.1:notaport/x", "refuse"),
    ("/relative", "refuse"),
])
def test_which_hosts_get_the_token(url: str, policy: str) -> None:
    assert hop_policy(url, "http://127.0.0.1:8089/api/") == policy
