"""The fake Slack Web API answers slack_sdk's real clients the way Slack does.

Other tests trust this fake to fail where production fails, so its shapes,
errors and fault injection are pinned here, through real HTTP only.
"""

from __future__ import annotations

import time
import urllib.error

import aiohttp
import pytest
from slack_bolt import App, BoltRequest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook import WebhookClient

from tests.fakes.slack_api import FakeSlack, running_fake_slack
from tests.fakes.slack_signing import (
    block_action_body,
    signed_headers,
    slash_command_body,
)

TOKEN = "xoxb-test-token"
SECRET = "test-signing-secret"
PROFILES = {
    "U012ALICE": {"email": "alice@example.com", "real_name": "Alice A", "name": "alice"},
}
USERGROUPS = {"S0VISION": {"handle": "vision", "users": ["U012ALICE"]}}


@pytest.fixture
def fake() -> FakeSlack:
    with running_fake_slack(profiles=PROFILES, usergroups=USERGROUPS) as fake:
        yield fake


@pytest.fixture
def client(fake: FakeSlack) -> WebClient:
    return WebClient(token=TOKEN, base_url=fake.api_url)


def test_post_update_and_read_back(fake: FakeSlack, client: WebClient) -> None:
    parent = client.chat_postMessage(channel="C1", text="run r")
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "card v1"}}]
    reply = client.chat_postMessage(channel="C1", thread_ts=parent["ts"], text="c", blocks=blocks)

    assert parent["ok"] and parent["channel"] == "C1"
    assert parent["ts"] != reply["ts"]
    assert reply["message"]["thread_ts"] == parent["ts"]
    assert reply["message"]["blocks"] == blocks
    # blocks arrive decoded whatever encoding slack_sdk chose
    assert fake.last("chat.postMessage").params["blocks"] == blocks
    assert fake.last("chat.postMessage").headers["Authorization"] == f"Bearer {TOKEN}"

    v2 = [{"type": "section", "text": {"type": "mrkdwn", "text": "card v2"}}]
    updated = client.chat_update(channel="C1", ts=reply["ts"], text="c2", blocks=v2)
    assert updated["ts"] == reply["ts"] and updated["text"] == "c2"
    assert fake.message("C1", reply["ts"])["blocks"] == v2
    assert [m["ts"] for m in fake.thread("C1", parent["ts"])] == [reply["ts"]]

    link = client.chat_getPermalink(channel="C1", message_ts=reply["ts"])["permalink"]
    ts_digits = reply["ts"].replace(".", "")
    assert link == (
        f"https://taugrid.slack.com/archives/C1/p{ts_digits}"
        f"?thread_ts={parent['ts']}&cid=C1"
    )

    client.chat_delete(channel="C1", ts=reply["ts"])
    assert fake.message("C1", reply["ts"]) is None


def test_ts_has_slack_shape() -> None:
    with running_fake_slack() as fake:
        client = WebClient(token=TOKEN, base_url=fake.api_url)
        ts = [client.chat_postMessage(channel="C1", text="x")["ts"] for _ in range(3)]
    seconds, micros = ts[0].split(".")
    assert len(seconds) == 10 and len(micros) == 6
    assert len(set(ts)) == 3 and ts == sorted(ts)


def test_update_of_unknown_message_fails(client: WebClient) -> None:
    with pytest.raises(SlackApiError) as err:
        client.chat_update(channel="C1", ts="1.000001", text="x")
    assert err.value.response["error"] == "message_not_found"


def test_token_is_required(fake: FakeSlack) -> None:
    with pytest.raises(SlackApiError) as err:
        WebClient(base_url=fake.api_url).chat_postMessage(channel="C1", text="x")
    assert err.value.response["error"] == "not_authed"
    with pytest.raises(SlackApiError) as err:
        WebClient(token="xoxp-user", base_url=fake.api_url).auth_test()
    assert err.value.response["error"] == "invalid_auth"


def test_blocks_over_slack_limits_are_rejected(client: WebClient) -> None:
    long_section = [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}]
    with pytest.raises(SlackApiError) as err:
        client.chat_postMessage(channel="C1", text="x", blocks=long_section)
    assert err.value.response["error"] == "invalid_blocks"
    assert "/blocks/0/text/text" in err.value.response["errors"][0]
    too_many = [{"type": "divider"}] * 51
    with pytest.raises(SlackApiError):
        client.chat_postMessage(channel="C1", text="x", blocks=too_many)


def test_users_and_groups(client: WebClient) -> None:
    user = client.users_info(user="U012ALICE")["user"]
    assert user["profile"]["email"] == "alice@example.com"
    assert user["real_name"] == "Alice A" and user["deleted"] is False
    with pytest.raises(SlackApiError) as err:
        client.users_info(user="U0NOBODY")
    assert err.value.response["error"] == "user_not_found"

    assert client.users_lookupByEmail(email="alice@example.com")["user"]["id"] == "U012ALICE"
    with pytest.raises(SlackApiError) as err:
        client.users_lookupByEmail(email="x@example.com")
    assert err.value.response["error"] == "users_not_found"

    groups = client.usergroups_list(include_users=True)["usergroups"]
    assert [(g["id"], g["users"]) for g in groups] == [("S0VISION", ["U012ALICE"])]
    assert "users" not in client.usergroups_list()["usergroups"][0]


def test_dm_ephemeral_and_views(fake: FakeSlack, client: WebClient) -> None:
    dm = client.conversations_open(users="U012ALICE")["channel"]["id"]
    assert dm.startswith("D")
    assert client.chat_postMessage(channel="U012ALICE", text="hi")["channel"] == dm

    assert client.chat_postEphemeral(channel="C1", user="U012ALICE", text="x")["message_ts"]

    view = {"type": "modal", "title": {"type": "plain_text", "text": "t"}, "blocks": []}
    opened = client.views_open(trigger_id="123.456", view=view)["view"]
    assert opened["id"].startswith("V") and fake.views[0]["title"] == view["title"]


def test_fail_next_is_one_shot(fake: FakeSlack, client: WebClient) -> None:
    fake.fail_next("chat.postMessage", error="channel_not_found")
    with pytest.raises(SlackApiError) as err:
        client.chat_postMessage(channel="C1", text="x")
    assert err.value.response["error"] == "channel_not_found"
    assert client.chat_postMessage(channel="C1", text="x")["ok"]
    assert len(fake.calls_to("chat.postMessage")) == 2


def test_rate_limit_answers_429_with_retry_after(fake: FakeSlack, client: WebClient) -> None:
    fake.rate_limit_next("chat.update", retry_after=7)
    ts = client.chat_postMessage(channel="C1", text="x")["ts"]
    with pytest.raises(SlackApiError) as err:
        client.chat_update(channel="C1", ts=ts, text="y")
    assert err.value.response.status_code == 429
    assert err.value.response.headers["Retry-After"] == "7"
    assert err.value.response["error"] == "ratelimited"


def test_rate_limit_is_retried_by_slack_sdk_handler(fake: FakeSlack) -> None:
    client = WebClient(token=TOKEN, base_url=fake.api_url)
    client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=1))
    fake.rate_limit_next("chat.postMessage", retry_after=0)
    assert client.chat_postMessage(channel="C1", text="x")["ok"]
    assert [c.status for c in fake.calls_to("chat.postMessage")] == [429, 200]


def test_down_refuses_connections_until_up(fake: FakeSlack, client: WebClient) -> None:
    fake.down()
    with pytest.raises(urllib.error.URLError):
        client.auth_test()
    fake.up()
    assert client.auth_test()["user_id"] == "U0TAUBOT"


async def test_async_client_and_down_with_pooled_session(fake: FakeSlack) -> None:
    client = AsyncWebClient(token=TOKEN, base_url=fake.api_url)
    res = await client.chat_postMessage(channel="C1", text="async")
    assert fake.message("C1", res["ts"])["text"] == "async"
    fake.down()
    with pytest.raises(aiohttp.ClientConnectionError):
        await client.auth_test()
    fake.up()
    assert (await client.auth_test())["ok"]


def test_response_url_records_and_enforces_five_uses(fake: FakeSlack) -> None:
    hook = WebhookClient(fake.response_url("cmd1"))
    for i in range(5):
        assert hook.send(text=f"n{i}", response_type="ephemeral").status_code == 200
    assert hook.send(text="sixth").status_code == 404
    assert [b["text"] for b in fake.responses("cmd1")] == [f"n{i}" for i in range(5)]
    assert fake.responses("cmd1")[0]["response_type"] == "ephemeral"


def test_wait_for_sees_calls_from_other_threads(fake: FakeSlack, client: WebClient) -> None:
    import threading

    threading.Timer(0.1, lambda: client.chat_postMessage(channel="C1", text="later")).start()
    assert fake.wait_for("chat.postMessage", timeout=5)[0].params["text"] == "later"


# ---------------------------------------------------------------- signing + Bolt


def _bolt_app(fake: FakeSlack) -> App:
    return App(
        signing_secret=SECRET,
        client=WebClient(token=TOKEN, base_url=fake.api_url),
    )


def test_signed_slash_command_reaches_bolt(fake: FakeSlack) -> None:
    app = _bolt_app(fake)
    assert fake.calls_to("auth.test"), "sync App verifies its token at construction"
    seen: dict[str, str] = {}

    @app.command("/tau")
    def tau(ack, command, respond) -> None:  # noqa: ANN001 - Bolt injects by name
        ack()
        seen.update(command)
        respond(text="queued")

    body = slash_command_body(text="status r", response_url=fake.response_url("c1"))
    resp = app.dispatch(BoltRequest(body=body, headers=signed_headers(SECRET, body)))
    assert resp.status == 200
    assert seen["text"] == "status r" and seen["user_id"] == "U012ALICE"
    assert fake.wait_for_responses("c1")[0]["text"] == "queued"


def test_bad_or_stale_signature_is_refused(fake: FakeSlack) -> None:
    app = _bolt_app(fake)
    app.command("/tau")(lambda ack: ack())
    body = slash_command_body()
    assert app.dispatch(BoltRequest(body=body, headers=signed_headers("wrong", body))).status == 401
    stale = signed_headers(SECRET, body, timestamp=int(time.time()) - 600)
    assert app.dispatch(BoltRequest(body=body, headers=stale)).status == 401


def test_signed_block_action_reaches_bolt(fake: FakeSlack) -> None:
    app = App(
        signing_secret=SECRET,
        client=WebClient(token=TOKEN, base_url=fake.api_url),
        process_before_response=True,  # run the listener before answering, to read `seen`
    )
    seen: dict = {}

    @app.action("escalate")
    def escalate(ack, body, action) -> None:  # noqa: ANN001 - Bolt injects by name
        ack()
        seen["action"] = action
        seen["container"] = body["container"]

    body = block_action_body(
        "escalate", '{"run":"r"}', channel_id="C1", message_ts="1.000100", thread_ts="1.000001"
    )
    resp = app.dispatch(BoltRequest(body=body, headers=signed_headers(SECRET, body)))
    assert resp.status == 200
    assert seen["action"]["value"] == '{"run":"r"}'
    assert seen["container"] == {
        "type": "message",
        "message_ts": "1.000100",
        "channel_id": "C1",
        "is_ephemeral": False,
        "thread_ts": "1.000001",
    }
