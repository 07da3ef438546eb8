"""`/slack/events` as anyone on the internet reaches it: requests Slack did not sign (SPEC §7, §11).

The endpoint is public (the Ingress's), so whatever a request does before its signature is
checked is anyone's to trigger. Each answer is compared with Bolt's own to a request it refuses
(`slack_bolt` RequestVerification: 401, `{"error": "invalid request"}`): never a 500, never a
traceback, nothing queued. Bodies are sent as raw bytes over HTTP (http.client), headers too,
so that non-ASCII header values reach the server as a client can send them.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import tracemalloc

import pytest

from tests.fakes.slack_signing import signed_headers, slash_command_body

from .conftest import SECRET, SlackApp

BOLT_REFUSAL = (401, {"error": "invalid request"})  # slack_bolt RequestVerification._build_error_response
FORM = "application/x-www-form-urlencoded"


def send(app: SlackApp, body: bytes, headers: dict[str, str | bytes]) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(app.server.host, app.server.port, timeout=10)
    try:
        conn.putrequest("POST", "/slack/events")
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            conn.putheader(name, value)
        conn.endheaders()
        conn.send(body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def answer(status: int, body: bytes) -> tuple[int, object]:
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


@pytest.mark.parametrize("timestamp, signature", [
    ("²".encode(), None),  # str.isdigit() says yes, int() raises: was a 500 and a traceback
    ("١٢٣".encode(), None),  # Arabic-Indic digits, which int() reads as 123
    (None, "v0=é".encode()),  # hmac.compare_digest raises on non-ASCII: was a 500
    (None, b""),
], ids=["superscript-two", "arabic-digits", "non-ascii-signature", "blank-signature"])
def test_a_signature_header_that_is_no_number_or_not_ascii_is_refused_as_bolt_refuses(
        slack_app: SlackApp, caplog: pytest.LogCaptureFixture, timestamp: bytes | None,
        signature: bytes | None) -> None:
    body = slash_command_body(text="status llama-ft-7b")
    good = signed_headers(SECRET, body)
    headers: dict[str, str | bytes] = {"Content-Type": FORM,
                                       "X-Slack-Request-Timestamp": timestamp or good["X-Slack-Request-Timestamp"],
                                       "X-Slack-Signature": good["X-Slack-Signature"] if signature is None
                                       else signature}
    with caplog.at_level(logging.INFO):
        got = answer(*send(slack_app, body.encode(), headers))
    assert got == BOLT_REFUSAL
    assert slack_app.queue.count == 0
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


@pytest.mark.parametrize("body", [b"{not json", b"payload=not-json", b"payload=%5B1%5D",
                                  b'{"type": "event_callback"}', b"command=%2Ftau&text=status+r"],
                         ids=["broken-json", "broken-press", "press-not-an-object", "event", "command"])
def test_an_unsigned_body_of_any_shape_is_refused_as_bolt_refuses_without_a_500(
        slack_app: SlackApp, caplog: pytest.LogCaptureFixture, body: bytes) -> None:
    """Bolt parses a body before it checks its signature: broken JSON, as an event or a press's
    `payload`, raised there and was answered 500 with a traceback logged, for anyone."""
    headers = {"Content-Type": FORM, "X-Slack-Request-Timestamp": str(int(time.time())),
               "X-Slack-Signature": "v0=" + "0" * 64}
    with caplog.at_level(logging.INFO):
        got = answer(*send(slack_app, body, headers))
    assert got == BOLT_REFUSAL
    assert slack_app.queue.count == 0
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_an_unsigned_megabyte_of_form_fields_is_refused_unparsed(slack_app: SlackApp) -> None:
    """250,000 form fields took `parse_qsl` 170 ms on the server's event loop — every ack waits on
    that loop — and 30 MB, before the signature was looked at. Refused first, the body costs a
    few copies of itself (read, decoded, hashed): measured by what the process allocates, not time."""
    body = ("command=%2Ftau&" + "a=b&" * 250_000)[:1_000_000].encode()
    headers = {"Content-Type": FORM, "X-Slack-Request-Timestamp": str(int(time.time())),
               "X-Slack-Signature": "v0=" + "0" * 64}
    tracemalloc.start()
    try:
        got = answer(*send(slack_app, body, headers))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == BOLT_REFUSAL and slack_app.queue.count == 0
    assert peak < 8 * len(body), f"{peak / 1e6:.1f} MB allocated for an unsigned {len(body) / 1e6:.1f} MB body"


def test_slacks_ssl_check_is_still_answered_unsigned_as_bolt_does(slack_app: SlackApp) -> None:
    """api.slack.com/interactivity/slash-commands: `ssl_check=1&token=…`, which Bolt answers 200
    before any signature check; only that small body goes to Bolt unsigned."""
    status, body = send(slack_app, b"ssl_check=1&token=gIkuvaNzQIHg97ATvDxqgjtO", {"Content-Type": FORM})
    assert (status, body) == (200, b"")
    padded = b"ssl_check=1&token=x&" + b"a=b&" * 1000  # no ssl_check Slack sends
    assert answer(*send(slack_app, padded, {"Content-Type": FORM})) == BOLT_REFUSAL
    # … nor one with a press's payload, which Bolt parses as JSON before it verifies anything
    assert answer(*send(slack_app, b"ssl_check=1&payload=not-json", {"Content-Type": FORM})) == BOLT_REFUSAL
    assert slack_app.queue.count == 0


def test_a_signed_command_is_still_acked_and_a_replay_within_five_minutes_is_too_as_bolt_does(
        slack_app: SlackApp) -> None:
    """Slack's signature has no nonce: Bolt takes the same signed request twice within its 5
    minutes, and so does this path (a replay needs the request itself, sent over TLS)."""
    body = slash_command_body(text="status llama-ft-7b", response_url=slack_app.fake.response_url("r"))
    headers = signed_headers(SECRET, body)
    for queued in (1, 2):
        status, raw = send(slack_app, body.encode(), dict(headers))
        assert status == 200 and "Diagnosing" in json.loads(raw)["text"]
        assert slack_app.queue.count == queued
