"""The *Validate these nodes* button on a card whose answer is layer 6 (GPU/node health).

Offered only to a requester whose own RBAC allows creating pods in the
validation namespace (an access review as them, before the button exists):
`cluster validate nodes` runs privileged pods, and a button that can only be
refused is a dead end. The press is served as the presser, not the
requester: the job impersonates whoever pressed, so the cluster decides
again, and a channel member without that RBAC gets a refusal card and no pod.

The offer (workspace, the run's nodes, where the card is) is kept in Redis
under a random id; the button carries only that id, signed, so a press can
never name other nodes than the diagnosis found. A press counts only on that
card (`presses.py`), and an offer is single-use: the first press that may
create the pods claims it (SET NX), and a replay or a second press creates
none. A presser the cluster refuses does not spend it (their pods would be
refused anyway), so a channel member without the RBAC cannot use it up.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import datetime

import redis
from pydantic import BaseModel, ConfigDict

from workers.collect.access import review
from workers.collect.report import RunReport
from workers.config.workspaces import Resolved
from workers.contracts.ids import VALIDATE_NODES_ACTION
from workers.contracts.requests import ValidateNodesRequest
from workers.contracts.signing import sign_id
from workers.diagnosis.podfacts import is_terminal
from workers.kube.reader import KubeReader, ReadError
from workers.records import keys
from workers.render.buttons import CardButton
from workers.render.cards import build_workspace_card
from workers.render.mrkdwn import code, escape
from workers.services import Services
from workers.surfaces.base import Failed
from workers.validation.cluster import validate_nodes

from .presses import NOT_HERE, offered_here

log = logging.getLogger(__name__)

OFFER_PREFIX = keys.VALIDATE_OFFER
HOSTNAME_LABEL = "kubernetes.io/hostname"  # set by the kubelet on every node
MAX_NODES = 64  # as many as layer 6 reads; a selector beyond that is an operator's own command
EXPIRED = ("⌛ This *Validate these nodes* button has expired (taubot keeps a card's buttons for "
           "{days} days). Run `/tau status` again for a fresh card.")


class ValidationOffer(BaseModel):
    model_config = ConfigDict(frozen=True)

    workspace: str
    nodes: list[str]
    channel: str
    thread_ts: str
    offered_at: datetime
    card_ts: str | None = None  # known once the card is posted (`ValidationButton.attach`)


@dataclass
class ValidationButton:
    """The button of a stored offer; `attach` records the card it went out on."""

    button: CardButton
    offer_id: str
    conn: redis.Redis

    def attach(self, card_ts: str) -> None:
        key = keys.validate_offer_key(self.offer_id)
        try:
            raw = self.conn.get(key)
            if raw is not None:
                offer = ValidationOffer.model_validate_json(raw).model_copy(update={"card_ts": card_ts})
                self.conn.set(key, offer.model_dump_json(), xx=True, keepttl=True)
        except redis.RedisError as exc:  # the press is then checked against the card's thread
            log.warning("validate-nodes: could not record the card of offer %s: %s", self.offer_id, exc)


def run_nodes(live: RunReport) -> list[str]:
    """The distinct nodes the run's live pods are bound to, as layer 6 read them."""
    names = {(p.get("spec") or {}).get("nodeName") for p in live.linked.pods if not is_terminal(p)}
    return sorted(n for n in names if isinstance(n, str) and n)[:MAX_NODES]


def selector_for(nodes: list[str]) -> str:
    return f"{HOSTNAME_LABEL} in ({','.join(nodes)})"


def wants_validation(live: RunReport) -> bool:
    """A layer-6 answer about nodes the run's live pods are bound to: the only card with the button."""
    return live.diagnosis.layer == 6 and bool(live.workspace) and live.descriptor is not None \
        and bool(run_nodes(live))


async def may_create_validation_pods(reader: KubeReader, namespace: str) -> bool:
    """The requester's access review for the button (create pods in the validation namespace),
    through the status's own impersonated client; a review that failed is "no"."""
    return await reader.access_review("create", "pods", namespace=namespace) is True


def offer_node_validation(services: Services, live: RunReport, *, may_create: bool, channel: str,
                          thread_ts: str | None, now: datetime) -> ValidationButton | None:
    """The button for a layer-6 answer, or None (another layer, no thread, no signing key, no
    nodes, or the requester may not create the pods — ``may_create``, reviewed by the status —
    or Redis failed)."""
    key = services.settings.button_key()
    if not may_create or thread_ts is None or key is None or not wants_validation(live):
        return None
    nodes = run_nodes(live)
    offer_id = secrets.token_urlsafe(18)
    offer = ValidationOffer(workspace=live.workspace, nodes=nodes, channel=channel, thread_ts=thread_ts,
                            offered_at=now)
    try:
        services.redis.set(keys.validate_offer_key(offer_id), offer.model_dump_json(),
                           ex=services.settings.diagnosis_ttl_seconds)
    except redis.RedisError as exc:
        log.warning("validate-nodes offer not stored: %s", exc)
        return None
    label = "🩺 Validate this node" if len(nodes) == 1 else f"🩺 Validate these {len(nodes)} nodes"
    button = CardButton(action_id=VALIDATE_NODES_ACTION, text=label, value=sign_id(key, offer_id))
    return ValidationButton(button=button, offer_id=offer_id, conn=services.redis)


def run_validate_press(services: Services, request: ValidateNodesRequest) -> dict[str, object]:
    """Validate the offered nodes as the presser; the card goes in the diagnosis's thread."""
    raw = services.redis.get(keys.validate_offer_key(request.record_id))
    if raw is None:
        days = max(services.settings.diagnosis_ttl_seconds // 86400, 1)
        if request.response_url:
            services.surface.respond(request.response_url, EXPIRED.format(days=days), [])
        return {"ok": False, "expired": True}
    offer = ValidationOffer.model_validate_json(raw)
    if not offered_here(channel=offer.channel, card_ts=offer.card_ts, thread_ts=offer.thread_ts,
                        press_channel=request.channel, press_ts=request.message_ts,
                        press_thread=request.thread_ts):
        _tell(services, request, NOT_HERE.format(verb="validated"))
        return {"ok": False, "elsewhere": True}
    claimed = _claim(services, request, offer)
    if claimed is not None:
        _tell(services, request, claimed)
        return {"ok": False, "used": True}
    settings = services.settings
    selector = selector_for(offer.nodes)
    report = services.run(validate_nodes(
        services.registry, identity=request.identity, selector=selector,
        namespace=settings.validation_namespace, workspace=offer.workspace,
        timeout=settings.validation_timeout_seconds, image=settings.validation_image,
        command=settings.validation_command, request_timeout=settings.kube_request_timeout_seconds,
        kube=services.kube))
    if not report.pods_created:
        # Nothing ran (the namespace's Pod Security refused the pod, no node matched, a read
        # failed): the offer is not spent, so the button works once the cause is fixed.
        services.redis.delete(keys.validate_offer_used_key(request.record_id))
    card = build_workspace_card(report, command=f"/tau cluster validate nodes --selector {selector}")
    # Who pressed is the identity the pods ran as (a mention cannot pass the card's markup check).
    card = card.replace(reference=f"{card.reference} · pods created as {code(request.identity.user, 200)}")
    posted = services.cards.post(offer.channel, card, thread_ts=offer.thread_ts)
    if isinstance(posted, Failed) and request.response_url:
        services.surface.respond(request.response_url, posted_text(report.summary), [])
    return {"ok": report.ok, "card_ts": None if isinstance(posted, Failed) else posted.ts}


def _claim(services: Services, request: ValidateNodesRequest, offer: ValidationOffer) -> str | None:
    """Spend the offer for this press; None when claimed, else why not (one line to show).

    Not spent by a presser the cluster says may not create the pods: the pods would be
    refused, and the refusal card tells them so."""
    resolution = services.registry.resolve(workspace=offer.workspace)
    if isinstance(resolution, Resolved):
        settings = services.settings
        try:  # `review`, not `permits`: a review that failed is "unknown", and spends the offer
            allowed: bool | ReadError | None = services.run(review(
                services.kube, resolution.descriptor.cluster_target(), request.identity, "create", "pods",
                namespace=settings.validation_namespace, timeout=settings.kube_request_timeout_seconds))
        except Exception as exc:  # noqa: BLE001 - unknown: the offer is spent, as if allowed
            log.info("validate-nodes review failed for %s: %r", request.identity.user, exc)
            allowed = None
        if allowed is False:
            return None
    key = keys.validate_offer_used_key(request.record_id)
    if services.redis.set(key, request.user, nx=True, ex=services.settings.diagnosis_ttl_seconds):
        return None
    by = services.redis.get(key)
    who = f"<@{by.decode() if isinstance(by, bytes) else by}>" if by else "someone"
    return (f"⏹️ These nodes were already validated from this card (pressed by {who}); nothing was "
            "created again. Run `/tau status` again for a fresh card.")


def _tell(services: Services, request: ValidateNodesRequest, text: str) -> None:
    if request.response_url:
        services.surface.respond(request.response_url, text, [])
    elif request.channel:
        services.surface.ephemeral(request.channel, request.user, text)


def posted_text(summary: str) -> str:
    return f"Node validation: {escape(summary, 1000)} (the card could not be posted in the thread)."


__all__ = ["OFFER_PREFIX", "ValidationButton", "ValidationOffer", "offer_node_validation", "run_nodes",
           "run_validate_press", "selector_for"]
