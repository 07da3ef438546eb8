"""One active monitor per cluster: a Redis lease with a TTL, renewed while the holder works.

A second replica takes over a cluster within one lease period after the first
dies (its lease simply expires). Renewal and release are compare-and-set Lua
scripts, so a replica that lost its lease (a long GC pause, a Redis outage)
can never extend or delete the new holder's. The holder renews within its
sweep, and before every Slack write (`held`), so a sweep longer than the
lease never lets a second replica post in the same window. There is one
lease per cluster, so several replicas share several clusters.

A Redis error is raised to the caller (`redis.RedisError`): it means "not
held", and the caller waits and tries again — it never ends the process.
"""

from __future__ import annotations

import secrets
import time

import redis

from workers.records import keys

from .stalls import key_digest

KEY = keys.MONITOR_LEASE
_RENEW = """if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end"""
_RELEASE = """if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1]) else return 0 end"""


class LeaseLost(Exception):
    """This replica no longer holds the lease: stop writing to Slack at once."""


def cluster_lease_key(cluster: str) -> str:
    """The lease of one cluster (``cluster``: the descriptor's cluster target, as JSON)."""
    return f"{KEY}:{key_digest(cluster)}"


class Lease:
    def __init__(self, conn: redis.Redis, seconds: float, key: str = KEY) -> None:
        self.conn = conn
        self.ms = int(seconds * 1000)
        self.key = key
        self.token = secrets.token_hex(12)
        self._renew = conn.register_script(_RENEW)
        self._release = conn.register_script(_RELEASE)
        self._renewed_at = float("-inf")

    def acquire_or_renew(self) -> bool:
        """True while this replica holds the lease (taking it when it is free)."""
        if self.conn.set(self.key, self.token, nx=True, px=self.ms):
            self._renewed_at = time.monotonic()
            return True
        return self.renew()

    def renew(self) -> bool:
        """Extend the lease if it is still ours; False (never raising for it) when it is not."""
        held = bool(self._renew(keys=[self.key], args=[self.token, self.ms]))
        if held:
            self._renewed_at = time.monotonic()
        return held

    def renewed_recently(self, seconds: float) -> bool:
        """Held as of ``seconds`` ago (worth renewing between sweeps)."""
        return time.monotonic() - self._renewed_at < seconds

    def held(self) -> bool:
        """Checked before every Slack write: renews, so it answers for a whole lease from now."""
        try:
            return self.renew()
        except redis.RedisError:
            return False

    def keep(self) -> None:
        """Within a sweep: renew when a third of the lease has passed; `LeaseLost` when lost."""
        if time.monotonic() - self._renewed_at < self.ms / 3000 and self._renewed_at > float("-inf"):
            return
        if not self.held():
            raise LeaseLost(self.key)

    def release(self) -> None:
        try:
            self._release(keys=[self.key], args=[self.token])
        except redis.RedisError:
            pass  # it expires by itself


__all__ = ["KEY", "Lease", "LeaseLost", "cluster_lease_key"]
