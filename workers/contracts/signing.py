"""Signed button values: a button carries only an id and an HMAC of it.

Block Kit echoes a button's ``value`` back on a press, and anyone able to
craft a request to our endpoint could put anything there. So what a button
stands for is stored server-side under a random id, and the value is that id
plus its HMAC; a value we did not sign is refused before Redis is asked.
Pure (hashlib/hmac), so the front end checks it before queueing anything.
"""

from __future__ import annotations

import hashlib
import hmac

from .ids import RECORD_ID

SIGNATURE_CONTEXT = b"taubot-escalate-v1:"
SIGNATURE_HEX = 32  # 128 bits of HMAC-SHA256: unforgeable, and short in a button value


def _mac(key: bytes, record_id: str) -> str:
    return hmac.new(key, SIGNATURE_CONTEXT + record_id.encode(), hashlib.sha256).hexdigest()[:SIGNATURE_HEX]


def sign_id(key: bytes, record_id: str) -> str:
    """The button value: ``<id>.<hmac>``. Opaque to Slack and to whoever reads the payload."""
    return f"{record_id}.{_mac(key, record_id)}"


def verify_value(key: bytes | None, value: object) -> str | None:
    """The id a button value stands for, or None when we did not sign it (tampered, forged,
    or signed with a key since rotated — all refused alike)."""
    if key is None or not isinstance(value, str) or value.count(".") != 1:
        return None
    record_id, mac = value.split(".")
    if not RECORD_ID.match(record_id):
        return None
    return record_id if hmac.compare_digest(mac, _mac(key, record_id)) else None


__all__ = ["sign_id", "verify_value"]
