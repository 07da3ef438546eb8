"""What a live collection could not read, as input to the pure evaluator.

The collector turns 403s, 5xx and timeouts into `ReadGap`s keyed by resource
plural; `evaluate()` then marks the phases that needed that resource, so a
forbidden list of pods reads "permission denied (list pods)" instead of the
"no pods yet" an empty answer would have implied.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from . import registry
from .models import Finding

# Which resources each phase's verdict rests on (the registry's `needs`).
PHASE_NEEDS: dict[str, tuple[str, ...]] = {e.name: e.needs for e in registry.PHASES}


class ReadGap(BaseModel):
    """One resource that could not be read: `permission denied (list pods)` or `unavailable (…)`."""

    kind: Literal["forbidden", "unavailable"]
    text: str
    detail: str = ""

    @property
    def why(self) -> str:
        """The failure in a word or two, for the card's first screen (SPEC §7: `Could not read:
        pods (HTTP 500)`): `permission denied`, `HTTP 500`, `timeout after 10 s`."""
        return short_why(self.kind, self.text)

    def finding(self, namespace: str) -> Finding:
        if self.kind == "forbidden":
            return Finding(
                reason="read.forbidden",
                owner="platform",
                transient=False,
                next_action=f"Your Kubernetes identity may not read this in {namespace} "
                f"({self.text}): the platform grants the workspace's RBAC (layer 1); "
                "taubot never falls back to its own identity.",
            )
        return Finding(
            reason="read.unavailable",
            owner="platform",
            transient=True,
            next_action=f"The Kubernetes API did not answer ({self.text}); retry — if it "
            "persists the platform checks the API server.",
        )


def short_why(kind: str, text: str) -> str:
    """`permission denied` for a 403; the reader's own detail (`HTTP 500`, `timeout after 10 s`,
    `server disconnected`) from its `unavailable (…)` text otherwise (`ReadError.describe`)."""
    if kind == "forbidden":
        return "permission denied"
    head, sep, rest = text.partition(" (")
    return rest[:-1] if sep and head == "unavailable" and rest.endswith(")") else (text or "unavailable")
