"""The HTTP app as Slack reaches it: signed requests over real HTTP to `bot.serve`'s server.

Each test reads what came back (the ack body Slack would show) and what the
app did next (jobs in Redis, calls received by the fake Slack).
"""

from __future__ import annotations

import http.client
import io
import json
import logging
import time
import urllib.request
from pathlib import Path

import pytest
from redis import Redis
from rq import Queue

from bot.app import build_app
from bot.serve import BackgroundServer
from tests.fakes.slack_signing import block_action_body, signed_headers, slash_command_body
from workers.outside.logsafe import configure

from .conftest import ALICE, SECRET, SlackApp, make_settings


def test_signed_slash_command_is_acked_with_diagnosing_note_and_queues_one_job(slack_app: SlackApp) -> None:
    status, ack, seconds = slack_app.command("status llama-ft-7b --watch")
    assert status == 200
    assert seconds < 3
    assert ack["response_type"] == "ephemeral"
    assert "Diagnosing `llama-ft-7b`" in ack["text"]
    assert "`--watch`: the card then updates in place" in ack["text"]
    assert slack_app.queue.count == 1
    job = slack_app.queue.jobs[0]
    assert job.func_name == "workers.jobs.status_job"
    request = job.args[0]
    assert request["command"]["run"] == "llama-ft-7b" and request["command"]["watch"] is True
    assert request["identity"] == {"user": "alice@example.com", "groups": ["team-vision", "gpu-users"]}
    assert request["channel"] == "C012VISION" and request["user"] == ALICE
    assert job.timeout == slack_app.settings.job_timeout_seconds


def test_bad_signature_is_401_and_queues_nothing(slack_app: SlackApp) -> None:
    body = slash_command_body(text="status r")
    headers = signed_headers("not-the-secret", body)
    status, _, _ = slack_app.post(body, headers=headers)
    assert status == 401
    assert slack_app.queue.count == 0


def test_tampered_body_is_401(slack_app: SlackApp) -> None:
    headers = signed_headers(SECRET, slash_command_body(text="status r"))
    status, _, _ = slack_app.post(slash_command_body(text="status other"), headers=headers)
    assert status == 401


def test_request_older_than_five_minutes_is_401(slack_app: SlackApp) -> None:
    body = slash_command_body(text="status r")
    status, _, _ = slack_app.post(body, timestamp=int(time.time()) - 6 * 60)
    assert status == 401
    assert slack_app.queue.count == 0


def test_signed_interactivity_is_200_and_bad_or_old_is_401(slack_app: SlackApp) -> None:
    body = block_action_body("escalate", "{}")
    assert slack_app.post(body)[0] == 200
    assert slack_app.post(body, headers=signed_headers("wrong", body))[0] == 401
    assert slack_app.post(body, timestamp=int(time.time()) - 301 - 60)[0] == 401


def test_usage_error_is_ephemeral_names_the_error_and_shows_usage(slack_app: SlackApp) -> None:
    status, ack, _ = slack_app.command("status My_Run")
    assert status == 200
    assert ack["response_type"] == "ephemeral"
    assert "invalid run name 'My_Run'" in ack["text"]
    assert "`/tau status &lt;run&gt; [--workspace W]" in ack["text"]
    assert slack_app.queue.count == 0


def test_user_text_is_escaped_in_usage_errors(slack_app: SlackApp) -> None:
    _, ack, _ = slack_app.command("status <!channel>")
    assert "<!channel>" not in ack["text"] and "&lt;!channel&gt;" in ack["text"]


def test_help_lists_working_commands(slack_app: SlackApp) -> None:
    _, ack, _ = slack_app.command("help")
    assert ack["response_type"] == "ephemeral"
    for usage in ("/tau status", "/tau logs", "/tau workspace connection", "/tau workspace status",
                  "/tau help"):
        assert usage in ack["text"]
    assert "/tau logs" in ack["text"]  # it works now (SPEC §7a)
    assert slack_app.queue.count == 0


def test_help_of_one_command_explains_its_flags_with_an_example(slack_app: SlackApp) -> None:
    _, ack, _ = slack_app.command("help status")
    assert ack["response_type"] == "ephemeral"
    text = ack["text"]
    for flag in ("`--watch`", "`--interval N`", "`--run-profile`", "`--workspace W`"):
        assert flag in text
    assert "Example: `/tau status llama-ft-7b --watch --interval 30`" in text
    assert "/tau logs" not in text  # one command, not the whole list
    assert slack_app.queue.count == 0


@pytest.mark.parametrize(("typed", "meant"), [("statsu llama-ft-7b", "`/tau status`"),
                                              ("status llama-ft-7b --wach", "`--watch`"),
                                              ("help stauts", "`/tau help status`")])
def test_a_typo_gets_did_you_mean_and_a_short_answer(slack_app: SlackApp, typed: str, meant: str) -> None:
    _, ack, _ = slack_app.command(typed)
    assert f"did you mean {meant}?" in ack["text"]
    assert len(ack["text"].splitlines()) <= 4
    assert slack_app.queue.count == 0


def test_unknown_input_gets_one_line_of_commands(slack_app: SlackApp) -> None:
    _, ack, _ = slack_app.command("frobnicate everything")
    lines = ack["text"].splitlines()
    assert lines[0] == "⚠️ unknown command 'frobnicate'"
    assert len(lines) == 2 and "`status`" in lines[1] and "`/tau help &lt;command&gt;`" in lines[1]


def test_unmapped_user_is_refused_with_whom_to_ask_and_no_job(slack_app: SlackApp) -> None:
    status, ack, _ = slack_app.command("status r", user_id="U0STRANGER")
    assert status == 200
    assert ack["response_type"] == "ephemeral"
    assert "not mapped to a Kubernetes identity" in ack["text"]
    assert "platform operator" in ack["text"]
    assert slack_app.queue.count == 0
    assert slack_app.fake.calls_to("chat.postMessage") == []


def test_redis_down_gives_ephemeral_error_within_three_seconds(
    slack_app: SlackApp, tmp_path: Path
) -> None:
    """Point the app at a closed port: the ack says the queue is unreachable, no exception."""
    dead = "redis://127.0.0.1:1/0"
    settings = make_settings(slack_app.fake, dead, tmp_path)
    app = build_app(settings)  # its own Redis client and queue, both on the closed port
    body = slash_command_body(text="status r", user_id=ALICE, channel_id="C012VISION")
    with BackgroundServer(app) as server:
        request = urllib.request.Request(server.url + "/slack/events", data=body.encode(),
                                         headers=signed_headers(SECRET, body), method="POST")
        started = time.monotonic()
        with urllib.request.urlopen(request, timeout=10) as response:
            status, ack = response.status, json.loads(response.read())
        seconds = time.monotonic() - started
    assert status == 200
    assert seconds < 3
    assert ack["response_type"] == "ephemeral"
    assert "queue (Redis) is unreachable" in ack["text"]
    assert "Nothing was started" in ack["text"]


def test_healthz_and_unknown_paths(slack_app: SlackApp) -> None:
    with urllib.request.urlopen(slack_app.server.url + "/healthz", timeout=5) as response:
        assert response.status == 200 and response.read() == b"ok\n"
    try:
        urllib.request.urlopen(slack_app.server.url + "/nope", timeout=5)
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
    else:
        raise AssertionError("expected 404")


def test_workspace_command_is_queued(slack_app: SlackApp) -> None:
    _, ack, _ = slack_app.command("workspace status vision")
    assert "Checking `/tau workspace status vision`" in ack["text"]
    assert [j.func_name for j in slack_app.queue.jobs] == ["workers.jobs.workspace_job"]


def test_app_token_verification_uses_the_fake(redis_url: str, tmp_path: Path) -> None:
    """Bolt's auth.test at construction goes to the configured API URL."""
    from tests.fakes.slack_api import running_fake_slack

    with running_fake_slack() as fake:
        settings = make_settings(fake, redis_url, tmp_path)
        build_app(settings, queue=Queue("x", connection=Redis.from_url(redis_url)))
        assert fake.calls_to("auth.test")


def test_an_oversized_unsigned_body_is_refused_before_it_is_read(slack_app: SlackApp,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    head = "token=x&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT0%2F1%2Fsecret&text="
    host, port = slack_app.server.host, slack_app.server.port
    with caplog.at_level(logging.INFO):
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.putrequest("POST", "/slack/events")
        for name, value in (("Content-Type", "application/x-www-form-urlencoded"),
                            ("Content-Length", str(10 << 20)), ("X-Slack-Request-Timestamp", "1"),
                            ("X-Slack-Signature", "v0=x")):
            conn.putheader(name, value)
        conn.endheaders()
        conn.send(head.encode())  # 10 MiB announced, a few bytes sent: the answer must not wait for more
        status = conn.getresponse().status
        conn.close()
    assert status == 413
    assert slack_app.queue.count == 0
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(lines) == 1 and len(lines[0]) < 300 and "hooks.slack.com" not in lines[0]


def test_a_malformed_signature_timestamp_is_401_not_500(slack_app: SlackApp) -> None:
    body = slash_command_body(text="status r", response_url=slack_app.fake.response_url("x"))
    status, _, _ = slack_app.post(body, headers={"X-Slack-Request-Timestamp": "soon",
                                                 "X-Slack-Signature": "v0=" + "0" * 64,
                                                 "Content-Type": "application/x-www-form-urlencoded"})
    assert status == 401 and slack_app.queue.count == 0


def test_capability_urls_and_tokens_never_reach_a_log_line() -> None:
    from workers.outside.logsafe import Redactor

    record = logging.LogRecord("slack_bolt", logging.INFO, __file__, 1,
                               "Invalid request signature detected (body: %s) token %s", (
                                   "response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT0%2F12%2Fs3cr3t&text="
                                   + "x" * 5000, "xoxb-1234-secret"), None)
    Redactor().filter(record)
    message = record.getMessage()
    assert "s3cr3t" not in message and "xoxb-1234-secret" not in message and len(message) <= 600
    assert "[redacted]" in message


def test_a_rejected_body_is_logged_without_the_verification_token_or_its_response_url(
        slack_app: SlackApp) -> None:
    """Issue 26.5: Bolt logged the body of a request whose signature fails, with Slack's
    verification token (`token=…`) and a response_url — here on the fake Slack's host, not
    `hooks.slack.com`. Such a request is now refused before Bolt (bot/slash.py) with a line that
    quotes none of it; through the handler production configures, neither is written."""
    response_url = slack_app.fake.response_url("leak1")
    body = slash_command_body(text="status r", response_url=response_url)
    stream = io.StringIO()
    handler = configure(logging.StreamHandler(stream), json_lines=False)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    # Bolt copies the root's level when the app is built: INFO in production (`install`).
    loggers = [logging.getLogger(name) for name in ("slack_bolt.RequestVerification", "bot.slash")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.INFO)
    try:
        status, _, _ = slack_app.post(body, headers={
            **signed_headers(SECRET, body), "X-Slack-Signature": "v0=" + "0" * 64})
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        root.removeHandler(handler)
    assert status == 401 and slack_app.queue.count == 0
    written = stream.getvalue()
    assert "gIkuvaNzQIHg97ATvDxqgjtO" in body and "gIkuvaNzQIHg97ATvDxqgjtO" not in written
    assert "leak1" not in written
    assert "signature" in written.lower()  # the refusal is still said
