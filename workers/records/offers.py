"""What an Escalate button stands for: the stored diagnosis, its claim, and the offer made at card time.

Every card that can be escalated — a `/tau status` answer, a `--watch` tick,
a stall monitor's auto-post — stores its diagnosis here under a random id and
carries only that id, signed (see `workers/flows/escalation.py` for why). The
press side (the access review, the handoff, the audit) is a flow; the offer
is not, and lives here so that the monitor, which posts cards but handles no
presses, needs nothing from `workers.flows` (issue 23: no package imports a
flow but the job layer).
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

import redis
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from workers.config.settings import Settings
from workers.config.workspaces import WorkspaceConnection
from workers.contracts.ids import ESCALATE_ACTION
from workers.contracts.signing import sign_id
from workers.diagnosis.linkage import SUBMITTED_BY_ANNOTATION
from workers.diagnosis.models import Diagnosis, Owner
from workers.outside.text import Outside
from workers.records import keys
from workers.render.buttons import CardButton, EscalatedNote


class RunReport(Protocol):
    """What an offer reads of a status's answer (`workers.collect.report.RunReport` is one): the
    records room names the shape it needs instead of importing the collect layer."""

    @property
    def diagnosis(self) -> Diagnosis: ...
    @property
    def workspace(self) -> str | None: ...
    @property
    def descriptor(self) -> WorkspaceConnection | None: ...
    @property
    def submitter(self) -> str | None: ...


class Services(Protocol):
    """What an offer needs of the process (`workers.services.Services` is one)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def redis(self) -> redis.Redis: ...

log = logging.getLogger(__name__)

RECORD_PREFIX = keys.DIAGNOSIS
CLAIM_PREFIX = keys.ESCALATED


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
    evidence: list[Outside] = Field(default_factory=list)
    next_action: Outside
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
        return keys.escalated_key(hashlib.sha256(ident.encode()).hexdigest()[:40])


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
    conn.set(keys.diagnosis_key(record.id), record.model_dump_json(), ex=ttl)


def attach_card_ts(conn: redis.Redis, record_id: str, card_ts: str) -> None:
    """The card's ts is only known after posting it, and the button is in the card: so the
    record is stored first and told its card afterwards (same TTL)."""
    raw = conn.get(keys.diagnosis_key(record_id))
    if raw is None:
        return
    stored = StoredDiagnosis.model_validate_json(raw)
    # An auto-post is its own thread: its record learns the thread with the card.
    record = stored.model_copy(update={"card_ts": card_ts, "thread_ts": stored.thread_ts or card_ts})
    conn.set(keys.diagnosis_key(record_id), record.model_dump_json(), xx=True, keepttl=True)


def load_record(conn: redis.Redis, record_id: str) -> StoredDiagnosis | None:
    raw = conn.get(keys.diagnosis_key(record_id))
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
        if d.run.kind is None:  # no run: no submitter to notify, and no annotation to miss
            return None
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


__all__ = [
    "CLAIM_PREFIX",
    "RECORD_PREFIX",
    "AccessCheck",
    "Claim",
    "Offer",
    "StoredDiagnosis",
    "access_check_for",
    "attach_card_ts",
    "button_label",
    "claim_of",
    "escalated_note",
    "escalation_of",
    "handoff_gap",
    "load_record",
    "offer_escalation",
    "signing_key",
    "store_record",
    "submitter_of",
    "wants_handoff",
]
