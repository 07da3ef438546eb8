"""Build signed Slack HTTP requests, as Slack sends them, for the Bolt HTTP app.

Why: a test of a Slack path must pass Bolt's real signature check (the
request is rejected otherwise), so bodies are encoded exactly as Slack
encodes them (form-encoded; interactive payloads as a JSON ``payload`` field)
and signed with slack_sdk's own ``SignatureVerifier``.

Shapes: slash command fields from docs.slack.dev "Implementing slash
commands" (the form Slack POSTs); ``block_actions`` payload from
docs.slack.dev reference/interaction-payloads/block_actions-payload.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

from slack_sdk.signature import SignatureVerifier

FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"

DEFAULT_TEAM_ID = "T0TAUGRID"
DEFAULT_TEAM_DOMAIN = "taugrid"
DEFAULT_APP_ID = "A0TAUBOT"


def signed_headers(
    secret: str,
    body: str | bytes,
    timestamp: int | None = None,
    content_type: str = FORM_CONTENT_TYPE,
) -> dict[str, str]:
    """Headers Slack sends with ``body``: ``X-Slack-Request-Timestamp`` and the
    ``v0=`` HMAC signature over ``v0:{timestamp}:{body}``.

    ``timestamp`` defaults to now; pass an old one to test replay rejection
    (Bolt refuses requests older than five minutes).
    """
    ts = str(int(time.time()) if timestamp is None else timestamp)
    raw = body.decode() if isinstance(body, bytes) else body
    signature = SignatureVerifier(secret).generate_signature(timestamp=ts, body=raw)
    return {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature,
    }


def slash_command_body(
    command: str = "/tau",
    text: str = "status r",
    *,
    user_id: str = "U012ALICE",
    user_name: str = "alice",
    channel_id: str = "C012ABCDEF",
    channel_name: str = "team-vision",
    response_url: str = "https://hooks.slack.com/commands/T0TAUGRID/1/abc",
    trigger_id: str = "13345224609.738474920.8088930838d88f008e0",
    team_id: str = DEFAULT_TEAM_ID,
    team_domain: str = DEFAULT_TEAM_DOMAIN,
    api_app_id: str = DEFAULT_APP_ID,
) -> str:
    """The form-encoded body Slack POSTs for a slash command invocation."""
    return urlencode(
        {
            "token": "gIkuvaNzQIHg97ATvDxqgjtO",  # deprecated verification token
            "team_id": team_id,
            "team_domain": team_domain,
            "channel_id": channel_id,
            "channel_name": channel_name,
            "user_id": user_id,
            "user_name": user_name,
            "command": command,
            "text": text,
            "api_app_id": api_app_id,
            "is_enterprise_install": "false",
            "response_url": response_url,
            "trigger_id": trigger_id,
        }
    )


def block_action_payload(
    action_id: str,
    value: str,
    *,
    user_id: str = "U012ALICE",
    user_name: str = "alice",
    channel_id: str = "C012ABCDEF",
    channel_name: str = "team-vision",
    message_ts: str = "1764464220.000100",
    thread_ts: str | None = None,
    block_id: str = "actions",
    button_text: str = "Button",
    message: dict[str, Any] | None = None,
    response_url: str = "https://hooks.slack.com/actions/T0TAUGRID/1/xyz",
    trigger_id: str = "13345224609.738474920.8088930838d88f008e0",
    team_id: str = DEFAULT_TEAM_ID,
    team_domain: str = DEFAULT_TEAM_DOMAIN,
    api_app_id: str = DEFAULT_APP_ID,
) -> dict[str, Any]:
    """A ``block_actions`` payload for a button press on a message.

    ``message`` is the message the button sits on as Slack echoes it (pass the
    fake's stored message to mirror production); a minimal one otherwise.
    """
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel_id,
        "is_ephemeral": False,
    }
    if thread_ts:
        container["thread_ts"] = thread_ts
    echoed = message or {
        "type": "message",
        "subtype": "bot_message",
        "text": "",
        "ts": message_ts,
        "bot_id": "B0TAUBOT",
        "blocks": [],
    }
    if thread_ts and "thread_ts" not in echoed:
        echoed = {**echoed, "thread_ts": thread_ts}
    return {
        "type": "block_actions",
        "user": {"id": user_id, "username": user_name, "name": user_name, "team_id": team_id},
        "api_app_id": api_app_id,
        "token": "gIkuvaNzQIHg97ATvDxqgjtO",
        "container": container,
        "trigger_id": trigger_id,
        "team": {"id": team_id, "domain": team_domain},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel_id, "name": channel_name},
        "message": echoed,
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id,
                "text": {"type": "plain_text", "text": button_text, "emoji": True},
                "value": value,
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


def block_action_body(action_id: str, value: str, **kwargs: Any) -> str:
    """The form-encoded body Slack POSTs for a button press: one ``payload`` field
    holding the JSON of ``block_action_payload(action_id, value, **kwargs)``."""
    payload = block_action_payload(action_id, value, **kwargs)
    return urlencode({"payload": json.dumps(payload)})
