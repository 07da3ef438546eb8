"""Buttons on taubot's cards, as values the card templates can place.

A module of its own, with no imports from the rest of taubot, so both
`workers/render/cards.py` (which lays buttons out) and the modules that own a
button's behaviour (`workers/escalation.py`) can use it without importing
each other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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


__all__ = ["CardButton"]
