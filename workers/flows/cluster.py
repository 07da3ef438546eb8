"""`/tau cluster validate topology|nodes`: layer 6 on demand, as the caller, answered in a thread."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workers.contracts.commands import TopologyValidateCommand
from workers.contracts.requests import ClusterRequest
from workers.render.cards import build_workspace_card
from workers.services import Services
from workers.validation.cluster import validate_nodes, validate_topology

from .status import deliver, ensure_parent

if TYPE_CHECKING:
    from rq.job import Job


def run_cluster(services: Services, request: ClusterRequest, *, job: Job | None) -> dict[str, Any]:
    settings = services.settings
    command = request.command
    parent_ts = ensure_parent(services, request, job)
    if isinstance(command, TopologyValidateCommand):
        call = validate_topology(services.registry, identity=request.identity, kube=services.kube,
                                 workspace=command.workspace, profile=command.profile,
                                 timeout=settings.kube_request_timeout_seconds)
    else:
        call = validate_nodes(services.registry, identity=request.identity, kube=services.kube,
                              selector=command.selector,
                              namespace=settings.validation_namespace, workspace=command.workspace,
                              min_healthy=command.min_healthy, timeout=command.timeout_seconds,
                              image=settings.validation_image, command=settings.validation_command,
                              request_timeout=settings.kube_request_timeout_seconds)
    report = services.run(call)
    card = build_workspace_card(report, command=request.display())
    posted = deliver(services, request, parent_ts, card, job)
    return {"parent_ts": parent_ts, "card_ts": posted.ts if posted else None, "ok": report.ok}


__all__ = ["run_cluster"]
