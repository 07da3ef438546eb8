"""Who is asking, resolved once per request: the Bolt middleware puts a `Presser` in the context.

A command and every card button act as the Slack user who typed or pressed, mapped to their
Kubernetes identity (`bot/identity.py`). The mapping is asked for in one place — this object,
made for each request by `identity_middleware` — and resolved at most once, lazily, on the
listener's own thread after the ack (a users.info call must never delay Slack's 3 s ack), so no
listener carries its own copy of "who is this?".
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from bot.identity import Unmapped
from workers.contracts.identity import Identity

CONTEXT_KEY = "presser"


class Resolver(Protocol):
    def resolve(self, slack_user_id: str) -> Identity | Unmapped: ...


class Presser:
    """The Slack user of one request and, once asked, their identity (or the refusal)."""

    def __init__(self, resolver: Resolver, slack_user: str) -> None:
        self.resolver = resolver
        self.slack_user = slack_user
        self._lock = threading.Lock()
        self._identity: Identity | Unmapped | None = None

    def identity(self) -> Identity | Unmapped:
        """Resolved on first use. A resolver that raises is the listener's to answer (each has
        its own words for an internal error); nothing is cached then, so a retry asks again."""
        with self._lock:
            if self._identity is None:
                self._identity = self.resolver.resolve(self.slack_user)
            return self._identity

    @property
    def resolved(self) -> Identity | None:
        """The identity if it was resolved and mapped (for the audit line); None otherwise."""
        return self._identity if isinstance(self._identity, Identity) else None


def identity_middleware(resolver: Resolver) -> Callable[..., Any]:
    """The Bolt middleware: every request's context carries its `Presser` under `CONTEXT_KEY`."""

    def resolve_identity_once(context: Any, body: dict[str, Any], next: Callable[[], Any]) -> Any:  # noqa: A002
        user = context.user_id or (body.get("user") or {}).get("id") or body.get("user_id") or ""
        context[CONTEXT_KEY] = Presser(resolver, str(user))
        return next()

    return resolve_identity_once


__all__ = ["CONTEXT_KEY", "Presser", "Resolver", "identity_middleware"]
