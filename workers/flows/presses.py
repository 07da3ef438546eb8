"""Was a press made on the message its button was offered on? (SPEC §11 "Credentials".)

A button's value is signed, so it cannot name anything taubot did not offer;
but a signed value can still be replayed in another request, from another
channel or on another message (a Slack payload is only JSON). What a button
stands for is stored with where its card is, and every press job compares
the press's channel and message with that before doing anything: a press
anywhere else is refused and nothing is done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workers.contracts.requests import RecordPressRequest
    from workers.services import Services

NOT_HERE = ("⛔ This button was not pressed on the card taubot offered it on (another channel or "
            "message), so nothing was {verb}.")


def offered_here(*, channel: str | None, card_ts: str | None, thread_ts: str | None,
                 press_channel: str | None, press_ts: str | None, press_thread: str | None = None) -> bool:
    """The press was in the offer's channel, on its card; when the card's ts was never recorded
    (its write failed), on a message in the card's thread."""
    if not channel or press_channel != channel:
        return False
    if card_ts:
        return press_ts == card_ts
    return bool(thread_ts) and thread_ts in (press_thread, press_ts)


def tell(services: Services, request: RecordPressRequest, text: str) -> None:
    """One private line to whoever pressed: through the press's response_url, else ephemeral."""
    if request.response_url:
        services.surface.respond(request.response_url, text)
    elif request.channel:
        services.surface.ephemeral(request.channel, request.user, text)


__all__ = ["NOT_HERE", "offered_here", "tell"]
