"""A Redis-backed pace for Slack writes, shared by every worker process.

Why in Redis: Slack's limits are per app and workspace (`chat.update` is
tier 3, about 50 a minute) and per channel (about one message a second),
while taubot runs any number of workers. A per-process limiter would let
N workers send N times the budget; one counter in Redis keeps all of them
inside it.

Why GCRA (the "generic cell rate algorithm"): one timestamp per key — the
theoretical arrival time of the next allowed call — is all the state,
updated atomically by one Lua script; it allows a small burst and then
spaces calls evenly, which is what Slack's tiers describe. Several keys
(the workspace and the channel) are taken together or not at all, so a
refusal on the channel never burns a workspace slot.

Slack's own word wins: a 429 that survives slack_sdk's
`RateLimitErrorRetryHandler` pushes the workspace key back by its
`Retry-After` (`penalize`), so every worker waits, not only the one that
was told.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

KEY_PREFIX = "taubot:pace:"
TIER3_PER_MINUTE = 50
CHANNEL_PER_SECOND = 1.0

# A key outlives its use by a minute (PX): Redis expires it by the wall clock, while `now` is the
# process's clock — a test's injected one may lag it, and a key gone early would grant a second call
# in the same second. A key kept longer changes nothing: a time in the past counts as `now`.
# KEYS: the rate keys. ARGV: now, the horizon, then (interval, burst) per key. The call may go at
# `t` = the latest time any key allows it; when t - now is within the horizon the call is counted
# at t (granted now when t = now, reserved for t otherwise) and 1 is returned with the wait, else 0
# with the wait and nothing changes.
_ACQUIRE = """
local now = tonumber(ARGV[1])
local horizon = tonumber(ARGV[2])
local t = now
local tats = {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[2 * i + 1])
  local burst = tonumber(ARGV[2 * i + 2])
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  tats[i] = tat
  local allowed_at = tat + interval - interval * burst
  if allowed_at > t then t = allowed_at end
end
if t - now > horizon then return {0, tostring(t - now)} end
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[2 * i + 1])
  local burst = tonumber(ARGV[2 * i + 2])
  local tat = math.max(tats[i], t) + interval
  redis.call('SET', key, tostring(tat), 'PX', math.ceil((tat - now + interval * burst) * 1000) + 60000)
end
return {1, tostring(t - now)}
"""

_PENALIZE = """
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local until_ = tonumber(ARGV[1])
if until_ > tat then
  redis.call('SET', KEYS[1], tostring(until_), 'PX', math.ceil(tonumber(ARGV[2]) * 1000) + 60000)
end
return 1
"""


@dataclass(frozen=True)
class Rate:
    """``per_second`` calls on average, up to ``burst`` back to back after a quiet spell."""

    per_second: float
    burst: int = 1

    @property
    def interval(self) -> float:
        return 1.0 / self.per_second


def workspace_scope(token: str | None) -> str:
    """The limiter key of a Slack workspace: one bot token belongs to one workspace, so its
    digest names the workspace without an `auth.test` call (and without storing the token)."""
    return hashlib.sha256((token or "no-token").encode()).hexdigest()[:16]


class SlackPacer:
    """Grants or defers Slack writes against the per-workspace and per-channel budgets."""

    def __init__(
        self,
        conn: redis.Redis,
        workspace: str,
        *,
        update_rate: Rate | None = None,
        channel_rate: Rate | None = None,
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.conn = conn
        self.now = now  # the process's clock (tests inject theirs), never read twice per decision
        self.sleep = sleep
        self.workspace = workspace
        # Tier 3 is "50+ per minute"; a burst of 5 lets a handful of cards changing together
        # go out at once while the minute stays within the tier.
        self.update_rate = update_rate or Rate(TIER3_PER_MINUTE / 60.0, burst=5)
        # "About one a second, short bursts allowed": a card edit plus two transition lines
        # may go together; a longer run of lines is spaced out.
        self.channel_rate = channel_rate or Rate(CHANNEL_PER_SECOND, burst=3)
        self._acquire = conn.register_script(_ACQUIRE)
        self._penalize = conn.register_script(_PENALIZE)

    def _workspace_key(self, method: str) -> str:
        return f"{KEY_PREFIX}ws:{self.workspace}:{method}"

    def _channel_key(self, channel: str) -> str:
        return f"{KEY_PREFIX}ch:{self.workspace}:{channel}"

    def try_acquire(self, method: str, channel: str) -> float:
        """0.0 when the call may go now (and is counted); else the seconds until it may.

        ``chat.update`` counts against the workspace's tier-3 budget and the
        channel; a new message (``chat.postMessage``) against the channel only.
        """
        wait, granted = self.reserve(method, channel, within=0.0)
        return 0.0 if granted else wait

    def reserve(self, method: str, channel: str, *, within: float) -> tuple[float, bool]:
        """The call's slot: ``(wait, True)`` when one is free within ``within`` seconds — it is
        then counted at that time and the caller must make the call in ``wait`` seconds without
        asking again — else ``(wait, False)`` with nothing counted.

        Why reserve rather than only refuse: cards that change together all hear "in 1.2 s",
        all come back then, one wins, and the rest give up after a few rounds while the budget
        goes unused. A reservation gives each its own slot, so the budget is spent evenly.
        """
        keys = [self._channel_key(channel)]
        args: list[float | int] = [self.now(), max(0.0, within), self.channel_rate.interval,
                                   self.channel_rate.burst]
        if method == "chat.update":
            keys.append(self._workspace_key(method))
            args += [self.update_rate.interval, self.update_rate.burst]
        granted, wait = self._acquire(keys=keys, args=args)
        return float(wait), bool(int(granted))

    def acquire(self, method: str, channel: str, *, max_wait: float) -> bool:
        """Wait (sleeping) up to ``max_wait`` seconds for a slot; False when none came in time.

        The slot is reserved first and slept to once, so callers waiting together each get one
        of their own instead of polling for the same one. A caller that gets False skips the
        write this time and tries again on its next round, rather than blocking a worker on
        someone else's budget.
        """
        wait, reserved = self.reserve(method, channel, within=max_wait)
        if not reserved:
            return False
        if wait > 0:
            self.sleep(wait)
        return True

    def sent(self, channel: str) -> None:
        """A message has just reached ``channel``: its next slot is at least one interval from now.

        Why: a slot is counted when it is reserved, but the call may go out later than its slot
        (a slow Slack, a thread that waited for the GIL); the next caller's slot, counted from the
        first one's, could then follow it at once — two in one second as Slack sees them. Pushing
        the channel's next slot to "now + interval" once the call has landed keeps the spacing
        between calls that actually landed, whatever each one waited."""
        interval = self.channel_rate.interval
        self._penalize(keys=[self._channel_key(channel)], args=[self.now() + interval, interval])

    def penalize(self, method: str, retry_after: float) -> None:
        """Slack answered 429 with ``Retry-After``: nobody in this workspace calls ``method``
        before that time has passed."""
        until = self.now() + max(0.0, retry_after)
        self._penalize(keys=[self._workspace_key(method)], args=[until, retry_after])


__all__ = ["CHANNEL_PER_SECOND", "TIER3_PER_MINUTE", "Rate", "SlackPacer", "workspace_scope"]
