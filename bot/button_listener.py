"""What every card button's listener does after Bolt has acked the press.

The press itself is handled by a subclass (`_handle`), which may refuse it or
queue a job; this base turns any outcome into an ephemeral answer on the
press's ``response_url`` and makes sure no exception escapes — an escaped
exception is a silent failure for the person who pressed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from bot.identity import Unmapped
from workers.contracts.identity import Identity

log = logging.getLogger(__name__)


class Resolver(Protocol):
    def resolve(self, slack_user_id: str) -> Identity | Unmapped: ...


class ButtonListener:
    """Base of the Escalate and Stop watching listeners."""

    name = "button"
    failure_text = "⚠️ taubot hit an internal error; press the button again in a minute."

    def _handle(self, body: dict[str, Any]) -> tuple[str, str | None]:
        raise NotImplementedError

    def handle(self, body: dict[str, Any], respond: Callable[..., Any]) -> str:
        """Returns what happened (for logs and tests); never raises."""
        try:
            outcome, text = self._handle(body)
        except Exception:  # noqa: BLE001 - see module docstring
            log.exception("%s press failed before queueing", self.name)
            outcome, text = "error", self.failure_text
        if text:
            try:
                respond(text=text, response_type="ephemeral", replace_original=False)
            except Exception:  # noqa: BLE001 - nobody left to tell
                log.exception("could not answer a %s press", self.name)
        return outcome
