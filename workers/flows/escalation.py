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

import asyncio
import hashlib
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

import redis
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workers.collect.access import review
from workers.collect.report import SUBMITTED_BY_ANNOTATION
from workers.contracts.identity import Identity
from workers.contracts.ids import ESCALATE_ACTION, RECORD_ID, SLACK_USER
from workers.contracts.requests import EscalateRequest
from workers.contracts.signing import sign_id
from workers.diagnosis.models import Diagnosis, Owner
from workers.kube.reader import ReadError
from workers.render.buttons import CardButton, EscalatedNote
from workers.render.cards import MAX_HEADER_TEXT, RenderedCard, render_template
from workers.render.mrkdwn import code, code_block, escape, plain
from workers.render.slots import EscalationSlot
from workers.settings import Settings
from workers.surfaces.base import Failed
from workers.workspaces import OwnerRoute, Resolved

from .presses import NOT_HERE, offered_here

if TYPE_CHECKING:
    from workers.collect.report import RunReport
    from workers.services import Services

log = logging.getLogger(__name__)

RECORD_PREFIX = "taubot:diagnosis:"
CLAIM_PREFIX = "taubot:escalated:"
# How long an "in progress" claim holds when its worker dies: past the job timeout, so a
# slow but live escalation is never doubled, yet far short of the escalation TTL.
PENDING_CLAIM_MARGIN_SECONDS = 60
_ID = RECORD_ID
_SLACK_USER = SLACK_USER
_EMAIL = re.compile(r"^[^@\s<>|&`*]+@[^@\s<>|&`*]+\.[^@\s<>|&`*]+$")

EVIDENCE_BUDGET = 1800
TEXT_BUDGET = 2000


# ------------------------------------------------------------------ records


class AccessCheck(BaseModel):
    """The SelfSubjectAccessReview a press must pass: "may you read what this is about?"."""

    model_config = ConfigDict(frozen=True)

    verb: Literal["get"] = "get"
    resource: str
    group: str
    namespace: str | None
    name: str

    def describe(self) -> str:
        """``get rayjobs.ray.io/x in team-vision``, for a refusal the user can forward."""
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.verb} {resource}/{self.name}{where}"


class StoredDiagnosis(BaseModel):
    """What an Escalate button stands for, as stored in Redis at card time.

    Cluster text (evidence, next action, phase names, the submitter
    annotation) lives here and is escaped only when rendered.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    run: str
    namespace: str | None
    kind: str | None
    workspace: str
    layer: int
    layer_title: str = ""
    first_incomplete: str | None
    evidence: list[str] = Field(default_factory=list)
    next_action: str
    owner: Owner
    transient: bool | None = None
    submitted_by: str | None = None
    access: AccessCheck
    channel: str
    thread_ts: str
    card_ts: str | None = None
    requested_by: str
    diagnosed_at: datetime

    def claim_key(self) -> str:
        """The once-per-(run, layer, owner) key; the run is named by workspace and namespace
        too, because two workspaces can each have a run called ``llama-ft-7b``."""
        ident = json.dumps([self.workspace, self.namespace, self.run, self.layer, self.owner])
        return CLAIM_PREFIX + hashlib.sha256(ident.encode()).hexdigest()[:40]


class Claim(BaseModel):
    """Who escalated (or is escalating) a run's layer to an owner, and where the handoff is."""

    model_config = ConfigDict(frozen=True)

    state: Literal["pending", "done"]
    by: str
    at: datetime
    owner: Owner
    target: str = ""
    link: str | None = None


def button_label(owner: str) -> str:
    """*Escalate: notify submitter* for the researcher (a DM), else *Escalate to <owner>* (a channel).
    Both say "Escalate": one verb for handing a problem on, whoever receives it."""
    return "Escalate: notify submitter" if owner == "researcher" else f"Escalate to {owner}"


def signing_key(settings: Settings) -> bytes | None:
    """The HMAC key (settings fall back to the Slack signing secret); None: no buttons."""
    return settings.button_key()


def store_record(conn: redis.Redis, record: StoredDiagnosis, ttl: int) -> None:
    conn.set(RECORD_PREFIX + record.id, record.model_dump_json(), ex=ttl)


def attach_card_ts(conn: redis.Redis, record_id: str, card_ts: str) -> None:
    """The card's ts is only known after posting it, and the button is in the card: so the
    record is stored first and told its card afterwards (same TTL)."""
    raw = conn.get(RECORD_PREFIX + record_id)
    if raw is None:
        return
    stored = StoredDiagnosis.model_validate_json(raw)
    # An auto-post is its own thread: its record learns the thread with the card.
    record = stored.model_copy(update={"card_ts": card_ts, "thread_ts": stored.thread_ts or card_ts})
    conn.set(RECORD_PREFIX + record_id, record.model_dump_json(), xx=True, keepttl=True)


def load_record(conn: redis.Redis, record_id: str) -> StoredDiagnosis | None:
    raw = conn.get(RECORD_PREFIX + record_id)
    if raw is None:
        return None
    try:
        return StoredDiagnosis.model_validate_json(raw)
    except ValidationError:
        log.warning("escalation: unreadable stored diagnosis %s (older version?)", record_id)
        return None


def claim_of(conn: redis.Redis, record: StoredDiagnosis) -> Claim | None:
    """The escalation (done or in progress) of a stored diagnosis's (run, layer, owner), if any."""
    raw = conn.get(record.claim_key())
    return Claim.model_validate_json(raw) if raw is not None else None


def escalation_of(conn: redis.Redis, record_id: str) -> Claim | None:
    """The escalation (done or in progress) of the diagnosis behind a button, if any.

    For a card re-rendered after a press (`--watch`): it must then show the
    escalation instead of offering the button again.
    """
    record = load_record(conn, record_id)
    return claim_of(conn, record) if record is not None else None


def escalated_note(claim: Claim) -> EscalatedNote | None:
    """What a card shows for a finished escalation; None while it is still in progress (the
    button stays: a press then answers privately who is escalating, and a failed attempt
    leaves the card as it was).

    The escalation job edits its card with this, and a `--watch` tick renders
    it from the same claim: one source, so both write the same note.
    """
    if claim.state != "done":
        return None
    return EscalatedNote(owner=claim.owner, by=claim.by, at=claim.at, submitter=claim.owner == "researcher")


# ------------------------------------------------------------- card time


def wants_handoff(d: Diagnosis) -> bool:
    """Whether there is anything to hand off.

    SPEC §4: a healthy or finished run is owned by `researcher` with
    ``transient`` null — nobody needs paging for it. Anything else with an
    open phase (stuck in a queue, failing, a failed RayJob) has an owner who
    can act, including the submitter of a crashed run.
    """
    if d.first_incomplete is None:
        return False
    return not (d.owner == "researcher" and d.transient is None)


def access_check_for(d: Diagnosis, descriptor_workspace: str) -> AccessCheck | None:
    """The review standing for "may read this run": `get` on the run's own resource.

    A layer-2 failure (TauWorkspace not Ready) has no run read yet; reading
    the TauWorkspace is then what the diagnosis rests on. Layer 1 and a run
    that was not found have nothing anyone could be checked against: no button.
    """
    if d.run.kind == "RayJob" and d.run.namespace:
        return AccessCheck(resource="rayjobs", group="ray.io", namespace=d.run.namespace, name=d.run.name)
    if d.run.kind == "Job" and d.run.namespace:
        return AccessCheck(resource="jobs", group="batch", namespace=d.run.namespace, name=d.run.name)
    if d.layer == 2:
        return AccessCheck(resource="tauworkspaces", group="taugrid.io", namespace=None,
                           name=descriptor_workspace)
    return None


def submitter_of(live: RunReport) -> str | None:
    """The run's ``taugrid.io/submitted-by`` annotation, as written (validated at press time)."""
    value = live.submitter
    return value.strip() if value and value.strip() else None


def handoff_gap(services: Services, live: RunReport) -> str | None:
    """Why pressing Escalate could not work, for the card to say instead of showing a dead button:
    no route configured for the owner, or (for the researcher) no submitter to notify."""
    d = live.diagnosis
    if not wants_handoff(d) or not live.workspace:
        return None
    if d.owner == "researcher":
        if submitter_of(live) is None:
            return (f"This is the researcher's to fix; the run carries no `{SUBMITTED_BY_ANNOTATION}` "
                    "annotation, so taubot cannot tell who submitted it.")
        return None
    routes = live.descriptor.spec.owners if live.descriptor is not None else {}
    if d.owner not in routes and d.owner not in services.settings.default_owners:
        return (f"The owner is *{d.owner}*, but no escalation channel is configured for it (descriptor "
                "`spec.owners` or taubot's default owners): tell them directly.")
    return None


@dataclass
class Offer:
    """An Escalate button, stored and signed; `attach` tells the record where its card went."""

    button: CardButton
    record_id: str
    conn: redis.Redis

    def attach(self, card_ts: str) -> None:
        try:
            attach_card_ts(self.conn, self.record_id, card_ts)
        except redis.RedisError as exc:  # the button still works: the press carries the card's ts
            log.warning("escalation: could not record card ts for %s: %s", self.record_id, exc)


def offer_escalation(services: Services, live: RunReport, *, channel: str, thread_ts: str | None,
                     requested_by: str, now: datetime) -> Offer | None:
    """Store the diagnosis for the card's button and return the button, or None.

    None when there is nothing to hand off, when the card is a private
    answer (no thread to link to, no card to update), when no signing key is
    configured, or when Redis cannot store it — a card without the button is
    better than no card.
    """
    d = live.diagnosis
    key = signing_key(services.settings)
    if thread_ts is None or key is None or not live.workspace or not wants_handoff(d):
        return None
    if live.descriptor is None:
        return None
    access = access_check_for(d, live.descriptor.spec.workspace)
    if access is None or handoff_gap(services, live) is not None:
        return None
    focus = next((p for p in [*d.phases, *d.checks] if p.name == d.first_incomplete), None)
    evidence = list(d.evidence) or (list(focus.evidence) if focus else [])
    record = StoredDiagnosis(
        id=secrets.token_urlsafe(18),
        run=d.run.name,
        namespace=d.run.namespace,
        kind=d.run.kind,
        workspace=live.workspace,
        layer=d.layer,
        layer_title=d.layer_info.title,
        first_incomplete=d.first_incomplete,
        evidence=evidence,
        next_action=d.next_action,
        owner=d.owner,
        transient=d.transient,
        submitted_by=submitter_of(live) if d.owner == "researcher" else None,
        access=access,
        channel=channel,
        thread_ts=thread_ts,
        requested_by=requested_by,
        diagnosed_at=now,
    )
    try:
        store_record(services.redis, record, services.settings.diagnosis_ttl_seconds)
    except redis.RedisError as exc:
        log.warning("escalation: could not store the diagnosis, card has no button: %s", exc)
        return None
    button = CardButton(action_id=ESCALATE_ACTION, text=button_label(d.owner), value=sign_id(key, record.id))
    return Offer(button=button, record_id=record.id, conn=services.redis)


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

    allowed = asyncio.run(_may_read(services, descriptor.cluster_target(), request.identity, record.access,
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
    outcome = services.cards.update_if_changed(
        record.channel, card_ts,
        lambda context: context.with_slot(EscalationSlot(note=note)),
        max_wait=15.0)
    if outcome not in ("updated", "unchanged"):
        log.warning("escalation: card %s not updated (%s); the handoff was posted", card_ts, outcome)


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
