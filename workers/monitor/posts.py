"""Auto-posts: one per stall of a run, edited in place, grouped by shared cause (SPEC §7b, §11).

Every decision is backed by a Redis record (`workers/records/stalls.py`), never
by process memory, keyed by the run's uid. A new post is *claimed* before it
is sent and the claim is deleted once its record is saved; every auto-post
carries Slack message metadata (`taubot_stall`, the run's uid or the group's
key, the reason). So a claim found without a record means a crash between
the two, and `conversations.history` says whether the post went out: adopted
if it did, posted if it did not — nothing lost, nothing twice. Only a message
taubot's own bot posted is adopted (its ``bot_id`` or ``user`` is what
``auth.test`` says is taubot's): any app in the channel can attach the same
metadata, and its message must not stand in for the post (SPEC §11). Every thread
reply goes the same way (`_reply`): its id is the record's, the record's reply
count (`seq`) and what happened, so it is found again in the thread
(`conversations.replies`) after a kill, and the record saved after it moves
`seq` on.

A run's post is edited when its reason changes (one reply), when it recovers,
finishes or is deleted (one reply each, saying which), and when it stalls
again within 24 h ("stalled again", one reply; a new post after that).
Groups: a member leaves on recovery, finish, deletion or a reason change; a
group down to one member stays that group's card until it resolves; a group
post that failed releases its claim and is retried next sweep. A card that
fails Block Kit validation is posted as escaped, clipped text instead — never
dropped. Auto-posts never show operator-only hints.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workers.contracts.ids import MUTE_ACTION
from workers.contracts.signing import sign_id
from workers.diagnosis.models import Diagnosis
from workers.diagnosis.queue_position import StartEstimate
from workers.plumbing import metrics
from workers.records.offers import offer_escalation
from workers.records.stalls import (
    EVENT_TYPE,
    RECORD_TTL,
    MuteRecord,
    PostRecord,
    claim_key,
    group_key,
    load,
    mute_record_key,
    posted_set,
    record_key,
    save,
)
from workers.render.buttons import CardButton
from workers.render.cards import CardError, build_group_card, build_phase_card
from workers.render.mrkdwn import code, escape, truncate
from workers.render.slots import AutoPostFooter, EscalationSlot, MuteSlot
from workers.services import Services
from workers.surfaces.base import Failed

from .stalls import Stall, key_digest

log = logging.getLogger(__name__)

REPOST_AFTER = 24 * 3600  # a run stalling again edits its card when younger than this, else posts anew
DEGRADED_TEXT = 2900
_UNKNOWN = object()  # the history could not be read: neither post nor adopt this sweep


@dataclass
class Candidate:
    stall: Stall
    diagnosis: Diagnosis
    live: Any  # a RunReport-shaped value (diagnosis, workspace, objects) for the Escalate offer
    uid: str
    start: StartEstimate | None = None  # its group's next start (starts.py), when it has a basis


def _stamp(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ") if moment else "unknown"


def _metadata(ident: str, reason: str) -> dict[str, Any]:
    return {"event_type": EVENT_TYPE, "event_payload": {"id": ident, "reason": reason}}


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
        services.redis.set(mute_record_key(record_id), record.model_dump_json(),
                           ex=services.settings.diagnosis_ttl_seconds)


def _status(stall: Stall, again: bool = False) -> AutoPostFooter:
    lead = "stalled again" if again else "stalled"
    return AutoPostFooter(status=f"🚨 *Auto-posted by taubot*: {lead} at *{escape(stall.phase, 60)}* "
                                 f"({escape(stall.reason, 60)}) since {_stamp(stall.since)}.")


def _closed(old: Any, status: str) -> Any:
    """The card with its footer saying how it ended, the buttons gone, the notes kept."""
    return old.with_slot(AutoPostFooter(status=status)).with_slot(
        EscalationSlot(note=old.escalation.note)).with_slot(MuteSlot(note=old.mute.note))


def _phase_context(services: Services, c: Candidate, channel: str, ts: str = "") -> Any:
    offer = offer_escalation(services, c.live, channel=channel, thread_ts=ts, requested_by="monitor",
                             now=services.clock.now())
    context = build_phase_card(c.diagnosis, workspace=c.live.workspace, operator_hints_allowed=False,
                               escalate_button=offer.button if offer else None)
    return context, offer


# ------------------------------------------------------------------ Slack writes, never a crash


def _post_card(services: Services, channel: str, build: Callable[[], Any], degraded: str,
               metadata: dict[str, Any]) -> tuple[str, bool] | Failed:
    """(ts, degraded) of a new top-level auto-post; the card, or — when it fails Block Kit
    validation, here or at Slack — ``degraded`` (mrkdwn, every cluster part escaped) clipped."""
    try:
        posted = services.cards.post(channel, build(), metadata=metadata)
    except CardError as exc:
        log.warning("monitor: a card failed validation (%s); posting it as text", exc)
        posted = Failed(kind="error", error="invalid_blocks")
    if not isinstance(posted, Failed):
        return posted.ts, False
    if posted.error != "invalid_blocks":
        return posted
    metrics.MONITOR_RUN_ERRORS.labels("card").inc()
    sent = services.surface.post(channel, truncate(degraded, DEGRADED_TEXT), None, metadata=metadata)
    return sent if isinstance(sent, Failed) else (sent.ts, True)


def _edit(services: Services, channel: str, ts: str, change: Callable[[Any], Any]) -> None:
    """Edit a card in place; a card that no longer validates keeps what it showed (the thread
    reply that goes with every edit says what changed)."""
    try:
        services.cards.update_if_changed(channel, ts, change, max_wait=15.0)
    except (CardError, RuntimeError) as exc:
        metrics.MONITOR_RUN_ERRORS.labels("card").inc()
        log.warning("monitor: could not edit the card %s/%s: %s", channel, ts, exc)


RETRY_KINDS = ("deferred", "unreachable")  # a reply that failed so is tried again next sweep


def _reply(services: Services, ws: str, owner: str, record: PostRecord, text: str, what: str) -> str | None:
    """One reply in ``record``'s thread, the way a top-level post is made: claimed, posted with
    message metadata naming it, then recorded by the caller. Its id is the record's (``owner``:
    a run's uid, a group's ``group:…``), the record's ``seq`` and ``what`` happened, so a monitor
    killed after the post finds it in the thread (`conversations.replies`) and adopts it, and one
    killed before the post posts it once — the same `_new_post` as top-level posts.

    Returns the reply's id: the caller saves the record with ``seq + 1``, then `_release`s it.
    None when the reply did not go now (Slack deferred it or was unreachable, or the thread could
    not be read): the caller saves nothing, so the next sweep tries the same reply again. A reply
    Slack refused for good (the thread is gone) is given up, and the record moves on."""
    ident = f"{owner}:{record.seq}:{what}"
    failed: list[Failed] = []

    def send() -> tuple[str, bool] | Failed:
        sent = services.surface.post(record.channel, text, thread_ts=record.ts,
                                     metadata=_metadata(ident, record.reason))
        if isinstance(sent, Failed):
            failed.append(sent)
            return sent
        return sent.ts, False

    outcome, _, _ = _new_post(services, ws, record.channel, ident, record.reason, send, thread_ts=record.ts)
    if outcome == "unknown" or (failed and failed[0].kind in RETRY_KINDS):
        return None
    if outcome == "reconciled":
        log.info("monitor: a reply %s was already in its thread: not said again", ident)
    return ident


def _claim(services: Services, ws: str, ident: str) -> dict | None:
    """Claim a new post of ``ident``; None when taken now, else the earlier claim (a post that
    may have gone out without its record)."""
    key = claim_key(ws, ident)
    now = services.clock.now().timestamp()
    if services.redis.set(key, json.dumps({"at": now}), nx=True, ex=RECORD_TTL):
        return None
    raw = services.redis.get(key)
    return json.loads(raw) if raw else {"at": now - RECORD_TTL}


def _reconcile(services: Services, channel: str, ident: str, since: float,
               thread_ts: str | None = None) -> Any:
    """The ts of ``ident``'s message since ``since``: a top-level post in the channel's history,
    or with ``thread_ts`` a reply in that thread. None when there is none, `_UNKNOWN` when the
    history could not be read."""
    if thread_ts is None:
        history = getattr(services.surface, "history", None)
        found = history(channel, since - 60) if history is not None else []
    else:
        replies = getattr(services.surface, "replies", None)
        found = replies(channel, thread_ts, since - 60) if replies is not None else []
    if isinstance(found, Failed):
        log.warning("monitor: cannot read %s's history (%s): a claimed post waits", channel, found.error)
        return _UNKNOWN
    own = getattr(services.surface, "is_own", None)  # a terminal's history holds only its own
    for message in found:
        meta = message.get("metadata")
        if not isinstance(meta, dict) or meta.get("event_type") != EVENT_TYPE:
            continue
        payload = meta.get("event_payload")
        if not isinstance(payload, dict) or payload.get("id") != ident:
            continue
        mine = own(message) if own is not None else True
        if isinstance(mine, Failed):
            log.warning("monitor: cannot tell taubot's own messages (auth.test: %s): a claimed post waits",
                        mine.error)
            return _UNKNOWN
        if not mine:  # another app's message with taubot's metadata: never adopted (SPEC §11)
            log.warning("monitor: ignored a message in %s with taubot_stall metadata posted by another app",
                        channel)
            metrics.UNTRUSTED_DROPPED.labels("foreign_message").inc()
            continue
        if isinstance(message.get("ts"), str):
            return message["ts"]
    return None


def _new_post(services: Services, ws: str, channel: str, ident: str, reason: str,
              post: Callable[[], tuple[str, bool] | Failed],
              thread_ts: str | None = None) -> tuple[str, str | None, bool]:
    """Claim, reconcile, post: (outcome, ts, degraded). The caller saves the record, then
    `_release`s the claim. ``thread_ts``: a reply in that thread (reconciled from the thread)."""
    earlier = _claim(services, ws, ident)
    if earlier is not None:
        found = _reconcile(services, channel, ident, float(earlier.get("at") or 0), thread_ts)
        if found is _UNKNOWN:
            return "unknown", None, False
        if found is not None:
            log.info("monitor: adopted the post %s of %s (its record was never saved)", found, ident)
            return "reconciled", found, False
    got = post()
    if isinstance(got, Failed) and got.kind == "unreachable":
        # No answer (a timeout, a reset): the message may be in the channel all the same. The claim
        # stays, so the next sweep looks in the history (or thread) before posting again.
        log.warning("monitor: no answer from Slack for %s in %s (%s): looking for it next sweep", ident,
                    channel, got.error)
        return "unknown", None, False
    if isinstance(got, Failed):
        _release(services, ws, ident)
        log.warning("monitor: could not post %s in %s: %s", ident, channel, got.error or got.kind)
        return "failed", None, False
    return "posted", got[0], got[1]


def _release(services: Services, ws: str, ident: str) -> None:
    services.redis.delete(claim_key(ws, ident))


# ------------------------------------------------------------------ one run


def post_run(services: Services, ws: str, channel: str, c: Candidate) -> str:
    """The individual auto-post path of one stalled run: post, edit on a reason change, or edit
    and reply when it stalls again."""
    s = c.stall
    key = record_key(ws, c.uid)
    record = load(services.redis, key)
    now = services.clock.now().timestamp()
    if record is not None and record.group is None:
        if record.state == "stalled":
            if (record.layer, record.reason) == (s.layer, s.reason):
                services.redis.expire(key, RECORD_TTL)
                return "unchanged"
            return _changed_reason(services, ws, key, record, c)
        if record.state in ("recovered", "finished") and now - record.posted_at < REPOST_AFTER:
            return _stalled_again(services, ws, key, record, c)
    offer_box: list[Any] = []
    mute, mute_id = _mute_button(services)

    def build() -> Any:
        context, offer = _phase_context(services, c, channel)
        offer_box.append(offer)
        return context.with_slot(_status(s)).with_slot(MuteSlot(button=mute))

    degraded = (f"🚨 *Auto-posted by taubot*: {code(s.run, 120)} ({escape(s.kind, 40)}) in "
                f"{code(s.namespace, 80)} is stalled at *{escape(s.phase, 60)}* ({escape(s.reason, 60)}) "
                f"since {_stamp(s.since)}. The full card could not be shown.")
    outcome, ts, was_degraded = _new_post(
        services, ws, channel, c.uid, s.reason,
        lambda: _post_card(services, channel, build, degraded, _metadata(c.uid, s.reason)))
    if ts is None:
        return outcome
    if offer_box and offer_box[0] is not None and not was_degraded:
        offer_box[0].attach(ts)
    _store_mute(services, mute_id, MuteRecord(workspace=ws, namespace=s.namespace, runs=[(s.run, s.kind)],
                                              channel=channel, ts=ts))
    save(services.redis, ws, key, PostRecord(channel=channel, ts=ts, run=s.run, namespace=s.namespace,
                                             layer=s.layer, reason=s.reason, phase=s.phase, posted_at=now,
                                             degraded=was_degraded), c.uid)
    _release(services, ws, c.uid)
    return outcome


def _changed_reason(services: Services, ws: str, key: str, record: PostRecord, c: Candidate) -> str:
    s = c.stall
    was = f"{escape(record.phase, 60)} ({escape(record.reason, 60)})"
    text = (f"↪️ {code(s.run, 80)} is now stuck at *{escape(s.phase, 60)}* ({escape(s.reason, 60)}), "
            f"was {was}.")
    return _restate(services, ws, key, record, c, again=False, text=text, what="reason", outcome="edited")


def _stalled_again(services: Services, ws: str, key: str, record: PostRecord, c: Candidate) -> str:
    s = c.stall
    text = (f"🔁 {code(s.run, 80)} stalled again: stuck at *{escape(s.phase, 60)}* "
            f"({escape(s.reason, 60)}) since {_stamp(s.since)}.")
    return _restate(services, ws, key, record, c, again=True, text=text, what="again", outcome="again")


def _restate(services: Services, ws: str, key: str, record: PostRecord, c: Candidate, *, again: bool,
             text: str, what: str, outcome: str) -> str:
    """Edit a run's card to its new stall and say so in one thread reply (claimed, posted,
    recorded); "deferred" when the reply could not be said this sweep (tried again next one)."""
    s = c.stall
    context, offer = _phase_context(services, c, record.channel, record.ts)
    _edit(services, record.channel, record.ts,
          lambda old: context.with_slot(_status(s, again=again)).with_slot(old.mute))
    if offer is not None:
        offer.attach(record.ts)
    said = _reply(services, ws, c.uid, record, text, what)
    if said is None:
        return "deferred"
    update: dict = {"layer": s.layer, "reason": s.reason, "phase": s.phase, "seq": record.seq + 1}
    if again:
        update["state"] = "stalled"
    save(services.redis, ws, key, record.model_copy(update=update), c.uid)
    _release(services, ws, said)
    return outcome


# ------------------------------------------------------------------ groups


def start_note(estimates: Iterable[StartEstimate | None]) -> str:
    """`; the next start ≈ 14:20 UTC` for runs waiting in one ClusterQueue (SPEC §7b, issue 35): the
    soonest start any of them has an estimate for — its ETA-based `earliest`, else its time-limit
    `latest` (`at the latest`) — or nothing when none has one (never a time without a basis)."""
    best: tuple[str, str] | None = None
    for est in estimates:
        at = (est.earliest or est.latest) if est is not None else None
        if est is not None and at and (best is None or at < best[0]):
            best = (at, "≈" if est.earliest else "at the latest")
    if best is None:
        return ""
    when = datetime.fromisoformat(best[0].replace("Z", "+00:00"))
    return f"; the next start {best[1]} {when:%H:%M} UTC"


def _rows(members: dict[str, dict[str, str]]) -> list[tuple[str, str, str]]:
    return [(m["run"], m["phase"], m["since"]) for m in sorted(members.values(), key=lambda m: m["run"])]


def _group_edit(label: str, members: dict[str, dict[str, str]]) -> Callable[[Any], Any]:
    """The group card's members, header and notification text, for an edit."""
    card = build_group_card(label, _rows(members))
    return lambda old: old.replace(runs=card.runs, header=card.header, intro=card.intro,
                                   fallback=card.fallback)


def live_group(services: Services, ws: str, group: str) -> bool:
    record = load(services.redis, group_key(ws, key_digest(group)))
    return record is not None and record.state == "stalled"


def post_group(services: Services, ws: str, channel: str, group: str, label: str,
               members: list[Candidate]) -> str:
    """One post for runs stalled by one shared cause, edited as runs join and leave."""
    digest = key_digest(group)
    key = group_key(ws, digest)
    record = load(services.redis, key)
    now = services.clock.now().timestamp()
    now_members = {c.uid: {"run": c.stall.run, "phase": c.stall.phase, "since": _stamp(c.stall.since)}
                   for c in members}
    first = sorted(members, key=lambda c: c.stall.run)[0]
    note = start_note(c.start for c in members)
    shown = label + note  # the stored label stays the cause's; the note is kept beside it
    if record is None or record.state != "stalled":
        offer_box: list[Any] = []
        mute, mute_id = _mute_button(services)

        def build() -> Any:
            offer = offer_escalation(services, first.live, channel=channel, thread_ts="",
                                     requested_by="monitor", now=services.clock.now())
            offer_box.append(offer)
            return build_group_card(shown, _rows(now_members),
                                    status="🚨 *Auto-posted by taubot*; edited as runs join and leave.",
                                    escalate_button=offer.button if offer else None, mute_button=mute)

        degraded = (f"🚨 *Auto-posted by taubot*: {len(members)} runs stalled: {escape(shown, 300)}: "
                    + ", ".join(code(run, 120) for run, _, _ in _rows(now_members)))
        ident = f"group:{digest}"
        outcome, ts, was_degraded = _new_post(
            services, ws, channel, ident, first.stall.reason,
            lambda: _post_card(services, channel, build, degraded, _metadata(ident, first.stall.reason)))
        if ts is None:
            return outcome
        if offer_box and offer_box[0] is not None and not was_degraded:
            offer_box[0].attach(ts)
        _store_mute(services, mute_id, MuteRecord(workspace=ws, namespace=first.stall.namespace,
                                                  runs=[(c.stall.run, c.stall.kind) for c in members],
                                                  channel=channel, ts=ts))
        save(services.redis, ws, key, PostRecord(channel=channel, ts=ts, group=group, label=label, note=note,
                                                 members=now_members, phase=first.stall.phase,
                                                 reason=first.stall.reason, posted_at=now,
                                                 degraded=was_degraded))
        for c in members:
            _save_member(services, ws, c, channel, ts, group, now)
        _release(services, ws, ident)
        return outcome
    joined = sorted(set(now_members) - set(record.members))
    for c in members:
        if c.uid not in joined:
            services.redis.expire(record_key(ws, c.uid), RECORD_TTL)
    if not joined:
        services.redis.expire(key, RECORD_TTL)
        if note == record.note:
            return "unchanged"  # runs that left are settled (and the card edited) by `settle`
        # The next start moved (a holder finished, a time limit came nearer): the header says the new one,
        # edited in place without a reply.
        _edit(services, record.channel, record.ts,
              _group_edit((record.label or label) + note, record.members))
        save(services.redis, ws, key, record.model_copy(update={"note": note}))
        return "moved"
    merged = {**record.members, **{uid: now_members[uid] for uid in joined}}
    _edit(services, record.channel, record.ts, _group_edit((record.label or label) + note, merged))
    said = [_reply(services, ws, f"group:{digest}", record,
                   f"➕ {code(now_members[uid]['run'], 80)} is stuck for the same cause.", f"join:{uid}")
            for uid in joined]
    if None in said:  # the next sweep says what is left (what was said is found in the thread)
        return "deferred"
    for uid in joined:
        c = next(m for m in members if m.uid == uid)
        _save_member(services, ws, c, record.channel, record.ts, group, record.posted_at)
    save(services.redis, ws, key, record.model_copy(update={"members": merged, "note": note,
                                                            "seq": record.seq + 1}))
    for ident in said:
        _release(services, ws, str(ident))
    return "edited"


def _save_member(services: Services, ws: str, c: Candidate, channel: str, ts: str, group: str,
                 posted_at: float) -> None:
    save(services.redis, ws, record_key(ws, c.uid),
         PostRecord(channel=channel, ts=ts, run=c.stall.run, namespace=c.stall.namespace, layer=c.stall.layer,
                    reason=c.stall.reason, phase=c.stall.phase, group=group, posted_at=posted_at), c.uid)


def leave_group(services: Services, ws: str, uid: str, why: str, at: str) -> bool:
    """Take a run out of its group's card (``why``: "recovered", "changed reason", …). False when
    its reply must wait for the next sweep (the caller then leaves the member's record as it is)."""
    member = load(services.redis, record_key(ws, uid))
    if member is None or member.group is None:
        return True
    digest = key_digest(member.group)
    key = group_key(ws, digest)
    record = load(services.redis, key)
    if record is None or record.state != "stalled" or uid not in record.members:
        return True
    run = record.members[uid]["run"]
    members = {u: m for u, m in record.members.items() if u != uid}
    if members:
        _edit(services, record.channel, record.ts, _group_edit(record.label + record.note, members))
        said = _reply(services, ws, f"group:{digest}", record,
                      f"✅ {code(run, 80)} {why} at {at} and left this group.", f"leave:{uid}")
        if said is None:
            return False
        save(services.redis, ws, key, record.model_copy(update={"members": members, "seq": record.seq + 1}))
        _release(services, ws, said)
        return True
    resolved = {"runs": "_no run is stalled any more_", "fallback": escape(f"Resolved: {record.label}", 500)}
    _edit(services, record.channel, record.ts, lambda old: _closed(
        old.replace(**resolved), f"✅ *Resolved* at {at}: every run recovered."))
    said = _reply(services, ws, f"group:{digest}", record,
                  f"✅ {code(run, 80)} {why} at {at}: the group is resolved.", "resolved")
    if said is None:
        return False
    save(services.redis, ws, key, record.model_copy(update={"members": {}, "state": "resolved",
                                                            "seq": record.seq + 1}))
    _release(services, ws, said)
    return True


def posted_alone(services: Services, ws: str, uid: str) -> bool:
    """The run has a live post of its own, or one in flight (claimed, perhaps posted without its
    record): it stays out of groups, so its own card is followed (or reconciled) to the end."""
    record = load(services.redis, record_key(ws, uid))
    if record is not None and record.group is None and record.state == "stalled":
        return True
    return bool(services.redis.exists(claim_key(ws, uid)))


def changed_group(services: Services, ws: str, c: Candidate, at: str) -> None:
    """A member whose cause changed leaves its old group (and then posts or joins anew)."""
    record = load(services.redis, record_key(ws, c.uid))
    if record is None or record.group is None or record.state != "stalled" or record.group == c.stall.group:
        return
    if leave_group(services, ws, c.uid, f"changed reason (now {escape(c.stall.reason, 60)})", at):
        save(services.redis, ws, record_key(ws, c.uid), record.model_copy(update={"state": "left"}), c.uid)


# ------------------------------------------------------------------ recovery, finish, deletion


def settle(services: Services, ws: str, present: set[str], still_stalled: set[str],
           finished: dict[str, str]) -> list[str]:
    """Runs (and groups) whose auto-post is current but which are no longer stalled: the card says
    so and one reply says when. ``present``: the uids of the workspace's runs that exist;
    ``finished`` maps a uid to how it ended. Records of runs still present are renewed."""
    at = services.clock.now().strftime("%H:%M UTC")
    done: list[str] = []
    for raw in sorted(services.redis.smembers(posted_set(ws))):
        uid = raw.decode() if isinstance(raw, bytes) else raw
        key = record_key(ws, uid)
        record = load(services.redis, key)
        if record is None:  # expired: the run is gone for more than a day
            services.redis.srem(posted_set(ws), uid)
            continue
        if uid in present:
            services.redis.expire(key, RECORD_TTL)
        if record.state != "stalled" or uid in still_stalled:
            continue
        ended = finished.get(uid)
        state = "finished" if ended else ("recovered" if uid in present else "deleted")
        word = {"finished": f"finished ({ended})", "recovered": "recovered", "deleted": "was deleted"}[state]
        if record.group is None:
            status = {"finished": f"🏁 *The run finished ({ended})* at {at}; taubot stopped following it.",
                      "recovered": f"✅ *Recovered* at {at}: no longer stalled at "
                                   f"*{escape(record.phase, 60)}*.",
                      "deleted": f"🗑️ *The run was deleted* at {at}; taubot stopped following it."}[state]
            _edit(services, record.channel, record.ts, lambda old, st=status: _closed(old, st))
            icon = "🗑️" if state == "deleted" else "✅"
            said = _reply(services, ws, uid, record, f"{icon} {code(record.run, 80)} {word} at {at}.",
                          "settle")
            if said is None:
                continue  # the reply (and so the record) waits for the next sweep
            save(services.redis, ws, key, record.model_copy(update={"state": state, "seq": record.seq + 1}),
                 uid)
            _release(services, ws, said)
        else:
            if not leave_group(services, ws, uid, word, at):
                continue
            save(services.redis, ws, key, record.model_copy(update={"state": state}), uid)
        done.append(record.run)
    return done


__all__ = ["Candidate", "changed_group", "posted_alone", "leave_group", "live_group", "post_group",
           "post_run", "settle"]
