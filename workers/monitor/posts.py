"""Auto-posts: once per (run, layer, reason), edited in place, grouped by shared cause (SPEC §7b).

Every decision is backed by a Redis record, never by process memory, so a
restarted monitor — or two `--once` sweeps back to back — posts nothing
twice: a post is claimed with SET NX on its (run, layer, reason) key before
it is sent. A run's current post is remembered with the reason it shows;
when the reason changes the card is edited and one thread reply says so;
when the run recovers or finishes the card says so and one reply says when.
Cards are posted and edited through the posted-card store, so the Escalate
and Mute notes of other writers are kept. Auto-posts never show
operator-only hints.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from workers.contracts.ids import MUTE_ACTION
from workers.contracts.signing import sign_id
from workers.diagnosis.models import Diagnosis
from workers.flows.escalation import offer_escalation
from workers.render.buttons import CardButton
from workers.render.cards import build_group_card, build_phase_card
from workers.render.mrkdwn import code, escape
from workers.render.slots import AutoPostFooter, EscalationSlot, MuteSlot
from workers.services import Services
from workers.surfaces.base import Failed

from .stalls import Stall, key_digest

log = logging.getLogger(__name__)

PREFIX = "taubot:monitor:"
ONCE_TTL = 7 * 24 * 3600


class PostRecord(BaseModel):
    """A run's (or a group's) current auto-post."""

    channel: str
    ts: str
    layer: int = 0
    reason: str = ""
    phase: str = ""
    group: str | None = None
    members: dict[str, dict[str, str]] = Field(default_factory=dict)  # groups: run → {phase, since}
    state: str = "stalled"


class MuteRecord(BaseModel):
    """What a Mute button stands for (its value is only this record's signed id)."""

    workspace: str
    namespace: str
    runs: list[tuple[str, str]]  # (run, kind)
    channel: str
    ts: str


@dataclass
class Candidate:
    stall: Stall
    diagnosis: Diagnosis
    live: Any  # a RunReport-shaped value (diagnosis, workspace, objects) for the Escalate offer


def run_key(ws: str, ns: str, run: str) -> str:
    return f"{PREFIX}run:{ws}:{ns}:{run}"


def group_key(ws: str, group: str) -> str:
    return f"{PREFIX}group:{ws}:{key_digest(group)}"


def mute_key(ws: str, ns: str, run: str) -> str:
    return f"{PREFIX}mute:{ws}:{ns}:{run}"


def _once(services: Services, *parts: str) -> bool:
    """Claim a post for these parts; False when some sweep already made it."""
    return bool(services.redis.set(f"{PREFIX}once:{key_digest(*parts)}", "1", nx=True, ex=ONCE_TTL))


def _load(services: Services, key: str) -> PostRecord | None:
    raw = services.redis.get(key)
    return PostRecord.model_validate_json(raw) if raw else None


def _save(services: Services, key: str, record: PostRecord) -> None:
    services.redis.set(key, record.model_dump_json(), ex=ONCE_TTL)
    services.redis.sadd(f"{PREFIX}posted", key)


def muted(services: Services, ws: str, ns: str, run: str) -> dict | None:
    raw = services.redis.get(mute_key(ws, ns, run))
    return json.loads(raw) if raw else None


def _stamp(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ") if moment else "unknown"


def _mute_button(services: Services) -> tuple[CardButton | None, str | None]:
    key = services.settings.button_key()
    if key is None:
        return None, None
    record_id = secrets.token_urlsafe(18)
    hours = services.settings.mute_hours
    return (CardButton(action_id=MUTE_ACTION, text=f"🔕 Mute {hours} h", value=sign_id(key, record_id)),
            record_id)


def _store_mute(services: Services, record_id: str | None, record: MuteRecord) -> None:
    if record_id is not None:
        services.redis.set(f"{PREFIX}mute-record:{record_id}", record.model_dump_json(),
                           ex=services.settings.diagnosis_ttl_seconds)


def _status(stall: Stall) -> AutoPostFooter:
    return AutoPostFooter(status=f"🚨 *Auto-posted by taubot*: stalled at *{escape(stall.phase, 60)}* "
                                 f"({escape(stall.reason, 60)}) since {_stamp(stall.since)}.")


def _phase_context(services: Services, c: Candidate, channel: str, ts: str = "") -> Any:
    offer = offer_escalation(services, c.live, channel=channel, thread_ts=ts, requested_by="monitor",
                             now=services.clock.now())
    context = build_phase_card(c.diagnosis, workspace=c.live.workspace, operator_hints_allowed=False,
                               escalate_button=offer.button if offer else None)
    return context, offer


def post_run(services: Services, ws: str, channel: str, c: Candidate) -> str:
    """The individual auto-post path of one stalled run: post, or edit on a reason change."""
    s = c.stall
    key = run_key(ws, s.namespace, s.run)
    record = _load(services, key)
    if record is not None and record.state == "stalled" and record.group is None:
        if (record.layer, record.reason) == (s.layer, s.reason):
            return "unchanged"
        if not _once(services, ws, s.namespace, s.run, str(s.layer), s.reason):
            return "already"
        context, offer = _phase_context(services, c, record.channel, record.ts)
        services.cards.update_if_changed(
            record.channel, record.ts,
            lambda old: context.with_slot(_status(s)).with_slot(old.mute),
            max_wait=15.0)
        if offer is not None:
            offer.attach(record.ts)
        was = f"{escape(record.phase, 60)} ({escape(record.reason, 60)})"
        services.surface.post(record.channel, f"↪️ {code(s.run, 80)} is now stuck at *{escape(s.phase, 60)}* "
                              f"({escape(s.reason, 60)}), was {was}.", thread_ts=record.ts)
        _save(services, key, record.model_copy(update={"layer": s.layer, "reason": s.reason,
                                                       "phase": s.phase}))
        return "edited"
    if not _once(services, ws, s.namespace, s.run, str(s.layer), s.reason):
        return "already"
    context, offer = _phase_context(services, c, channel)
    mute, mute_id = _mute_button(services)
    context = context.with_slot(_status(s)).with_slot(MuteSlot(button=mute))
    posted = services.cards.post(channel, context)
    if isinstance(posted, Failed):
        services.redis.delete(f"{PREFIX}once:{key_digest(ws, s.namespace, s.run, str(s.layer), s.reason)}")
        log.warning("monitor: could not post %s in %s: %s", s.run, channel, posted.error)
        return "failed"
    if offer is not None:
        offer.attach(posted.ts)
    _store_mute(services, mute_id, MuteRecord(workspace=ws, namespace=s.namespace, runs=[(s.run, s.kind)],
                                              channel=channel, ts=posted.ts))
    _save(services, key, PostRecord(channel=channel, ts=posted.ts, layer=s.layer, reason=s.reason,
                                    phase=s.phase))
    return "posted"


def post_group(services: Services, ws: str, channel: str, group: str, label: str,
               members: list[Candidate]) -> str:
    """One post for runs stalled by one shared cause, edited as runs join and leave."""
    candidates = members
    key = group_key(ws, group)
    record = _load(services, key)
    now_members = {c.stall.run: {"phase": c.stall.phase, "since": _stamp(c.stall.since)} for c in members}
    rows = [(run, m["phase"], m["since"]) for run, m in sorted(now_members.items())]
    first = sorted(members, key=lambda c: c.stall.run)[0]
    if record is None or record.state != "stalled":
        if not _once(services, ws, "group", group, ",".join(sorted(now_members))):
            return "already"
        offer = offer_escalation(services, first.live, channel=channel, thread_ts="",
                                 requested_by="monitor", now=services.clock.now())
        runs = [(c.stall.run, c.stall.kind) for c in members]
        mute, mute_id = _mute_button(services)
        context = build_group_card(label, rows,
                                   status="🚨 *Auto-posted by taubot*; edited as runs join and leave.",
                                   escalate_button=offer.button if offer else None, mute_button=mute)
        posted = services.cards.post(channel, context)
        if isinstance(posted, Failed):
            return "failed"
        if offer is not None:
            offer.attach(posted.ts)
        _store_mute(services, mute_id, MuteRecord(workspace=ws, namespace=first.stall.namespace, runs=runs,
                                                  channel=channel, ts=posted.ts))
        _save(services, key, PostRecord(channel=channel, ts=posted.ts, group=group, members=now_members,
                                        phase=first.stall.phase, reason=first.stall.reason))
        for c in members:
            _save(services, run_key(ws, c.stall.namespace, c.stall.run),
                  PostRecord(channel=channel, ts=posted.ts, layer=c.stall.layer, reason=c.stall.reason,
                             phase=c.stall.phase, group=group))
        return "posted"
    joined = sorted(set(now_members) - set(record.members))
    if not joined:
        return "unchanged"  # runs that left are settled (and the card edited) by `settle`
    members = {**record.members, **{run: now_members[run] for run in joined}}
    rows = [(run, m["phase"], m["since"]) for run, m in sorted(members.items())]
    card = build_group_card(label, rows)
    services.cards.update_if_changed(
        record.channel, record.ts,
        lambda old: old.model_copy(update={"runs": card.runs, "header": card.header}), max_wait=15.0)
    for run in joined:
        services.surface.post(record.channel, f"➕ {code(run, 80)} is stuck for the same cause.",
                              thread_ts=record.ts)
        c = next(m for m in candidates if m.stall.run == run)
        _save(services, run_key(ws, c.stall.namespace, run),
              PostRecord(channel=record.channel, ts=record.ts, layer=c.stall.layer, reason=c.stall.reason,
                         phase=c.stall.phase, group=group))
    _save(services, key, record.model_copy(update={"members": members}))
    return "edited"


def settle(services: Services, ws: str, still_stalled: set[str], finished: dict[str, str]) -> list[str]:
    """Runs (and groups) whose auto-post is current but which are no longer stalled: the card says
    so and one reply says when. ``finished`` maps a run to how it ended."""
    now = services.clock.now()
    at = now.strftime("%H:%M UTC")
    done: list[str] = []
    for key in sorted(services.redis.smembers(f"{PREFIX}posted")):
        key = key.decode() if isinstance(key, bytes) else key
        if not key.startswith(f"{PREFIX}run:{ws}:"):
            continue
        record = _load(services, key)
        run = key.rsplit(":", 1)[1]
        if record is None or record.state != "stalled" or run in still_stalled:
            continue
        ended = finished.get(run)
        if record.group is None:
            status = (f"🏁 *The run finished ({ended})* at {at}; taubot stopped following it." if ended
                      else f"✅ *Recovered* at {at}: no longer stalled at *{escape(record.phase, 60)}*.")
            services.cards.update_if_changed(
                record.channel, record.ts, lambda old, st=status: old.with_slot(AutoPostFooter(status=st))
                .with_slot(EscalationSlot(note=old.escalation.note)).with_slot(MuteSlot(note=old.mute.note)),
                max_wait=15.0)
            word = f"finished ({ended})" if ended else "recovered"
            services.surface.post(record.channel, f"✅ {code(run, 80)} recovered: {word} at {at}.",
                                  thread_ts=record.ts)
        _save(services, key, record.model_copy(update={"state": "recovered"}))
        done.append(run)
        if record.group is not None:
            _leave_group(services, ws, record.group, run, at)
    return done


def _leave_group(services: Services, ws: str, group: str, run: str, at: str) -> None:
    key = group_key(ws, group)
    record = _load(services, key)
    if record is None or record.state != "stalled" or run not in record.members:
        return
    members = {r: m for r, m in record.members.items() if r != run}
    rows = [(r, m["phase"], m["since"]) for r, m in sorted(members.items())]
    label = record.phase
    if members:
        services.cards.update_if_changed(record.channel, record.ts, lambda old: old.model_copy(
            update={"runs": build_group_card(label, rows).runs}), max_wait=15.0)
        services.surface.post(record.channel, f"✅ {code(run, 80)} recovered at {at} and left this group.",
                              thread_ts=record.ts)
        _save(services, key, record.model_copy(update={"members": members}))
        return
    services.cards.update_if_changed(record.channel, record.ts, lambda old: old.model_copy(
        update={"runs": "_no run is stalled any more_"}).with_slot(
            AutoPostFooter(status=f"✅ *Resolved* at {at}: every run recovered.")).with_slot(
            EscalationSlot(note=old.escalation.note)).with_slot(MuteSlot(note=old.mute.note)), max_wait=15.0)
    services.surface.post(record.channel, f"✅ {code(run, 80)} recovered at {at}: the group is resolved.",
                          thread_ts=record.ts)
    _save(services, key, record.model_copy(update={"members": {}, "state": "resolved"}))


def mute_until(services: Services, hours: int) -> datetime:
    return services.clock.now() + timedelta(hours=hours)


__all__ = ["Candidate", "MuteRecord", "PostRecord", "muted", "mute_key", "post_group", "post_run", "settle"]
