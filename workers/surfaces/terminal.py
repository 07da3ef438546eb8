"""A terminal as a `Surface`: messages are printed, kept in memory, and their buttons numbered.

`taubot shell` and `taubot demo` use it in place of Slack's Web API, so the
same flows post and edit the same cards; an edit prints the card again,
marked as an update of the message it replaces. `--blocks` prints the Block
Kit JSON instead of text: each message's payload as one line of JSON through
``write_json`` (the shell's stdout: JSON Lines, each pasteable into Slack's
Block Kit Builder), and what the shell says about it — which message it is,
its buttons' numbers, a private answer in words — through ``write`` (stderr).
"""

from __future__ import annotations

import itertools
import json
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.render.text import blocks_to_text, mrkdwn_to_text

from .base import Failed, Sent


@dataclass(frozen=True)
class PressableButton:
    """A button the shell user can press by number: where it is and what Slack would send."""

    number: int
    channel: str
    ts: str
    thread_ts: str | None
    action_id: str
    value: str
    label: str


_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class TerminalSurface:
    """Prints through ``write``; keeps every message so updates and presses find them."""

    def __init__(self, write: Callable[[str], None], *, blocks_json: bool = False, user: str = "",
                 files_dir: Path | None = None, write_json: Callable[[str], None] | None = None) -> None:
        self.write = write
        self.write_json = write_json or write  # one line of JSON per message (``blocks_json``)
        self.files_dir = files_dir  # where pictures go; None: a fresh temporary directory, made on first use
        self._status_dirs: dict[tuple[str, str], Path] = {}  # (channel, thread) → its pictures' own folder
        self.blocks_json = blocks_json
        self.user = user
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.buttons: dict[int, PressableButton] = {}
        self._ts = itertools.count(1)
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()

    def _show(self, head: str, channel: str, ts: str, thread_ts: str | None, text: str,
              blocks: list[dict[str, Any]] | None) -> None:
        # The buttons of a message that was edited are the ones of its newest version only, and
        # each keeps the number it had (by action, in order), so a number read off the card
        # before a --watch update still presses the same button after it.
        before: dict[str, list[int]] = {}
        for n in sorted(n for n, b in self.buttons.items() if (b.channel, b.ts) == (channel, ts)):
            before.setdefault(self.buttons.pop(n).action_id, []).append(n)

        def number(element: dict[str, Any]) -> int:
            action = str(element.get("action_id"))
            kept = before.get(action)
            n = kept.pop(0) if kept else next(self._numbers)
            self.buttons[n] = PressableButton(n, channel, ts, thread_ts, action,
                                              str(element.get("value") or ""),
                                              str((element.get("text") or {}).get("text") or ""))
            return n

        indent = "    " if thread_ts else ""
        if blocks and self.blocks_json:
            self._payload(f"{indent}{head}", blocks, number)
            return
        if blocks:
            body = blocks_to_text(blocks, number)
        else:
            body = mrkdwn_to_text(text)
        framed = "\n".join(indent + line for line in body.splitlines())
        self.write(f"{indent}{head}\n{framed}\n")

    def _payload(self, head: str, blocks: list[dict[str, Any]],
                 number: Callable[[dict[str, Any]], int] | None = None) -> None:
        """``--blocks``: one line saying which message this is (and its buttons' numbers), then the
        message's own Block Kit payload, compact, as one line of JSON."""
        pressable: list[dict[str, Any]] = []  # its buttons, and each option of an overflow menu
        for block in blocks:
            accessory = block.get("accessory") or {}
            if accessory.get("type") == "overflow":
                action = accessory.get("action_id")
                pressable += [{"action_id": action, **o} for o in accessory.get("options") or []]
            pressable += [e for e in block.get("elements") or [] if e.get("type") == "button"]
        numbered = [f"[{number(e)}] {(e.get('text') or {}).get('text') or ''}" for e in pressable if number]
        self.write(head + (" · buttons: " + "   ".join(numbered) if numbered else "") + "\n")
        self.write_json(json.dumps({"blocks": blocks}, ensure_ascii=False, separators=(",", ":")) + "\n")

    def post(self, channel: str, text: str, blocks: list[dict[str, Any]] | None = None, *,
             thread_ts: str | None = None, paced: float | None = None,
             metadata: dict[str, Any] | None = None) -> Sent | Failed:
        with self._lock:
            ts = f"{next(self._ts)}.000000"
            self.messages[(channel, ts)] = {"text": text, "blocks": blocks, "thread_ts": thread_ts,
                                            "metadata": metadata}
            where = "↳ in thread" if thread_ts else f"# {channel}"
            self._show(where, channel, ts, thread_ts, text, blocks)
        return Sent(channel=channel, ts=ts)

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]], *,
               max_wait: float, reserve_within: float = 0.0, reserved: bool = False) -> Sent | Failed:
        with self._lock:
            message = self.messages.get((channel, ts))
            if message is None:
                return Failed(kind="gone", error="message_not_found")
            message.update(text=text, blocks=blocks)
            self._show("✎ card updated", channel, ts, message.get("thread_ts"), text, blocks)
        return Sent(channel=channel, ts=ts)

    def history(self, channel: str, oldest: float, *, limit: int = 1000) -> list[dict[str, Any]] | Failed:
        with self._lock:
            found = [{"ts": ts, **m} for (ch, ts), m in self.messages.items()
                     if ch == channel and not m.get("thread_ts") and float(ts) >= oldest]
        return sorted(found, key=lambda m: float(m["ts"]), reverse=True)[:limit]

    def replies(self, channel: str, thread_ts: str, oldest: float, *,
                limit: int = 1000) -> list[dict[str, Any]] | Failed:
        with self._lock:
            found = [{"ts": ts, **m} for (ch, ts), m in self.messages.items()
                     if ch == channel and m.get("thread_ts") == thread_ts and ts != thread_ts
                     and float(ts) >= oldest]
        return sorted(found, key=lambda m: float(m["ts"]))[:limit]

    def ephemeral(self, channel: str, user: str, text: str) -> bool:
        self.write(f"(only you) {mrkdwn_to_text(text)}\n")
        return True

    def respond(self, response_url: str, text: str, blocks: list[dict[str, Any]] | None = None) -> bool:
        if blocks and self.blocks_json:
            self._payload("(only you)", blocks)
            return True
        body = blocks_to_text(blocks) if blocks else mrkdwn_to_text(text)
        self.write(f"(only you) {body}\n")
        return True

    def permalink(self, channel: str, ts: str) -> str | None:
        return f"https://taubot.invalid/archives/{channel}/p{ts.replace('.', '')}"

    def upload(self, channel: str, thread_ts: str | None, filename: str, content: str,
               title: str) -> Sent | Failed:
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        indent = "    " if thread_ts else ""
        self.write(f"{indent}📎 {filename} ({lines} lines) — {title}\n")
        return Sent(channel=channel, ts=thread_ts or "")

    def _status_dir(self, channel: str, thread_ts: str | None) -> Path:
        """The folder of one status's pictures (one per thread), made fresh with `mkdtemp` inside
        ``files_dir`` — itself made fresh for this surface unless given: a picture from an earlier
        status (or an earlier shell, hours before) never sits beside the new ones under its name."""
        key = (channel, thread_ts or "")
        folder = self._status_dirs.get(key)
        if folder is None:
            if self.files_dir is None:
                self.files_dir = Path(tempfile.mkdtemp(prefix="taubot-charts-"))
            self.files_dir.mkdir(parents=True, exist_ok=True)
            number = len(self._status_dirs) + 1
            folder = Path(tempfile.mkdtemp(prefix=f"status-{number}-", dir=self.files_dir))
            self._status_dirs[key] = folder
        return folder

    def upload_image(self, channel: str, thread_ts: str | None, filename: str, data: bytes,
                     title: str) -> str | Failed:
        """A terminal shows no pictures: the PNG is written into the status's own fresh folder
        (`_status_dir`) under its name alone (no directory part), and its path printed."""
        name = _SAFE_NAME.sub("-", Path(filename).name).lstrip(".-") or "picture.png"
        try:
            with self._lock:
                path = self._status_dir(channel, thread_ts) / name
            path.write_bytes(data)
        except OSError as exc:
            return Failed(kind="error", error=f"cannot write {name}: {exc.strerror or exc}")
        indent = "    " if thread_ts else ""
        self.write(f"{indent}🖼 {title}: {path}\n")
        return str(path)

    def open_dm(self, user: str) -> str | Failed:
        return f"D{user[1:]}"

    def publish_home(self, user: str, view: dict[str, Any]) -> Sent | Failed:
        """A terminal has no Home tab: the view is shown as a card would be."""
        self._show("home", user, "home", None, "App Home", list(view.get("blocks") or []))
        return Sent(channel=user, ts="home")

    def user_by_email(self, email: str) -> dict[str, Any] | Failed:
        if self.user:
            return {"id": self.user, "deleted": False, "is_bot": False}
        return Failed(kind="not_found", error="users_not_found")

    def shared_file(self, file_id: str, channel: str, max_bytes: int) -> bytes | Failed:
        """A terminal has no shared files: `taubot validate FILE` reads one from disk."""
        return Failed(kind="error", error="files are a Slack feature: run `taubot validate FILE`")


__all__ = ["PressableButton", "TerminalSurface"]
