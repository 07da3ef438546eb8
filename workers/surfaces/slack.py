"""The Slack Web API as a `Surface`: pacing, 429s and Slack's error strings, in one place.

Why here: `chat.update` shares a tier-3 budget per workspace (~50 a minute)
with every watch, and `chat.postMessage` about one a second per channel;
the Redis pacer (`pacing.py`) keeps every worker inside both. A 429 that
survives slack_sdk's retry handler pushes the workspace key back by its
`Retry-After` so every worker waits. Slack's error strings become the
outcomes of `base.py`, so a flow never parses one.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.webhook import WebhookClient

from workers.plumbing.metrics import SLACK_CALLS, SLACK_RATELIMITED

from .base import Failed, Sent
from .downloads import RedirectRefused, download, hop_policy
from .pacing import SlackPacer

log = logging.getLogger(__name__)

GONE = frozenset({"message_not_found", "channel_not_found", "is_archived", "thread_not_found"})
CANNOT_POST = frozenset({"not_in_channel", "channel_not_found", "is_archived", "restricted_action"})
_PERMALINK = re.compile(r"^https://[^\s<>|]+$")


def slack_error(exc: SlackApiError) -> str:
    return str(exc.response.get("error") or "") if exc.response is not None else ""


def retry_after(exc: SlackApiError) -> float | None:
    if exc.response is None or exc.response.status_code != 429:
        return None
    headers = exc.response.headers or {}
    value = headers.get("Retry-After") or headers.get("retry-after") or "1"
    try:
        return float(value if isinstance(value, str) else value[0])
    except (TypeError, ValueError):
        return 1.0


class SlackSurface:
    """A bot-token WebClient behind the `Surface` interface."""

    def __init__(self, client: WebClient, pacer: SlackPacer | None) -> None:
        self.client = client
        self.pacer = pacer
        self._identity: tuple[str, str] | None = None  # (user_id, bot_id), from auth.test once

    def is_own(self, message: dict[str, Any]) -> bool | Failed:
        """Whether ``message`` (from `history` or `replies`) was posted by this bot: its ``bot_id``
        or ``user`` is the token's own, as ``auth.test`` answers (``user_id``, ``bot_id``). Any app
        in a channel can attach any metadata to its messages, so only taubot's own are taubot's."""
        if self._identity is None:
            try:
                answer = self.client.auth_test()
            except (SlackApiError, SlackClientError, OSError) as exc:
                return self._failed(exc, GONE, "auth.test")
            SLACK_CALLS.labels("auth.test", "ok").inc()
            self._identity = (str(answer.get("user_id") or ""), str(answer.get("bot_id") or ""))
        user_id, bot_id = self._identity
        return bool((bot_id and message.get("bot_id") == bot_id)
                    or (user_id and message.get("user") == user_id))

    def _failed(self, exc: Exception, gone: frozenset[str], method: str = "other") -> Failed:
        failed = self._classify(exc, gone)
        SLACK_CALLS.labels(method, failed.kind).inc()
        if failed.error == "ratelimited":
            SLACK_RATELIMITED.labels(method).inc()
        return failed

    def _classify(self, exc: Exception, gone: frozenset[str]) -> Failed:
        if isinstance(exc, SlackApiError):
            error = slack_error(exc)
            wait = retry_after(exc)
            if wait is not None:
                if self.pacer is not None:
                    self.pacer.penalize("chat.update", wait)
                return Failed(kind="deferred", error="ratelimited", retry_after=wait)
            if error in gone:
                return Failed(kind="gone" if gone is GONE else "cannot_post", error=error)
            if error in ("users_not_found", "user_not_found"):
                return Failed(kind="not_found", error=error)
            return Failed(kind="error", error=error or type(exc).__name__)
        return Failed(kind="unreachable", error=type(exc).__name__)

    def post(self, channel: str, text: str, blocks: list[dict[str, Any]] | None = None, *,
             thread_ts: str | None = None, paced: float | None = None,
             metadata: dict[str, Any] | None = None) -> Sent | Failed:
        if paced is not None and self.pacer is not None:
            if paced <= 0:
                wait = self.pacer.try_acquire("chat.postMessage", channel)
                if wait > 0:
                    return Failed(kind="deferred", error="paced", retry_after=wait)
            elif not self.pacer.acquire("chat.postMessage", channel, max_wait=paced):
                return Failed(kind="deferred", error="paced")
        try:
            response = self.client.chat_postMessage(channel=channel, text=text, blocks=blocks,
                                                    thread_ts=thread_ts, unfurl_links=False,
                                                    unfurl_media=False, metadata=metadata)
        except (SlackApiError, SlackClientError, OSError) as exc:
            return self._failed(exc, CANNOT_POST, "chat.postMessage")
        SLACK_CALLS.labels("chat.postMessage", "ok").inc()
        return Sent(channel=str(response.get("channel") or channel), ts=str(response["ts"]))

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]], *,
               max_wait: float, reserve_within: float = 0.0, reserved: bool = False) -> Sent | Failed:
        if self.pacer is not None and not reserved:  # a reserved slot was counted when it was taken
            if max_wait <= 0:  # never sleep: say how long until a slot, and let the caller re-schedule
                wait, got = self.pacer.reserve("chat.update", channel, within=reserve_within)
                if wait > 0:
                    return Failed(kind="deferred", error="reserved" if got else "paced", retry_after=wait,
                                  slot_reserved=bool(got))
            elif not self.pacer.acquire("chat.update", channel, max_wait=max_wait):
                return Failed(kind="deferred", error="paced")
        try:
            self.client.chat_update(channel=channel, ts=ts, text=text, blocks=blocks)
        except (SlackApiError, SlackClientError, OSError) as exc:
            return self._failed(exc, GONE, "chat.update")
        SLACK_CALLS.labels("chat.update", "ok").inc()
        return Sent(channel=channel, ts=ts)

    def ephemeral(self, channel: str, user: str, text: str) -> bool:
        try:
            self.client.chat_postEphemeral(channel=channel, user=user, text=text)
            return True
        except (SlackApiError, SlackClientError, OSError) as exc:
            log.info("could not answer %s privately: %s", user, exc)
            return False

    def respond(self, response_url: str, text: str, blocks: list[dict[str, Any]] | None = None) -> bool:
        try:
            WebhookClient(response_url, timeout=10).send(text=text, blocks=blocks, response_type="ephemeral",
                                                         replace_original=False)
            return True
        except Exception as exc:  # noqa: BLE001 - a lost private answer is logged, never raised
            log.info("response_url answer failed: %s", type(exc).__name__)
            return False

    def permalink(self, channel: str, ts: str) -> str | None:
        try:
            link = str(self.client.chat_getPermalink(channel=channel, message_ts=ts)["permalink"])
        except (SlackApiError, SlackClientError, OSError) as exc:
            log.info("no permalink for %s/%s: %s", channel, ts, exc)
            return None
        return link if _PERMALINK.match(link) else None

    def history(self, channel: str, oldest: float, *, limit: int = 1000) -> list[dict[str, Any]] | Failed:
        """``conversations.history`` pages (200 each) back to ``oldest``; needs `channels:history`
        (`groups:history` for a private channel)."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            while len(found) < limit:
                page = self.client.conversations_history(channel=channel, oldest=f"{oldest:.6f}", limit=200,
                                                         include_all_metadata=True, cursor=cursor)
                found += list(page.get("messages") or [])
                cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
                if not cursor or not page.get("has_more"):
                    break
        except (SlackApiError, SlackClientError, OSError) as exc:
            return self._failed(exc, GONE, "conversations.history")
        SLACK_CALLS.labels("conversations.history", "ok").inc()
        return found[:limit]

    def replies(self, channel: str, thread_ts: str, oldest: float, *,
                limit: int = 1000) -> list[dict[str, Any]] | Failed:
        """``conversations.replies`` pages (200 each) of one thread, the parent left out; the same
        scopes as `history` (`channels:history`, `groups:history`)."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        try:
            while len(found) < limit:
                page = self.client.conversations_replies(channel=channel, ts=thread_ts,
                                                         oldest=f"{oldest:.6f}", limit=200,
                                                         include_all_metadata=True, cursor=cursor)
                found += [m for m in page.get("messages") or [] if m.get("ts") != thread_ts]
                cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
                if not cursor or not page.get("has_more"):
                    break
        except (SlackApiError, SlackClientError, OSError) as exc:
            return self._failed(exc, GONE, "conversations.replies")
        SLACK_CALLS.labels("conversations.replies", "ok").inc()
        return found[:limit]

    def upload(self, channel: str, thread_ts: str | None, filename: str, content: str,
               title: str) -> Sent | Failed:
        """files_upload_v2 (Slack's external upload flow); needs the `files:write` scope."""
        try:
            self.client.files_upload_v2(channel=channel, thread_ts=thread_ts, filename=filename,
                                        content=content, title=title)
        except (SlackApiError, SlackClientError, OSError) as exc:
            return self._failed(exc, CANNOT_POST, "files.upload")
        SLACK_CALLS.labels("files.upload", "ok").inc()
        return Sent(channel=channel, ts=thread_ts or "")

    def upload_image(self, channel: str, thread_ts: str | None, filename: str, data: bytes,
                     title: str) -> str | Failed:
        """files_upload_v2 of PNG bytes; the file's permalink (or its name when Slack gave none)."""
        try:
            answer = self.client.files_upload_v2(channel=channel, thread_ts=thread_ts, filename=filename,
                                                 content=data, title=title)
        except (SlackApiError, SlackClientError, OSError) as exc:
            return self._failed(exc, CANNOT_POST, "files.upload")
        SLACK_CALLS.labels("files.upload", "ok").inc()
        files = answer.get("files") or [answer.get("file") or {}]
        link = str((files[0] or {}).get("permalink") or "")
        return link if _PERMALINK.match(link) else filename

    def publish_home(self, user: str, view: dict[str, Any]) -> Sent | Failed:
        """`views.publish` (tier 4, about 100 a minute per workspace): a 429 is "deferred" with
        Slack's Retry-After, never retried here — the next visit publishes again."""
        try:
            answer = self.client.views_publish(user_id=user, view=view)
        except (SlackApiError, SlackClientError, OSError) as exc:
            return self._failed(exc, frozenset(), "views.publish")
        SLACK_CALLS.labels("views.publish", "ok").inc()
        return Sent(channel=user, ts=str((answer.get("view") or {}).get("id") or ""))

    def open_dm(self, user: str) -> str | Failed:
        try:
            return str(self.client.conversations_open(users=user)["channel"]["id"])
        except (SlackApiError, SlackClientError, OSError) as exc:
            return self._failed(exc, CANNOT_POST)

    def user_by_email(self, email: str) -> dict[str, Any] | Failed:
        try:
            return dict(self.client.users_lookupByEmail(email=email)["user"])
        except (SlackApiError, SlackClientError, OSError) as exc:
            return self._failed(exc, frozenset())

    def shared_file(self, file_id: str, channel: str, max_bytes: int) -> bytes | Failed:
        """`files.info` (scope `files:read`), then the download with the bot token.

        The bot sees files of every channel it is in; the command's channel is where the
        answer is posted, so only a file shared *there* is read — a link to a file from a
        private channel the requester may not see is refused as "not shared here". The
        download URL is a capability; it is never logged. The token goes only to Slack's
        hosts, on the first request and on every redirect (`downloads.py`)."""
        try:
            info = dict(self.client.files_info(file=file_id)["file"])
        except (SlackApiError, SlackClientError, OSError) as exc:
            failed = self._failed(exc, frozenset(), "files.info")
            if failed.error == "file_not_found":
                return Failed(kind="not_found", error="file_not_found")
            return failed
        shared_in = {*info.get("channels", []), *info.get("groups", []), *info.get("ims", [])}
        for scope in ("public", "private"):
            shared_in.update(((info.get("shares") or {}).get(scope) or {}).keys())
        if channel not in shared_in:
            return Failed(kind="not_found", error="not_shared_here")
        size = int(info.get("size") or 0)
        if size > max_bytes:
            return Failed(kind="error", error="too_large", size=size)
        url = str(info.get("url_private_download") or info.get("url_private") or "")
        if not url or hop_policy(url, self.client.base_url) != "token":
            return Failed(kind="error", error="no_download")
        try:
            data = download(url, token=str(self.client.token), api_base=self.client.base_url,
                            max_bytes=max_bytes)
        except RedirectRefused:
            return Failed(kind="error", error="download redirected off Slack, not followed")
        except OSError as exc:
            return Failed(kind="unreachable", error=type(exc).__name__)
        if len(data) > max_bytes:
            return Failed(kind="error", error="too_large", size=len(data))
        return data


__all__ = ["CANNOT_POST", "GONE", "SlackSurface", "retry_after", "slack_error"]
