"""A watch's record in Redis: its state, its keys, the card a paced tick computed.

Nothing of a watch lives in a worker's memory between ticks (`workers/flows/watch/__init__.py`
says why); this is all of it. The keys are the `taubot:watch:` family of `workers/records/keys.py`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING

import redis
from pydantic import BaseModel, Field

from workers.collect.plan import ReadMemory
from workers.contracts.requests import StatusRequest
from workers.diagnosis.models import Diagnosis
from workers.records import keys
from workers.render.buttons import CardButton
from workers.render.cards import PhaseCardContext

if TYPE_CHECKING:
    from redis.client import Pipeline

    from workers.plumbing.conditional_write import Recorder

STATE_TTL_AFTER_END = 24 * 3600  # a late Stop press still learns the watch already ended
LOCK_TIMEOUT_SECONDS = 180  # longer than a tick can take (job timeout), shorter than a stuck watch
CARD_GONE = "the card was deleted"
CARD_UNKNOWN = "the card is no longer known to taubot"


class WatchEscalation(BaseModel):
    """The Escalate offer for the watched run's current (layer, owner), reused while they hold."""

    layer: int
    owner: str
    record_id: str
    button: CardButton


class WatchState(BaseModel):
    """Everything a tick needs, in Redis: the watch must survive any worker."""

    id: str
    request: StatusRequest
    workspace: str = ""
    watchers: list[str] = Field(description="Slack users who asked for this watch; each may stop it")
    interval: int
    started_at: datetime
    deadline: datetime
    parent_ts: str
    card_ts: str
    tick: int = 0
    reads: ReadMemory = Field(default_factory=ReadMemory, description="what the next ticks may reuse of "
                              "the last reads (`workers/collect/plan.py` decides when a tick re-reads)")
    phases: dict[str, str] = Field(default_factory=dict, description="phase name → state seen last")
    since: dict[str, datetime] = Field(default_factory=dict, description="when that state was first seen")
    observed_change: list[str] = Field(
        default_factory=list, description="phases whose `since` is a transition the watch saw"
    )
    utilization: list[float | None] = Field(default_factory=list)
    run_kind: str | None = None
    namespace: str | None = None
    updates: int = 0
    deferrals: int = Field(default=0, description="times this tick ran again to send its card in a slot "
                           "it reserved (0 or 1)")
    reserved: bool = Field(default=False, description="the pending re-run holds a slot of the pace: it "
                           "sends without asking the pacer again")
    next_due: datetime | None = Field(default=None, description="when the pending tick is due: ticks keep "
                                      "to started_at + k × interval, not to the end of the previous one")
    stopped: str | None = None
    escalation: WatchEscalation | None = None


def active_watches(conn: redis.Redis, limit: int = 100_000) -> int | None:
    """How many watches are live: their owner keys (a stopped watch frees its own), counted by
    SCAN. None when Redis cannot say — a gauge must not read 0 for "unknown"."""
    count = 0
    try:
        for _ in conn.scan_iter(match=keys.WATCH_OWNERS, count=1000):
            count += 1
            if count >= limit:
                break
    except redis.RedisError:
        return None
    return count


state_key = keys.watch_state_key
owner_key = keys.watch_owner_key
pending_key = keys.watch_pending_key
lock_name = keys.watch_lock_key


def save_pending(conn: redis.Redis, wid: str, context: PhaseCardContext, diagnosis: Diagnosis,
                 reason: str | None, *, ttl: int) -> None:
    """What a paced tick computed, for its re-run to send without reading the cluster again."""
    conn.set(pending_key(wid), json.dumps({"context": context.model_dump(mode="json"),
                                           "diagnosis": diagnosis.model_dump(mode="json"), "reason": reason}),
             ex=max(1, ttl))


def load_pending(conn: redis.Redis, wid: str) -> tuple[PhaseCardContext, Diagnosis, str | None] | None:
    raw = conn.get(pending_key(wid))
    if raw is None:
        return None
    doc = json.loads(raw)
    return (PhaseCardContext.model_validate(doc["context"]), Diagnosis.model_validate(doc["diagnosis"]),
            doc.get("reason"))


def load_state(conn: redis.Redis, wid: str) -> WatchState | None:
    raw = conn.get(state_key(wid))
    return WatchState.model_validate_json(raw) if raw else None


def save_state(conn: redis.Redis | Pipeline | Recorder, state: WatchState, now: datetime) -> None:
    """Kept until a day after the deadline: long enough for any tick or late button press."""
    ttl = max(60, int((state.deadline - now).total_seconds()) + STATE_TTL_AFTER_END)
    conn.set(state_key(state.id), state.model_dump_json(), ex=ttl)


def tick_job_id(wid: str, tick: int) -> str:
    return f"{wid}-t{tick}"


__all__ = ["CARD_GONE", "CARD_UNKNOWN", "LOCK_TIMEOUT_SECONDS", "WatchEscalation", "WatchState",
           "active_watches", "load_pending", "load_state", "lock_name", "owner_key", "pending_key",
           "save_pending", "save_state", "state_key", "tick_job_id"]
