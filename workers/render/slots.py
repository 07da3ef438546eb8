"""Typed card slots: what each feature adds to a posted card, as one model per feature.

A card is edited by several writers (a watch tick, the escalation job, the
stall monitor, a Mute press), each through the posted-card store. Before,
each wrote untyped keys into the card's context (``{"muted": …,
"mute_button": None}``) and nothing checked that a key existed or held the
right kind of value. Now each feature owns one slot — `EscalationSlot`,
`MuteSlot`, `WatchFooter`, `AutoPostFooter` — and a card is changed only
through `SlottedCard.with_slot`, which validates the slot by its type, so a
writer cannot misspell a key or put a string where a button goes, and two
writers never touch each other's fields.

Pure pydantic and the button models: no I/O, nothing of the rest of taubot.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

from .buttons import CardButton, EscalatedNote


class EscalationSlot(BaseModel):
    """*Escalate to <owner>* (issue 7): the button while it may be pressed, then who escalated."""

    model_config = ConfigDict(frozen=True)

    button: CardButton | None = None
    note: EscalatedNote | None = None  # replaces the button once pressed


class MuteNote(BaseModel):
    """Who muted an auto-post's runs and until when (facts; the line is `text()`)."""

    model_config = ConfigDict(frozen=True)

    by: str = Field(pattern=r"^[UW][A-Z0-9]{2,}$", description="the Slack user who muted")
    until: datetime

    def text(self) -> str:
        until = self.until.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        return f"🔕 Auto-posts muted by @{self.by} until {until}."


class MuteSlot(BaseModel):
    """*Mute 24 h* on an auto-post, then the note of who muted it."""

    model_config = ConfigDict(frozen=True)

    button: CardButton | None = None
    note: MuteNote | None = None


class WatchFooter(BaseModel):
    """`--watch` (issue 5): what the watch is doing, when it last refreshed (left out of the
    card's hash: `VOLATILE`), and *Stop watching* while it runs."""

    model_config = ConfigDict(frozen=True)

    status: str  # mrkdwn-safe, composed by workers/flows/watch/card.py from our own words
    updated: str = ""
    stop_button: CardButton | None = None


class AutoPostFooter(BaseModel):
    """The stall monitor's line on its auto-post: stalled since when, recovered, finished."""

    model_config = ConfigDict(frozen=True)

    status: str  # mrkdwn-safe (cluster text in it is escaped by the monitor)


CHARTS_BLOCK_ID = "taubot_charts"


class ChartLink(BaseModel):
    """One picture of a status in the card's thread (issue 29): where it is, or why it is not."""

    model_config = ConfigDict(frozen=True)

    what: str = Field(pattern=r"^[A-Za-z0-9 /-]{1,60}$", description="our own words: `loss curve`")
    permalink: str = Field(default="", pattern=r"^(https://[^\s<>|&]+)?$")
    filename: str = Field(default="", pattern=r"^[A-Za-z0-9._-]{0,120}$")
    failed: str = Field(default="", max_length=120, pattern=r"^[^<>&]*$")

    def text(self, *, markup: bool = True) -> str:
        """The line; ``markup=False`` is the validator-safe stand-in (the link without its URL)."""
        if self.failed:
            return f"The {self.what} could not be attached ({self.failed})."
        if self.permalink:
            link = f"<{self.permalink}|{self.what}>" if markup else self.what
            return f"📈 {link} (PNG, in this thread)"
        return f"📈 {self.what}: {self.filename} (PNG, in this thread)"


class ChartsSlot(BaseModel):
    """The pictures a status drew after its card was posted: the card is edited to link them.
    Its links are our markup around a validated permalink; `workers/render/cards.py` lays out a
    plain stand-in through the template and validator and swaps this block in after."""

    model_config = ConfigDict(frozen=True)

    links: tuple[ChartLink, ...] = ()

    def block(self, *, markup: bool = True) -> dict[str, Any]:
        return {"type": "context", "block_id": CHARTS_BLOCK_ID,
                "elements": [{"type": "mrkdwn", "text": link.text(markup=markup), "verbatim": True}
                             for link in self.links]}


Slot = EscalationSlot | MuteSlot | WatchFooter | AutoPostFooter | ChartsSlot
SLOT_FIELDS: dict[type[BaseModel], str] = {
    EscalationSlot: "escalation", MuteSlot: "mute", WatchFooter: "watch", AutoPostFooter: "auto_post",
    ChartsSlot: "charts",
}
# What a reader sees that changes on every refresh and must not make a card "changed".
VOLATILE: dict[str, Any] = {"watch": {"updated"}}


class CardPatch(BaseModel):
    """A card context that is edited by name: `replace` refuses a field the card does not have.

    pydantic's `model_copy(update=…)` takes any key and keeps a misspelt one silently (the card
    then shows the old text); every edit of a card goes through `replace` instead."""

    model_config = ConfigDict(frozen=True)

    def replace(self, **fields: Any) -> Self:
        unknown = set(fields) - set(type(self).model_fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        return self.model_copy(update=fields)


class SlottedCard(CardPatch):
    """Base of the cards that carry slots; a card without a slot's feature shows nothing of it."""

    model_config = ConfigDict(frozen=True)

    escalation: EscalationSlot = EscalationSlot()
    mute: MuteSlot = MuteSlot()
    watch: WatchFooter | None = None
    auto_post: AutoPostFooter | None = None
    charts: ChartsSlot | None = None

    def with_slot(self, slot: Slot | None, *, kind: type[BaseModel] | None = None) -> Self:
        """This card with one feature's slot replaced (``None`` with ``kind`` clears a footer)."""
        field = SLOT_FIELDS[kind or type(slot)]
        if slot is not None and not isinstance(slot, kind or type(slot)):
            raise TypeError(f"{type(slot).__name__} is not a {field} slot")
        if slot is None and field in ("escalation", "mute"):
            slot = EscalationSlot() if field == "escalation" else MuteSlot()
        return self.replace(**{field: slot})


__all__ = ["CHARTS_BLOCK_ID", "VOLATILE", "AutoPostFooter", "CardPatch", "ChartLink", "ChartsSlot",
           "EscalationSlot",
           "MuteNote", "MuteSlot", "Slot", "SlottedCard", "WatchFooter"]
