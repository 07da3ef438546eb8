"""The CLI's one error type: bad input from the person at the terminal (one line, exit 2)."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input: printed as one line, exit 2."""


__all__ = ["UsageError"]
