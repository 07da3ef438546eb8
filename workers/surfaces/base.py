"""The surface interface and its outcomes.

A flow posts and edits messages through a `Surface` and reads back values,
never exceptions, for the outcomes a user must hear about: the message is
gone (deleted card → the watch ends), the bot cannot post here (not invited
→ answer privately), the write was deferred (pace or 429 → try next tick).
Slack's error strings are mapped to these in one place (`slack.py`).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

FailureKind = Literal["gone", "cannot_post", "deferred", "not_found", "unreachable", "error"]


class Sent(BaseModel):
    model_config = ConfigDict(frozen=True)

    channel: str
    ts: str


class Failed(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: FailureKind
    error: str = ""
    retry_after: float | None = None
    size: int | None = None  # a shared file over the caller's limit: its size in bytes (error "too_large")
    slot_reserved: bool = False  # "deferred": the pace now holds a slot for this edit (send then, `reserved`)


class Surface(Protocol):
    """What a flow may do with messages."""

    def post(self, channel: str, text: str, blocks: list[dict[str, Any]] | None = None, *,
             thread_ts: str | None = None, paced: float | None = None,
             metadata: dict[str, Any] | None = None) -> Sent | Failed:
        """A new message (``paced``: wait at most that long for the channel's pace; ``metadata``:
        Slack message metadata, ``{"event_type", "event_payload"}``)."""

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]], *,
               max_wait: float, reserve_within: float = 0.0, reserved: bool = False) -> Sent | Failed:
        """Edit a message in place, within the workspace's and channel's pace. With ``max_wait``
        0 a paced edit is not sent: "deferred", with the seconds until its slot, and error
        "reserved" when that slot (within ``reserve_within``) is now the caller's, to be used
        by calling again then with ``reserved``."""

    def ephemeral(self, channel: str, user: str, text: str) -> bool: ...

    def respond(self, response_url: str, text: str, blocks: list[dict[str, Any]] | None = None) -> bool:
        """An ephemeral answer through a command's or press's ``response_url``."""

    def permalink(self, channel: str, ts: str) -> str | None: ...

    def history(self, channel: str, oldest: float, *, limit: int = 1000) -> list[dict[str, Any]] | Failed:
        """The channel's top-level messages since ``oldest`` (epoch seconds), newest first, with
        their metadata (``conversations.history`` with ``include_all_metadata``); at most ``limit``."""

    def replies(self, channel: str, thread_ts: str, oldest: float, *,
                limit: int = 1000) -> list[dict[str, Any]] | Failed:
        """The replies in the thread of ``thread_ts`` since ``oldest`` (epoch seconds), oldest
        first, with their metadata (``conversations.replies`` with ``include_all_metadata``)."""

    def upload(self, channel: str, thread_ts: str | None, filename: str, content: str,
               title: str) -> Sent | Failed:
        """A text file in the channel (or thread): the full tail of a log."""

    def upload_image(self, channel: str, thread_ts: str | None, filename: str, data: bytes,
                     title: str) -> str | Failed:
        """A PNG in the thread (a chart); returns where it can be seen (its permalink, a path)."""

    def open_dm(self, user: str) -> str | Failed: ...

    def publish_home(self, user: str, view: dict[str, Any]) -> Sent | Failed:
        """The user's App Home tab (`views.publish`, tier 4): ``view`` is a `home` view."""

    def user_by_email(self, email: str) -> dict[str, Any] | Failed: ...

    def shared_file(self, file_id: str, channel: str, max_bytes: int) -> bytes | Failed:
        """The bytes of a file shared in ``channel`` (never one the channel cannot see), at most
        ``max_bytes``: `/tau validate` with a file link."""


__all__ = ["Failed", "FailureKind", "Sent", "Surface"]
