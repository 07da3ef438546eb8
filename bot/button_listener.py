"""What every card button's listener does after Bolt has acked the press.

The press itself is handled by a subclass (`_handle`), which may refuse it or
queue a job; this base turns any outcome into an ephemeral answer on the
press's ``response_url`` and makes sure no exception escapes — an escaped
exception is a silent failure for the person who pressed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from bot.presser import Presser, Resolver
from workers.outside.logsafe import audit
from workers.plumbing.metrics import PRESSES

log = logging.getLogger(__name__)


def press_place(body: dict[str, Any]) -> dict[str, str | None]:
    """Where a press happened, as Slack's `block_actions` payload says (api.slack.com/reference/
    interaction-payloads/block-actions: `channel`, `container.message_ts`/`thread_ts`, the echoed
    `message`): the worker compares it with where the button was offered."""
    container = body.get("container") or {}
    message = body.get("message") or {}
    return {"channel": (body.get("channel") or {}).get("id") or container.get("channel_id"),
            "message_ts": container.get("message_ts") or message.get("ts"),
            "thread_ts": container.get("thread_ts") or message.get("thread_ts")}


class ButtonListener:
    """Base of the Escalate and Stop watching listeners."""

    name = "button"
    failure_text = "⚠️ taubot hit an internal error; press the button again in a minute."

    resolver: Resolver

    def _handle(self, body: dict[str, Any], presser: Presser) -> tuple[str, str | None]:
        raise NotImplementedError

    def handle(self, body: dict[str, Any], respond: Callable[..., Any],
               presser: Presser | None = None) -> str:
        """Returns what happened (for logs and tests); never raises. ``presser``: the request's,
        from the identity middleware (`bot/presser.py`); a front end without Bolt passes none."""
        presser = presser or Presser(self.resolver, str((body.get("user") or {}).get("id") or ""))
        try:
            outcome, text = self._handle(body, presser)
        except Exception:  # noqa: BLE001 - see module docstring
            log.exception("%s press failed before queueing", self.name)
            outcome, text = "error", self.failure_text
        identity = presser.resolved
        action = next(iter(body.get("actions") or []), {}) or {}
        PRESSES.labels(self.name, outcome).inc()
        audit("press", action=self.name, slack_user=str((body.get("user") or {}).get("id") or ""),
              channel=str((body.get("channel") or {}).get("id") or ""),
              k8s_user=identity.user if identity else None,
              k8s_groups=list(identity.groups) if identity else None,
              value=str(action.get("value") or "")[:80], outcome=outcome)
        if text:
            try:
                respond(text=text, response_type="ephemeral", replace_original=False)
            except Exception:  # noqa: BLE001 - nobody left to tell
                log.exception("could not answer a %s press", self.name)
        return outcome
