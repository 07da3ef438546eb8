"""Block Kit blocks as terminal text: what `taubot shell` and `taubot demo` print.

The card is rendered once, as Block Kit, by the same code Slack gets; this
only reads it back for a terminal — header, fields, sections, context lines,
and buttons as `[N] label` (the shell presses a button when its number is
typed). Slack's entities are decoded and `*bold*` marks dropped; the escaping
itself stays as Slack would show it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .mrkdwn import ZWSP

_BOLD = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_MENTION = re.compile(r"<([@#!][^>|]*)(?:\|([^>]*))?>")
_LINK = re.compile(r"<(https?://[^>|]+)\|([^>]*)>")


def mrkdwn_to_text(text: str) -> str:
    """Readable terminal text from mrkdwn: our own mentions/links shown by label, entities decoded."""
    text = _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})", text)
    text = _MENTION.sub(lambda m: m.group(2) or m.group(1).replace("!subteam^", "@"), text)
    text = _BOLD.sub(r"\1", text)
    text = text.replace(ZWSP, "")
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _text_of(obj: dict[str, Any] | None) -> str:
    if not obj:
        return ""
    raw = str(obj.get("text") or "")
    return raw if obj.get("type") == "plain_text" else mrkdwn_to_text(raw)


def blocks_to_text(blocks: list[dict[str, Any]], number: Callable[[dict[str, Any]], int] | None = None,
                   width: int = 100) -> str:
    """One card as lines; ``number(button)`` gives the number a button is pressed by."""
    lines: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            title = _text_of(block.get("text"))
            lines += [title, "═" * min(width, max(8, len(title)))]
        elif kind == "section":
            if block.get("text"):
                lines.append(_text_of(block["text"]))
            fields = [_text_of(f).replace("\n", ": ", 1) for f in block.get("fields") or []]
            if fields:
                lines.append("   ".join(fields))
            accessory = block.get("accessory") or {}
            if accessory.get("type") == "overflow" and number:  # each option is a press of its own
                action = accessory.get("action_id")
                options = [f"[{number({'action_id': action, **o})}] {_text_of(o.get('text'))}"
                           for o in accessory.get("options") or []]
                lines.append("  " + "   ".join(options))
        elif kind == "divider":
            lines.append("─" * min(width, 60))
        elif kind == "context":
            lines.append("  " + " · ".join(_text_of(e) for e in block.get("elements") or []))
        elif kind == "actions":
            buttons = []
            for element in block.get("elements") or []:
                label = _text_of(element.get("text"))
                buttons.append(f"[{number(element)}] {label}" if number else f"[{label}]")
            lines.append("  " + "   ".join(buttons))
    return "\n".join(lines)


__all__ = ["blocks_to_text", "mrkdwn_to_text"]
