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
import hmac
import json
import logging
import os
import re
import secrets
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

import redis
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rq import Callback, Queue
from rq.job import Job
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.webhook import WebhookClient

from workers.diagnosis.models import Diagnosis, Owner
from workers.kube.client import Identity
from workers.render.buttons import ESCALATED_BLOCK_ID, CardButton, EscalatedNote
from workers.render.cards import MAX_HEADER_TEXT, RenderedCard, render_template
from workers.render.mrkdwn import code, code_block, escape, plain
from workers.settings import Settings
from workers.workspaces import OwnerRoute, Resolved

if TYPE_CHECKING:
    from workers.diagnosis.live import LiveResult
    from workers.jobs import Services

log = logging.getLogger(__name__)

ESCALATE_ACTION = "taubot_escalate"
SUBMITTED_BY_ANNOTATION = "taugrid.io/submitted-by"
RECORD_PREFIX = "taubot:diagnosis:"
CLAIM_PREFIX = "taubot:escalated:"
# How long an "in progress" claim holds when its worker dies: past the job timeout, so a
# slow but live escalation is never doubled, yet far short of the escalation TTL.
PENDING_CLAIM_MARGIN_SECONDS = 60
SIGNATURE_CONTEXT = b"taubot-escalate-v1:"
SIGNATURE_HEX = 32  # 128 bits of HMAC-SHA256: unforgeable, and short in a button value

_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
_SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,}$")
_EMAIL = re.compile(r"^[^@\s<>|&`*]+@[^@\s<>|&`*]+\.[^@\s<>|&`*]+$")
_PERMALINK = re.compile(r"^https://[^\s<>|]+$")

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
    """*Notify submitter* for the researcher (a DM), else *Escalate to <owner>* (a channel)."""
    return "Notify submitter" if owner == "researcher" else f"Escalate to {owner}"


def signing_key(settings: Settings) -> bytes | None:
    """The HMAC key (settings fall back to the Slack signing secret); None: no buttons."""
    key = settings.button_signing_key
    return key.get_secret_value().encode() if key is not None else None


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
    if not _ID.match(record_id):
        return None
    return record_id if hmac.compare_digest(mac, _mac(key, record_id)) else None


def store_record(conn: redis.Redis, record: StoredDiagnosis, ttl: int) -> None:
    conn.set(RECORD_PREFIX + record.id, record.model_dump_json(), ex=ttl)


def attach_card_ts(conn: redis.Redis, record_id: str, card_ts: str) -> None:
    """The card's ts is only known after posting it, and the button is in the card: so the
    record is stored first and told its card afterwards (same TTL)."""
    raw = conn.get(RECORD_PREFIX + record_id)
    if raw is None:
        return
    record = StoredDiagnosis.model_validate_json(raw).model_copy(update={"card_ts": card_ts})
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


def submitter_of(live: LiveResult) -> str | None:
    """The run's ``taugrid.io/submitted-by`` annotation, as written (validated at press time)."""
    from workers.diagnosis.linkage import find_run

    d = live.diagnosis
    run = find_run(live.objects, d.run.name, d.run.namespace).run
    if run is None:
        return None
    value = ((run.get("metadata") or {}).get("annotations") or {}).get(SUBMITTED_BY_ANNOTATION)
    return str(value).strip() if isinstance(value, str) and value.strip() else None


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


def offer_escalation(services: Services, live: LiveResult, *, channel: str, thread_ts: str | None,
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
    resolution = services.registry.resolve(workspace=live.workspace)
    if not isinstance(resolution, Resolved):
        return None
    access = access_check_for(d, resolution.descriptor.spec.workspace)
    if access is None:
        return None
    focus = next((p for p in d.phases if p.name == d.first_incomplete), None)
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


class EscalateRequest(BaseModel):
    """One press, as the Slack front end hands it to the worker (no cluster data in it)."""

    model_config = ConfigDict(frozen=True)

    record_id: str = Field(pattern=_ID.pattern)
    user: str = Field(pattern=_SLACK_USER.pattern)
    identity: Identity
    response_url: str | None = None
    channel: str | None = None
    message_ts: str | None = None
    message_text: str = ""
    message_blocks: list[dict[str, Any]] = Field(default_factory=list)
    pressed_at: datetime


def enqueue_escalation(queue: Queue, request: EscalateRequest, *, job_timeout: int) -> Job:
    """Queue a press. No retries: a retry after a half-done escalation could post twice, and
    the claim already makes "press again" safe."""
    return queue.enqueue(
        escalate_job,
        request.model_dump(mode="json"),
        job_id=f"tau-escalate-{uuid.uuid4().hex}",
        job_timeout=job_timeout,
        on_failure=Callback(on_escalation_failure),
        result_ttl=3600,
        failure_ttl=7 * 24 * 3600,
        meta={"response_url": request.response_url, "user": request.user},
        description=f"escalate {request.record_id}",
    )


@dataclass
class EscalationOutcome:
    """What a press did; the job's result, for operators and tests."""

    status: Literal["escalated", "already", "refused", "failed"]
    reason: str = ""
    target: str | None = None
    handoff_ts: str | None = None


def escalate_job(request: dict[str, Any]) -> dict[str, Any]:
    """RQ entry point of an Escalate press."""
    from workers.jobs import Services
    from workers.settings import load_settings

    services = Services.from_settings(load_settings())
    outcome = run_escalation(EscalateRequest.model_validate(request), services, now=datetime.now(UTC))
    return outcome.__dict__


def on_escalation_failure(job: Job, connection: redis.Redis, exc_type: type[BaseException] | None,
                          exc_value: BaseException | None, traceback: TracebackType | None) -> None:
    """rq failure callback (job timeout, import error): the clicker must not be left guessing.
    Never raises — rq would record the callback's error instead of the job's."""
    try:
        url = job.get_meta(refresh=True).get("response_url")
        if url:
            _reply(None, None, None, str(url),
                   "⚠️ taubot could not finish the escalation. Nothing may have been posted; "
                   "press the button again in a minute.")
    except Exception:  # noqa: BLE001 - see docstring
        log.exception("escalation job %s: failure callback could not tell the user", job.id)


def run_escalation(request: EscalateRequest, services: Services, *, now: datetime) -> EscalationOutcome:
    """Check, claim, post the handoff, note the thread, update the card, audit."""
    conn = services.redis
    record = load_record(conn, request.record_id)
    if record is None:
        return _refuse(services, request, "expired",
                       "⌛ This card's diagnosis has expired, so taubot will not escalate from it. "
                       "Run `/tau status` again for a fresh card.")
    resolution = services.registry.resolve(workspace=record.workspace)
    if not isinstance(resolution, Resolved):
        return _refuse(services, request, "workspace",
                       f"⛔ Workspace {code(record.workspace, 80)} is no longer configured: "
                       f"{escape(resolution.message, 500)}")
    descriptor = resolution.descriptor

    allowed = asyncio.run(_may_read(descriptor.cluster_target(), request.identity, record.access,
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
        found = _find_submitter(services.slack, record)
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

    try:
        card_ts = record.card_ts or request.message_ts
        thread_link = _permalink(services.slack, record.channel, card_ts or record.thread_ts)
        if submitter is not None:
            target = _dm_channel(services.slack, submitter)
        else:
            assert route is not None
            target = route.channel
        handoff = render_handoff(record, clicker=request.user, route=route, submitter=submitter,
                                 thread_link=thread_link)
        posted = services.slack.chat_postMessage(channel=target, text=handoff.text, blocks=handoff.blocks,
                                                 unfurl_links=False, unfurl_media=False)
        handoff_ts = str(posted["ts"])
        target = str(posted.get("channel") or target)
    except Exception as exc:
        conn.delete(key)
        return _handoff_failed(services, request, record, route, exc)

    link = _permalink(services.slack, target, handoff_ts)
    done = Claim(state="done", by=request.user, at=now, owner=record.owner, target=target, link=link)
    conn.set(key, done.model_dump_json(), ex=services.settings.escalation_ttl_seconds)
    write_audit(services.settings.audit_log, record, request, target=target, handoff_ts=handoff_ts, now=now)
    _note_thread(services.slack, record, request.user, target=target, submitter=submitter, link=link)
    _update_card(services, record, request, escalated_note(done))
    return EscalationOutcome("escalated", target=target, handoff_ts=handoff_ts)


# ---------------------------------------------------------------- checks


async def _may_read(target: Any, identity: Identity, access: AccessCheck, timeout: float) -> bool | str:
    """True/False from the clicker's SelfSubjectAccessReview, or why it could not be asked."""
    from workers.kube.client import make_user_client
    from workers.kube.reader import KubeReader, ReadError

    api = await make_user_client(target, identity)
    async with api:
        answer = await KubeReader(api, timeout).access_review(
            access.verb, access.resource, access.group, namespace=access.namespace, name=access.name
        )
    if isinstance(answer, ReadError):
        return answer.describe()
    return answer


@dataclass(frozen=True)
class Refusal:
    text: str


def _find_submitter(slack: WebClient, record: StoredDiagnosis) -> str | Refusal:
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
    try:
        user = slack.users_lookupByEmail(email=email)["user"]
    except SlackApiError as exc:
        error = exc.response.get("error") if exc.response is not None else None
        if error == "users_not_found":
            return Refusal(f"🤷 {run} was submitted by {code(email, 120)}, but no Slack user has that "
                           "email. Nobody was notified.")
        raise
    user_id = str(user.get("id") or "")
    if not _SLACK_USER.match(user_id) or user.get("deleted") or user.get("is_bot"):
        return Refusal(f"🤷 {run} was submitted by {code(email, 120)}, whose Slack account cannot be "
                       "messaged. Nobody was notified.")
    return user_id


def _dm_channel(slack: WebClient, user_id: str) -> str:
    return str(slack.conversations_open(users=user_id)["channel"]["id"])


def _permalink(slack: WebClient, channel: str, ts: str | None) -> str | None:
    """A message's permalink, or None; used inside ``<…|…>`` only when it looks like one."""
    if not ts:
        return None
    try:
        link = str(slack.chat_getPermalink(channel=channel, message_ts=ts)["permalink"])
    except SlackApiError as exc:
        log.info("escalation: no permalink for %s/%s: %s", channel, ts, exc)
        return None
    return link if _PERMALINK.match(link) else None


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


def _note_thread(slack: WebClient, record: StoredDiagnosis, clicker: str, *, target: str,
                 submitter: str | None, link: str | None) -> None:
    """One line in the run's thread, so whoever follows it knows the owner has been told."""
    handoff = f" — <{link}|handoff>" if link else ""
    if submitter is not None:
        text = f"📣 <@{clicker}> notified the submitter, <@{submitter}>{handoff}."
    else:
        text = f"📣 <@{clicker}> escalated this to *{record.owner}* in <#{target}>{handoff}."
    try:
        slack.chat_postMessage(channel=record.channel, thread_ts=record.thread_ts, text=text,
                               unfurl_links=False, unfurl_media=False)
    except SlackApiError as exc:
        log.warning("escalation: thread note failed (%s); the handoff was posted", exc)


def card_after_escalation(blocks: list[dict[str, Any]], note: dict[str, Any]) -> list[dict[str, Any]]:
    """The card's blocks without the Escalate button (other buttons stay), plus ``note``.

    Other elements of the actions block (e.g. *Stop watching*) are kept, and
    the block goes away only when the Escalate button was its last element.
    An earlier note is replaced, not repeated.
    """
    out: list[dict[str, Any]] = []
    for block in blocks:
        if block.get("block_id") == ESCALATED_BLOCK_ID:
            continue
        if block.get("type") == "actions":
            elements = [e for e in block.get("elements") or [] if e.get("action_id") != ESCALATE_ACTION]
            if not elements:
                continue
            block = {**block, "elements": elements}
        out.append(block)
    return [*out, note] if len(out) < 50 else out


def _update_card(services: Services, record: StoredDiagnosis, request: EscalateRequest,
                 note: EscalatedNote | None) -> None:
    """Show ``note`` on the card instead of the button.

    A card kept up to date by a `--watch` is edited by the watch, from its
    own last render (`workers.watch.show_escalation`), so that its stored
    hash matches the card and its ticks neither re-send nor undo the note.
    Any other card is edited in place with what Slack echoed of it in the
    press. Best effort: the handoff is already out, and a card that could
    not be edited (deleted, too old) must not turn a done escalation into
    an error.
    """
    from workers.watch import show_escalation  # the watch imports this module

    card_ts = record.card_ts or request.message_ts
    if not card_ts or note is None:
        return
    if show_escalation(services, record, card_ts, note):
        return
    if not request.message_blocks:
        return
    blocks = card_after_escalation(request.message_blocks, note.block())
    try:
        services.slack.chat_update(channel=record.channel, ts=card_ts, blocks=blocks,
                                   text=request.message_text or "taubot phase card")
    except SlackApiError as exc:
        log.warning("escalation: card update failed (%s); the handoff was posted", exc)


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


def _reply(slack: WebClient | None, channel: str | None, user: str | None, response_url: str | None,
           text: str) -> None:
    """An ephemeral answer to the clicker: through the press's response_url, else postEphemeral."""
    try:
        if response_url:
            WebhookClient(response_url, timeout=10).send(text=text, response_type="ephemeral",
                                                         replace_original=False)
        elif slack is not None and channel and user:
            slack.chat_postEphemeral(channel=channel, user=user, text=text)
    except Exception:  # noqa: BLE001 - a lost reply must not fail the escalation itself
        log.exception("escalation: could not answer %s", user)


def _refuse(services: Services, request: EscalateRequest, reason: str, text: str) -> EscalationOutcome:
    log.info("escalation refused for %s (%s)", request.user, reason)
    _reply(services.slack, request.channel, request.user, request.response_url, text)
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
    _reply(services.slack, request.channel, request.user, request.response_url, text)
    return EscalationOutcome("already", target=claim.target if claim else None)


def _handoff_failed(services: Services, request: EscalateRequest, record: StoredDiagnosis,
                    route: OwnerRoute | None, exc: Exception) -> EscalationOutcome:
    error = exc.response.get("error") if isinstance(exc, SlackApiError) and exc.response is not None else None
    if error in ("not_in_channel", "channel_not_found", "is_archived") and route is not None:
        text = (f"⚠️ taubot cannot post in <#{route.channel}> ({error}): invite it there "
                "(`/invite @taubot`) or fix the owner's channel. Nothing was escalated.")
    else:
        log.exception("escalation of %s failed", record.run, exc_info=exc)
        text = (f"⚠️ taubot could not post the handoff ({escape(str(error or type(exc).__name__), 200)}). "
                "Nothing was escalated; press the button again in a minute.")
    _reply(services.slack, request.channel, request.user, request.response_url, text)
    return EscalationOutcome("failed", reason=str(error or type(exc).__name__))


__all__ = [
    "ESCALATE_ACTION",
    "SUBMITTED_BY_ANNOTATION",
    "AccessCheck",
    "Claim",
    "EscalateRequest",
    "EscalationOutcome",
    "Offer",
    "StoredDiagnosis",
    "button_label",
    "card_after_escalation",
    "claim_of",
    "enqueue_escalation",
    "escalate_job",
    "escalated_note",
    "escalation_of",
    "load_record",
    "offer_escalation",
    "render_handoff",
    "run_escalation",
    "sign_id",
    "signing_key",
    "verify_value",
    "wants_handoff",
    "write_audit",
]
