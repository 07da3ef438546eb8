"""The stall monitor's records in Redis, shared by the monitor (which writes them) and the Mute
flow (which reads a post's mute record and writes the mute): one module both import, so neither
package reads the other's keys (no `flows ↔ monitor` cycle).

A post record is keyed by the run's `metadata.uid` (a run re-created with the
same name is a new run) and lives while the run exists plus 24 h: every sweep
that still sees the run renews it (`touch`). Mutes stay keyed by run name: a
mute is a person's decision about "this run", for 24 h.
"""

from __future__ import annotations

import json

import redis
from pydantic import BaseModel, Field

from workers.records import keys

PREFIX = keys.MONITOR
RECORD_TTL = 24 * 3600  # after the run was last seen
EVENT_TYPE = "taubot_stall"  # Slack message metadata of every auto-post


class PostRecord(BaseModel):
    """A run's (or a group's) current auto-post."""

    channel: str
    ts: str
    run: str = ""
    namespace: str = ""
    layer: int = 0
    reason: str = ""
    phase: str = ""
    group: str | None = None
    label: str = ""
    note: str = ""  # groups: the next start their card says (`; the next start ≈ 14:20 UTC`), or ""
    members: dict[str, dict[str, str]] = Field(default_factory=dict)  # groups: uid → {run, phase, since}
    state: str = "stalled"  # stalled | recovered | finished | deleted | left | resolved
    posted_at: float = 0.0  # epoch seconds of the top-level post (a re-stall after 24 h posts anew)
    degraded: bool = False  # posted as plain text: the card failed Block Kit validation
    # Replies this record has had: part of the id of its next reply, so a reply is claimed, posted
    # (its id in the message metadata) and recorded (seq + 1) once, whatever kill comes between.
    seq: int = 0


class MuteRecord(BaseModel):
    """What a Mute button stands for (its value is only this record's signed id)."""

    workspace: str
    namespace: str
    runs: list[tuple[str, str]]  # (run, kind)
    channel: str
    ts: str


record_key = keys.stall_record_key


group_key = keys.stall_group_key


posted_set = keys.stall_posted_key  # the uids of a workspace's runs with a record (pruned as records expire)


claim_key = keys.stall_claim_key  # a post in flight: set before the post, deleted once its record is saved


mute_key = keys.mute_key


mute_record_key = keys.mute_record_key


def load(conn: redis.Redis, key: str) -> PostRecord | None:
    raw = conn.get(key)
    return PostRecord.model_validate_json(raw) if raw else None


def save(conn: redis.Redis, ws: str, key: str, record: PostRecord, uid: str | None = None) -> None:
    conn.set(key, record.model_dump_json(), ex=RECORD_TTL)
    if uid is not None:
        conn.sadd(posted_set(ws), uid)


def muted(conn: redis.Redis, ws: str, ns: str, run: str) -> dict | None:
    raw = conn.get(mute_key(ws, ns, run))
    return json.loads(raw) if raw else None


__all__ = ["EVENT_TYPE", "PREFIX", "RECORD_TTL", "MuteRecord", "PostRecord", "claim_key", "group_key", "load",
           "mute_key", "mute_record_key", "muted", "posted_set", "record_key", "save"]
