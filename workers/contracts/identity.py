"""The Kubernetes identity taubot impersonates for a user, as kubectl's ``--as``/``--as-group``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Identity(BaseModel):
    """A Kubernetes user and its groups.

    Travels in every request through Redis; each value becomes one
    ``Impersonate-*`` header, so each must be one non-blank line.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    user: str = Field(min_length=1)
    groups: tuple[str, ...] = ()

    @field_validator("user")
    @classmethod
    def _user_is_header_safe(cls, value: str) -> str:
        """Reject blank names and header-breaking characters before they reach HTTP."""
        if not value.strip() or any(c in value for c in "\r\n\0"):
            raise ValueError("user must be a non-blank single-line string")
        return value

    @field_validator("groups")
    @classmethod
    def _groups_are_header_safe(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Each group travels as its own header value, so each must be non-empty, one line."""
        for group in value:
            if not group.strip() or any(c in group for c in "\r\n\0"):
                raise ValueError(f"invalid group name {group!r}")
        return value


__all__ = ["Identity"]
