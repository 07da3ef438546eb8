"""Kubernetes timestamps (RFC 3339, `Z` or offset, optional fractions) to aware datetimes."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_time(value: object) -> datetime | None:
    """Parse a Kubernetes timestamp; anything unparseable is None rather than an exception.

    A YAML dump with unquoted timestamps gives datetime objects (PyYAML reads them as such):
    those are taken as they are, not lost.
    """
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    text = value.strip().replace("Z", "+00:00").replace("z", "+00:00")
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def age_seconds(since: datetime | None, now: datetime) -> float | None:
    return None if since is None else (now - since).total_seconds()


def stamp(dt: datetime | None) -> str:
    """`2026-11-30 10:00:10Z` — absolute, so a summary does not change as time passes.

    A watched card is re-sent only when its text changes; an "N seconds ago" in a
    summary would change it on every tick.
    """
    return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ") if dt else "?"
