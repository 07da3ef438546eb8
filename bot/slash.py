"""`/tau` over HTTP, acked beside Bolt's dispatch: verify the signature, parse, enqueue, answer.

Why not through Bolt: an ack is CPU-bound and a burst of commands shares one interpreter lock,
so every step an ack takes delays the acks behind it. Measured on `taubot serve http` under 50
signed `/tau status` released at once (bench/ack_latency.py): Bolt's dispatch of a slash command
— its request object (every header and the body parsed again), six middlewares, each listener's
matchers tried in turn, keyword injection for each middleware and listener, its response object
— cost 0.1 ms of the 0.4 ms the ack took on its thread, on top of the command's own parse,
identity and enqueue (the Redis round trip, ~0.15 ms, is most of the rest). This path does only
what an ack is: Slack's signature checked with slack_sdk's own verifier (the one Bolt uses), the
form parsed as Bolt parses it, then `TauCommands.handle` — the same function Bolt's `/tau`
listener calls in Socket Mode (`bot/app.py`), so both answer alike.

A request whose signature does not verify is refused here, first, with Bolt's own answer (401,
`{"error": "invalid request"}`), before any byte of it is parsed: the endpoint is public, and
what Bolt does with an unsigned body before its signature check — parse it on a dispatch thread
(a megabyte of form fields is 170 ms of the interpreter lock; malformed JSON raised and answered
500 with a traceback), or, on this path, parse it on the event loop every ack waits on — is
anyone's to trigger. Only Slack's `ssl_check`, which Bolt answers before verifying, still goes to
Bolt unsigned, and only as small as Slack sends it. Anything else signed — presses, events,
another slash command — is Bolt's: `accepts` returns None. Because a command is known signed
before it is handed to its thread, the server can answer "still working" for it at the deadline
whatever its thread is doing (bot/serve.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from slack_bolt.context.respond import Respond
from slack_sdk import WebClient
from slack_sdk.signature import SignatureVerifier

from bot.commands import INTERNAL_ERROR, AckDeadline, TauCommands

log = logging.getLogger(__name__)

# What Bolt's `BoltResponse` sets for a JSON body, so the two paths answer with the same bytes.
JSON_CONTENT_TYPE = "application/json;charset=utf-8"


@dataclass(frozen=True)
class SlashAck:
    """The HTTP answer to a slash command: status, body and its content type."""

    status: int
    body: bytes
    content_type: str = JSON_CONTENT_TYPE


# Bolt's RequestVerification answer to a request that is not Slack's, byte for byte.
UNSIGNED = SlashAck(401, b'{"error": "invalid request"}')
# Slack's `ssl_check` is `ssl_check=1&token=…` (tens of bytes): Bolt answers it before any signature check.
SSL_CHECK_MAX_BYTES = 512


def _is_ssl_check(body: str) -> bool:
    """Slack's `ssl_check=1&token=…` and nothing else: any other field (a `payload`, which Bolt
    would parse as JSON before verifying) makes it a request to refuse."""
    fields = dict(parse_qsl(body, keep_blank_values=True))
    return "ssl_check" in fields and set(fields) <= {"ssl_check", "token"}


class SlashCommands:
    """The HTTP ack of one slash command (``command``, `/tau`): `accepts` on the server's event
    loop (a glance, the form and the signature: cheap), `answer` on the command's thread."""

    def __init__(self, commands: TauCommands, signing_secret: str, client: WebClient, command: str) -> None:
        self.commands = commands
        self.verifier = SignatureVerifier(signing_secret)
        self.client = client  # for the proxy and TLS settings of a late answer on response_url
        self.command = command

    def accepts(self, body: str, headers: Mapping[str, str]) -> dict[str, str] | SlashAck | None:
        """The payload of a signed ``command`` request (Slack's form fields); `UNSIGNED` for a
        request Slack did not sign (refused unparsed, see the module docstring); None for anything
        else — Bolt's to answer. ``headers`` by name, any case."""
        if not self.signed(body, headers):
            if len(body) <= SSL_CHECK_MAX_BYTES and _is_ssl_check(body):
                return None  # Bolt answers Slack's certificate check before verifying anything
            log.info("Invalid request signature detected (a %d-character body, not parsed)", len(body))
            return UNSIGNED
        if body.startswith("{") or "payload=" in body:  # an event (JSON) or a press (payload=…)
            return None
        payload = dict(parse_qsl(body, keep_blank_values=True))  # as Bolt's parse_body does
        if payload.get("command") != self.command or "ssl_check" in payload:
            return None
        return payload

    def signed(self, body: str, headers: Mapping[str, str]) -> bool:
        """Whether Slack signed ``body`` in the last 5 minutes (slack_sdk's verifier, as Bolt).
        The headers are checked as ASCII first: the verifier's `int()` reads '²' or '١٢٣' as a
        number or raises on it, and `hmac.compare_digest` raises on a non-ASCII signature."""
        timestamp = headers.get("x-slack-request-timestamp", "")
        signature = headers.get("x-slack-signature", "")
        if not (timestamp.isascii() and timestamp.isdigit() and signature.isascii()):
            return False
        return self.verifier.is_valid(body, timestamp, signature)

    def answer(self, payload: dict[str, str], *, arrived: float, deadline: AckDeadline) -> SlashAck:
        """The ack of an accepted command: authorize and enqueue under ``deadline`` (the HTTP
        server's, from ``arrived`` on `time.monotonic`), as `TauCommands.handle` does."""
        try:
            reply = self.commands.handle(payload, self._respond(payload), arrived=arrived, deadline=deadline)
        except Exception:  # noqa: BLE001 - the user hears of it, never a dispatch_failed
            log.exception("/tau failed before its ack")
            reply = INTERNAL_ERROR
        return SlashAck(200, json.dumps(reply.ack_kwargs()).encode())

    def _respond(self, payload: dict[str, Any]) -> Respond:
        """What Bolt's context would hand a listener as ``respond`` (nothing is sent by making it)."""
        return Respond(response_url=payload.get("response_url"), proxy=self.client.proxy, ssl=self.client.ssl)


__all__ = ["JSON_CONTENT_TYPE", "SSL_CHECK_MAX_BYTES", "UNSIGNED", "SlashAck", "SlashCommands"]
