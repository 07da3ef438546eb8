"""Buttons on taubot's cards, as values the card templates can place, and the note that
replaces the Escalate button once it was pressed.

A module of its own, with no imports from the rest of taubot, so both
`workers/render/cards.py` (which lays buttons out) and the modules that own a
button's behaviour (`workers/escalation.py`, `workers/watch.py`) can use it
without importing each other.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ESCALATED_BLOCK_ID = "taubot_escalated"


class CardButton(BaseModel):
    """One Block Kit button element.

    ``text`` is plain text we compose (never cluster text), ``value`` is what
    Slack echoes back on a press: for taubot always an opaque, signed id, so
    the bounds here are Slack's own (75 characters of text, 2000 of value).
    """

    model_config = ConfigDict(frozen=True)

    action_id: str = Field(min_length=1, max_length=255)
    text: str = Field(min_length=1, max_length=75)
    value: str = Field(min_length=1, max_length=2000)
    style: Literal["primary", "danger"] | None = None

    def element(self) -> dict[str, object]:
        """The button as a Block Kit element of an ``actions`` block."""
        element: dict[str, object] = {
            "type": "button",
            "action_id": self.action_id,
            "text": {"type": "plain_text", "text": self.text, "emoji": True},
            "value": self.value,
        }
        if self.style:
            element["style"] = self.style
        return element


class EscalatedNote(BaseModel):
    """"📣 Escalated to <owner> by @x at HH:MM": what a card shows instead of its Escalate button.

    One builder for both writers of that line — the escalation job editing
    the card it was pressed on, and a `--watch` tick re-rendering the card —
    so the two produce the same block and never undo each other. It holds
    facts, not text: a watch hashes its card context, and the same facts
    must hash the same on every tick. Its markup (a mention, a date) is ours,
    from validated ids only; `workers/render/cards.py` renders a plain
    stand-in through the template and validator and swaps this block in after.
    """

    model_config = ConfigDict(frozen=True)

    owner: str = Field(pattern=r"^[a-z][a-z0-9-]{0,39}$", description="an owner id of SPEC §4")
    by: str = Field(pattern=r"^[UW][A-Z0-9]{2,}$", description="the Slack user who escalated")
    at: datetime
    submitter: bool = Field(default=False, description="the researcher path: the submitter was DMed")

    def text(self, *, markup: bool = True) -> str:
        """The line; ``markup=False`` gives the validator-safe stand-in of the same shape."""
        fallback = self.at.astimezone(UTC).strftime("%H:%M UTC")
        when = f"<!date^{int(self.at.timestamp())}^{{time}}|{fallback}>" if markup else fallback
        who = f"<@{self.by}>" if markup else f"@{self.by}"
        what = "Submitter notified" if self.submitter else f"Escalated to *{self.owner}*"
        return f"📣 {what} by {who} at {when}"

    def block(self, *, markup: bool = True) -> dict[str, Any]:
        """The note as a context block; its block_id lets a card edit find and replace it."""
        return {"type": "context", "block_id": ESCALATED_BLOCK_ID,
                "elements": [{"type": "mrkdwn", "text": self.text(markup=markup), "verbatim": True}]}


__all__ = ["ESCALATED_BLOCK_ID", "CardButton", "EscalatedNote"]
