"""One active monitor replica: a Redis lease with a TTL, renewed while the holder lives.

A second replica takes over within one lease period after the first dies
(its lease simply expires). Renewal and release are compare-and-set Lua
scripts, so a replica that lost its lease (a long GC pause) can never
extend or delete the new holder's.
"""

from __future__ import annotations

import secrets

import redis

KEY = "taubot:monitor:lease"
_RENEW = """if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end"""
_RELEASE = """if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1]) else return 0 end"""


class Lease:
    def __init__(self, conn: redis.Redis, seconds: int, key: str = KEY) -> None:
        self.conn = conn
        self.ms = int(seconds * 1000)
        self.key = key
        self.token = secrets.token_hex(12)
        self._renew = conn.register_script(_RENEW)
        self._release = conn.register_script(_RELEASE)

    def acquire_or_renew(self) -> bool:
        """True while this replica holds the lease (taking it when it is free)."""
        if self.conn.set(self.key, self.token, nx=True, px=self.ms):
            return True
        return bool(self._renew(keys=[self.key], args=[self.token, self.ms]))

    def release(self) -> None:
        self._release(keys=[self.key], args=[self.token])


__all__ = ["KEY", "Lease"]
