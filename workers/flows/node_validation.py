"""The *Validate these nodes* button on a card whose answer is layer 6 (GPU/node health).

Offered only to a requester whose own RBAC allows creating pods in the
validation namespace (an access review as them, before the button exists):
`cluster validate nodes` runs privileged pods, and a button that can only be
refused is a dead end. The press is served as the presser, not the
requester: the job impersonates whoever pressed, so the cluster decides
again, and a channel member without that RBAC gets a refusal card and no pod.

The offer (workspace, the run's nodes, where the card is) is kept in Redis
under a random id; the button carries only that id, signed, so a press can
never name other nodes than the diagnosis found.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from datetime import datetime

import redis
from pydantic import BaseModel, ConfigDict

from workers.cluster_validate import validate_nodes
from workers.contracts.identity import Identity
from workers.contracts.ids import VALIDATE_NODES_ACTION
from workers.contracts.requests import ValidateNodesRequest
from workers.contracts.signing import sign_id
from workers.diagnosis.live import LiveResult
from workers.diagnosis.podfacts import is_terminal
from workers.kube.client import make_user_client
from workers.kube.reader import KubeReader
from workers.render.buttons import CardButton
from workers.render.cards import build_workspace_card
from workers.render.mrkdwn import code, escape
from workers.services import Services
from workers.surfaces.base import Failed
from workers.workspaces import Resolved

log = logging.getLogger(__name__)

OFFER_PREFIX = "taubot:validate-offer:"
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


def run_nodes(live: LiveResult) -> list[str]:
    """The distinct nodes the run's live pods are bound to, as layer 6 read them."""
    names = {(p.get("spec") or {}).get("nodeName") for p in live.objects
             if p.get("kind") == "Pod" and not is_terminal(p)}
    return sorted(n for n in names if isinstance(n, str) and n)[:MAX_NODES]


def selector_for(nodes: list[str]) -> str:
    return f"{HOSTNAME_LABEL} in ({','.join(nodes)})"


async def _may_create_pods(services: Services, target: object, identity: Identity) -> bool:
    api = await make_user_client(target, identity)  # type: ignore[arg-type]
    async with api:
        allowed = await KubeReader(api, services.settings.kube_request_timeout_seconds).access_review(
            "create", "pods", "", namespace=services.settings.validation_namespace)
    return allowed is True


def offer_node_validation(services: Services, live: LiveResult, *, identity: Identity, channel: str,
                          thread_ts: str | None, now: datetime) -> CardButton | None:
    """The button for a layer-6 answer, or None (another layer, no thread, no signing key, no
    nodes, the requester may not create the pods, or the access review or Redis failed)."""
    key = services.settings.button_key()
    if live.diagnosis.layer != 6 or thread_ts is None or key is None or not live.workspace:
        return None
    nodes = run_nodes(live)
    resolution = services.registry.resolve(workspace=live.workspace)
    if not nodes or not isinstance(resolution, Resolved):
        return None
    try:
        allowed = asyncio.run(_may_create_pods(services, resolution.descriptor.cluster_target(), identity))
    except Exception as exc:  # noqa: BLE001 - no button is the honest answer to a failed review
        log.info("validate-nodes access review failed for %s: %r", identity.user, exc)
        return None
    if not allowed:
        return None
    offer_id = secrets.token_urlsafe(18)
    offer = ValidationOffer(workspace=live.workspace, nodes=nodes, channel=channel, thread_ts=thread_ts,
                            offered_at=now)
    try:
        services.redis.set(OFFER_PREFIX + offer_id, offer.model_dump_json(),
                           ex=services.settings.diagnosis_ttl_seconds)
    except redis.RedisError as exc:
        log.warning("validate-nodes offer not stored: %s", exc)
        return None
    label = "🩺 Validate this node" if len(nodes) == 1 else f"🩺 Validate these {len(nodes)} nodes"
    return CardButton(action_id=VALIDATE_NODES_ACTION, text=label, value=sign_id(key, offer_id))


def run_validate_press(services: Services, request: ValidateNodesRequest) -> dict[str, object]:
    """Validate the offered nodes as the presser; the card goes in the diagnosis's thread."""
    raw = services.redis.get(OFFER_PREFIX + request.record_id)
    if raw is None:
        days = max(services.settings.diagnosis_ttl_seconds // 86400, 1)
        if request.response_url:
            services.surface.respond(request.response_url, EXPIRED.format(days=days), [])
        return {"ok": False, "expired": True}
    offer = ValidationOffer.model_validate_json(raw)
    settings = services.settings
    selector = selector_for(offer.nodes)
    report = asyncio.run(validate_nodes(
        services.registry, identity=request.identity, selector=selector,
        namespace=settings.validation_namespace, workspace=offer.workspace,
        timeout=settings.validation_timeout_seconds, image=settings.validation_image,
        command=settings.validation_command, request_timeout=settings.kube_request_timeout_seconds))
    card = build_workspace_card(report, command=f"/tau cluster validate nodes --selector {selector}")
    # Who pressed is the identity the pods ran as (a mention cannot pass the card's markup check).
    card = card.model_copy(update={"reference": f"{card.reference} · pods created as "
                                                 f"{code(request.identity.user, 200)}"})
    posted = services.cards.post(offer.channel, card, thread_ts=offer.thread_ts)
    if isinstance(posted, Failed) and request.response_url:
        services.surface.respond(request.response_url, posted_text(report.summary), [])
    return {"ok": report.ok, "card_ts": None if isinstance(posted, Failed) else posted.ts}


def posted_text(summary: str) -> str:
    return f"Node validation: {escape(summary, 1000)} (the card could not be posted in the thread)."


__all__ = ["OFFER_PREFIX", "ValidationOffer", "offer_node_validation", "run_nodes", "run_validate_press",
           "selector_for"]
