"""Escalate to the layer's owner (issue 7, SPEC §7): one button, the right people, once.

The phase card offers *Escalate to <owner>* (for `researcher`: *Notify
submitter*). Pressing it posts a handoff in the owner's channel, mentioning
the owner's user group, notes that in the run's thread and updates the card.

Why it is built this way:

* **The button carries nothing but a signed id.** Block Kit echoes a button's
  ``value`` back in the press, and anyone able to craft a request to our
  endpoint could put anything there. So the diagnosis the handoff is about
  (run, layer, evidence, next action, where the card is) is stored in Redis
  at card time under a random id, and the value is that id plus an HMAC of
  it. A value we did not sign is refused before Redis is even asked, and no
  cluster text ever travels through Slack's interaction payloads.
* **Who may escalate is the cluster's decision.** The press is checked with a
  SelfSubjectAccessReview (`get` on the run) under the clicker's impersonated
  identity, like every other user-initiated Kubernetes call. That runs in the
  rq worker: nothing in `bot/` talks to Kubernetes.
* **Once per (run, layer, owner).** A Redis ``SET NX`` is the claim: two
  people pressing at the same moment cannot both post. The claim is first
  short-lived ("in progress") so a worker killed mid-escalation does not
  block the run for the whole escalation TTL, and becomes the long-lived
  record (with the handoff's link) once the handoff is posted. A failure
  before that releases it, so pressing again works.
* **Mentions are ours alone.** The only mention in a handoff is the owner's
  user group from configuration (``<!subteam^S…>``), plus the clicker and the
  submitter as Slack gave us their ids. Everything from the cluster goes
  through `workers/render/mrkdwn.py`; the card validator's "no raw ``<``"
  invariant is kept by rendering with unguessable placeholders that are
  swapped for our markup only after validation.
* **Every escalation is audited** as one JSON line (who, as whom, run, layer,
  owner, time): it is an action taken on someone's behalf, so the operator
  must be able to answer "who paged us about this?".
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from workers.collect.access import review
from workers.config.workspaces import OwnerRoute, Resolved
from workers.contracts.identity import Identity
from workers.contracts.ids import ESCALATE_ACTION, RECORD_ID, SLACK_USER
from workers.contracts.requests import EscalateRequest
from workers.diagnosis.linkage import SUBMITTED_BY_ANNOTATION
from workers.kube.reader import ReadError
from workers.records.offers import (
    AccessCheck,
    Claim,
    Offer,
    StoredDiagnosis,
    button_label,
    claim_of,
    escalated_note,
    escalation_of,
    handoff_gap,
    load_record,
    offer_escalation,
    signing_key,
    wants_handoff,
)
from workers.render.buttons import EscalatedNote
from workers.render.cards import MAX_HEADER_TEXT, RenderedCard, render_template
from workers.render.mrkdwn import code, code_block, escape, plain
from workers.render.slots import EscalationSlot
from workers.surfaces.base import Failed

from .presses import NOT_HERE, offered_here

if TYPE_CHECKING:
    from workers.services import Services

log = logging.getLogger(__name__)

# How long an "in progress" claim holds when its worker dies: past the job timeout, so a
# slow but live escalation is never doubled, yet far short of the escalation TTL.
PENDING_CLAIM_MARGIN_SECONDS = 60
_ID = RECORD_ID
_SLACK_USER = SLACK_USER
_EMAIL = re.compile(r"^[^@\s<>|&`*]+@[^@\s<>|&`*]+\.[^@\s<>|&`*]+$")

EVIDENCE_BUDGET = 1800
TEXT_BUDGET = 2000


# ------------------------------------------------------------ press → job


@dataclass
class EscalationOutcome:
    """What a press did; the job's result, for operators and tests."""

    status: Literal["escalated", "already", "refused", "failed"]
    reason: str = ""
    target: str | None = None
    handoff_ts: str | None = None


def run_escalation(request: EscalateRequest, services: Services, *, now: datetime) -> EscalationOutcome:
    """Check, claim, post the handoff, note the thread, update the card, audit."""
    conn = services.redis
    record = load_record(conn, request.record_id)
    if record is None:
        return _refuse(services, request, "expired",
                       "⌛ This card's diagnosis has expired, so taubot will not escalate from it. "
                       "Run `/tau status` again for a fresh card.")
    if not offered_here(channel=record.channel, card_ts=record.card_ts, thread_ts=record.thread_ts,
                        press_channel=request.channel, press_ts=request.message_ts,
                        press_thread=request.thread_ts):
        return _refuse(services, request, "elsewhere", NOT_HERE.format(verb="escalated"))
    resolution = services.registry.resolve(workspace=record.workspace)
    if not isinstance(resolution, Resolved):
        return _refuse(services, request, "workspace",
                       f"⛔ Workspace {code(record.workspace, 80)} is no longer configured: "
                       f"{escape(resolution.message, 500)}")
    descriptor = resolution.descriptor

    allowed = services.run(_may_read(services, descriptor.cluster_target(), request.identity, record.access,
                                    services.settings.kube_request_timeout_seconds))
    if allowed is not True:
        why = (f"Kubernetes says {code(request.identity.user, 200)} may not "
               f"{code(record.access.describe(), 300)}" if allowed is False
               else f"taubot could not check your access: {escape(allowed, 300)}")
        return _refuse(services, request, "forbidden",
                       f"⛔ {why}, so taubot will not escalate {code(record.run, 120)} for you. "
                       "Nothing was posted.")

    route: OwnerRoute | None = None
    submitter: str | None = None
    if record.owner == "researcher":
        found = _find_submitter(services, record)
        if isinstance(found, Refusal):
            return _refuse(services, request, "submitter", found.text)
        submitter = found
    else:
        route = descriptor.spec.owners.get(record.owner) or services.settings.default_owners.get(record.owner)
        if route is None:
            return _refuse(services, request, "no-route",
                           f"⛔ No escalation channel is configured for *{record.owner}* (workspace "
                           f"descriptor `spec.owners` or taubot's default owners). Nothing was posted; "
                           "ask your TauGrid platform operator to add one.")

    key = record.claim_key()
    pending = Claim(state="pending", by=request.user, at=now, owner=record.owner)
    pending_ttl = services.settings.job_timeout_seconds + PENDING_CLAIM_MARGIN_SECONDS
    if not conn.set(key, pending.model_dump_json(), nx=True, ex=pending_ttl):
        return _already(services, request, record, key)

    card_ts = record.card_ts or request.message_ts
    thread_link = services.surface.permalink(record.channel, card_ts or record.thread_ts)
    if submitter is not None:
        dm = services.surface.open_dm(submitter)
        if isinstance(dm, Failed):
            conn.delete(key)
            return _handoff_failed(services, request, record, None, dm)
        target = dm
    else:
        assert route is not None
        target = route.channel
    handoff = render_handoff(record, clicker=request.user, route=route, submitter=submitter,
                             thread_link=thread_link)
    posted = services.surface.post(target, handoff.text, handoff.blocks)
    if isinstance(posted, Failed):
        conn.delete(key)
        return _handoff_failed(services, request, record, route, posted)
    handoff_ts = posted.ts
    target = posted.channel or target

    link = services.surface.permalink(target, handoff_ts)
    done = Claim(state="done", by=request.user, at=now, owner=record.owner, target=target, link=link)
    conn.set(key, done.model_dump_json(), ex=services.settings.escalation_ttl_seconds)
    write_audit(services.settings.audit_log, record, request, target=target, handoff_ts=handoff_ts, now=now)
    _note_thread(services, record, request.user, target=target, submitter=submitter, link=link)
    _update_card(services, record, request, escalated_note(done))
    return EscalationOutcome("escalated", target=target, handoff_ts=handoff_ts)


# ---------------------------------------------------------------- checks


async def _may_read(services: Services, target: Any, identity: Identity, access: AccessCheck,
                    timeout: float) -> bool | str:
    """True/False from the clicker's SelfSubjectAccessReview, or why it could not be asked."""
    answer = await review(services.kube, target, identity, access.verb, access.resource, access.group,
                          namespace=access.namespace, name=access.name, timeout=timeout)
    if isinstance(answer, ReadError):
        return answer.describe()
    return answer


@dataclass(frozen=True)
class Refusal:
    text: str


def _find_submitter(services: Services, record: StoredDiagnosis) -> str | Refusal:
    """The submitter's Slack user id, from the run's annotation through users.lookupByEmail.

    The annotation is cluster text: it is only ever used as an email to look
    up, and shown escaped.
    """
    run = code(record.run, 120)
    email = record.submitted_by
    if not email:
        return Refusal(f"🤷 taubot does not know who submitted {run}: the run has no "
                       f"`{SUBMITTED_BY_ANNOTATION}` annotation. Nobody was notified.")
    if len(email) > 254 or not _EMAIL.match(email):
        return Refusal(f"🤷 taubot does not know who submitted {run}: its `{SUBMITTED_BY_ANNOTATION}` "
                       f"annotation is {code(email, 120)}, not an email. Nobody was notified.")
    user = services.surface.user_by_email(email)
    if isinstance(user, Failed):
        if user.kind == "not_found":
            return Refusal(f"🤷 {run} was submitted by {code(email, 120)}, but no Slack user has that "
                           "email. Nobody was notified.")
        raise RuntimeError(f"users.lookupByEmail failed: {user.error or user.kind}")
    user_id = str(user.get("id") or "")
    if not _SLACK_USER.match(user_id) or user.get("deleted") or user.get("is_bot"):
        return Refusal(f"🤷 {run} was submitted by {code(email, 120)}, whose Slack account cannot be "
                       "messaged. Nobody was notified.")
    return user_id


# ---------------------------------------------------------------- render


class HandoffContext(BaseModel):
    """What `handoff.json.j2` shows; every string mrkdwn-safe and within its limit."""

    model_config = ConfigDict(frozen=True)

    header: str
    intro: str
    fields: list[str]
    evidence: str = ""
    next_action: str
    footer: str
    fallback: str


class _Markup:
    """Our own Slack markup (mentions, dates, links), kept out of validation by placeholders.

    The validator refuses any raw ``<`` in a card, which is what keeps cluster
    text from mentioning anyone. Our markup is added as random tokens that
    cluster text cannot contain (it cannot guess them) and is swapped in after
    the blocks passed validation.
    """

    def __init__(self) -> None:
        self.nonce = secrets.token_hex(8)
        self.tokens: dict[str, str] = {}

    def add(self, markup: str) -> str:
        token = f"⟦{self.nonce}:{len(self.tokens)}⟧"
        self.tokens[token] = markup
        return token

    def apply(self, node: Any) -> Any:
        if isinstance(node, str):
            for token, markup in self.tokens.items():
                node = node.replace(token, markup)
            return node
        if isinstance(node, list):
            return [self.apply(item) for item in node]
        if isinstance(node, dict):
            return {key: self.apply(value) for key, value in node.items()}
        return node


def _link(markup: _Markup, url: str | None, label: str) -> str:
    return markup.add(f"<{url}|{label}>") if url else ""


def _date(markup: _Markup, when: datetime) -> str:
    """Shown in each reader's own time zone by Slack; the fallback is UTC."""
    fallback = when.astimezone(UTC).strftime("%H:%M UTC")
    return markup.add(f"<!date^{int(when.timestamp())}^{{time}}|{fallback}>")


def render_handoff(record: StoredDiagnosis, *, clicker: str, route: OwnerRoute | None,
                   submitter: str | None, thread_link: str | None) -> RenderedCard:
    """The handoff message: for an owner channel, or (``submitter``) the submitter's DM."""
    markup = _Markup()
    run = code(record.run, 120)
    where = escape(record.first_incomplete or "all phases done", 80)
    layer = f"layer {record.layer}" + (f" — {escape(record.layer_title, 200)}" if record.layer_title else "")
    by = markup.add(f"<@{clicker}>")
    if submitter is not None:
        intro = (f"👋 {markup.add(f'<@{submitter}>')} your run {run} needs you: it is stuck at "
                 f"*{where}* ({layer}). {by} asked taubot to let you know.")
    else:
        mention = markup.add(f"<!subteam^{route.usergroup}>") + " " if route and route.usergroup else ""
        intro = (f"{mention}📣 Escalation for *{record.owner}*: {run} is stuck at *{where}* ({layer}). "
                 f"{by} escalated it from taubot.")
    fields = [
        f"*Run*\n{run}",
        f"*Workspace*\n{code(record.workspace, 120)}",
        f"*Namespace*\n{code(record.namespace, 120) if record.namespace else '—'}",
        f"*Kind*\n{escape(record.kind or '—', 40)}",
        f"*Layer*\n{record.layer}",
        f"*First incomplete*\n{where}",
        f"*Owner*\n{escape(record.owner, 40)}",
        f"*Transient*\n{'—' if record.transient is None else ('yes' if record.transient else 'no')}",
    ]
    evidence = ""
    if record.evidence:
        evidence = "*Evidence*\n" + code_block("\n".join(record.evidence), EVIDENCE_BUDGET)
    thread = _link(markup, thread_link, "the diagnosis thread")
    footer = f"Escalated by {by} · " + (f"details in {thread}" if thread else "no link to the thread")
    fallback = (f"Escalation for {record.owner}: {record.run} stuck at "
                f"{record.first_incomplete or 'all phases done'} (layer {record.layer})")
    context = HandoffContext(
        header=plain(f"📣 {record.run} · layer {record.layer} · {record.owner}", MAX_HEADER_TEXT),
        intro=intro,
        fields=fields,
        evidence=evidence,
        next_action=f"*Next action*\n{escape(record.next_action, TEXT_BUDGET)}",
        footer=footer,
        fallback=escape(fallback, 500),
    )
    blocks = render_template("handoff.json.j2", context)
    return RenderedCard(text=context.fallback, blocks=markup.apply(blocks))


# ---------------------------------------------------------- after posting


def _note_thread(services: Services, record: StoredDiagnosis, clicker: str, *, target: str,
                 submitter: str | None, link: str | None) -> None:
    """One line in the run's thread, so whoever follows it knows the owner has been told."""
    handoff = f" — <{link}|handoff>" if link else ""
    if submitter is not None:
        text = f"📣 <@{clicker}> notified the submitter, <@{submitter}>{handoff}."
    else:
        text = f"📣 <@{clicker}> escalated this to *{record.owner}* in <#{target}>{handoff}."
    sent = services.surface.post(record.channel, text, thread_ts=record.thread_ts)
    if isinstance(sent, Failed):
        log.warning("escalation: thread note failed (%s); the handoff was posted", sent.error)


def _update_card(services: Services, record: StoredDiagnosis, request: EscalateRequest,
                 note: EscalatedNote | None) -> None:
    """Show ``note`` on the card instead of the button, re-rendered from the card's stored
    context (never from what Slack echoed in the press). A watched card is edited the same
    way: its next tick derives the same note from the claim, so it neither re-sends nor
    undoes it. Best effort: the handoff is out, and a card that cannot be edited (deleted,
    expired from the store) must not turn a done escalation into an error."""
    card_ts = record.card_ts or request.message_ts
    if not card_ts or note is None:
        return
    edit = services.cards.update_if_changed(
        record.channel, card_ts,
        lambda context: context.with_slot(EscalationSlot(note=note)),
        max_wait=15.0)
    if not edit.shown:
        log.warning("escalation: card %s not updated (%s); the handoff was posted", card_ts, edit.outcome)


def write_audit(path: Path | None, record: StoredDiagnosis, request: EscalateRequest, *, target: str,
                handoff_ts: str, now: datetime) -> None:
    """Append one JSON line: who, as whom, run, layer, owner, when, where it went.

    One ``write`` on an ``O_APPEND`` descriptor, so lines from several
    workers never interleave; stdout when no file is configured (the
    container's log collector keeps it).
    """
    line = json.dumps({
        "event": "escalation",
        "time": now.astimezone(UTC).isoformat(),
        "slack_user": request.user,
        "as": request.identity.model_dump(mode="json"),
        "workspace": record.workspace,
        "namespace": record.namespace,
        "run": record.run,
        "kind": record.kind,
        "layer": record.layer,
        "first_incomplete": record.first_incomplete,
        "owner": record.owner,
        "target": target,
        "handoff_ts": handoff_ts,
    }, ensure_ascii=False) + "\n"
    if path is None:
        sys.stdout.write(line)
        sys.stdout.flush()
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError as exc:  # the escalation happened; losing the line must be loud, not fatal
        log.error("escalation: audit log %s not writable (%s): %s", path, exc, line.strip())


# ---------------------------------------------------------------- replies


def _reply(services: Services, request: EscalateRequest, text: str) -> None:
    """An ephemeral answer to the clicker: through the press's response_url, else postEphemeral."""
    if request.response_url:
        services.surface.respond(request.response_url, text)
    elif request.channel:
        services.surface.ephemeral(request.channel, request.user, text)


def _refuse(services: Services, request: EscalateRequest, reason: str, text: str) -> EscalationOutcome:
    log.info("escalation refused for %s (%s)", request.user, reason)
    _reply(services, request, text)
    return EscalationOutcome("refused", reason=reason)


def _already(services: Services, request: EscalateRequest, record: StoredDiagnosis,
             key: str) -> EscalationOutcome:
    raw = services.redis.get(key)
    claim = Claim.model_validate_json(raw) if raw is not None else None
    run = code(record.run, 120)
    if claim is None:  # released between our SET and GET: a failed attempt
        text = f"⏳ {run} was being escalated a moment ago and that failed; press the button again."
    elif claim.state == "pending":
        text = f"⏳ <@{claim.by}> is escalating {run} to *{record.owner}* right now."
    else:
        what = ("the submitter was notified" if record.owner == "researcher"
                else f"escalated to *{record.owner}*")
        link = f": <{claim.link}|the handoff>" if claim.link else "."
        fallback = claim.at.astimezone(UTC).strftime("%H:%M UTC")
        at = f"<!date^{int(claim.at.timestamp())}^{{date_short}} {{time}}|{fallback}>"
        text = (f"ℹ️ Already done for {run} (layer {record.layer}): {what} by <@{claim.by}> at {at}{link}")
    _reply(services, request, text)
    return EscalationOutcome("already", target=claim.target if claim else None)


def _handoff_failed(services: Services, request: EscalateRequest, record: StoredDiagnosis,
                    route: OwnerRoute | None, failed: Failed) -> EscalationOutcome:
    if failed.kind == "cannot_post" and route is not None:
        text = (f"⚠️ taubot cannot post in <#{route.channel}> ({escape(failed.error, 80)}): invite it "
                "there (`/invite @taubot`) or fix the owner's channel. Nothing was escalated.")
    else:
        log.warning("escalation of %s failed: %s", record.run, failed.error or failed.kind)
        text = (f"⚠️ taubot could not post the handoff ({escape(failed.error or failed.kind, 200)}). "
                "Nothing was escalated; press the button again in a minute.")
    _reply(services, request, text)
    return EscalationOutcome("failed", reason=failed.error or failed.kind)


__all__ = [
    "ESCALATE_ACTION",
    "SUBMITTED_BY_ANNOTATION",
    "AccessCheck",
    "Claim",
    "EscalationOutcome",
    "Offer",
    "StoredDiagnosis",
    "button_label",
    "claim_of",
    "escalated_note",
    "handoff_gap",
    "escalation_of",
    "load_record",
    "offer_escalation",
    "render_handoff",
    "run_escalation",
    "signing_key",
    "wants_handoff",
    "write_audit",
]
