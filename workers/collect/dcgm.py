"""`--run-profile`'s reads: dcgm-exporter found and scraped through the API server, as the user.

See `workers/diagnosis/profile.py` for why the budget is fixed, why the API server, and why
"unavailable", never zero. This module only reads: which exporter to believe and what the scrapes
say is the engine's (`workers/diagnosis/profile_build.py`), handed everything in one call.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from workers.diagnosis.linkage import RunObjects, meta
from workers.diagnosis.phases.common import RunContext
from workers.diagnosis.profile import (
    DCGM_LABEL,
    DISCOVERY_PAGE,
    TAUGRID_LABEL,
    GpuProfile,
    run_nodes,
    unavailable_profile,
)
from workers.diagnosis.profile_build import (
    DEFAULT_EXPORTER_NAMESPACES,
    build_profile,
    metrics_port,
    pick_exporters,
)
from workers.kube.reader import KubeReader, ReadError, proxy_path, resource_path


def read_problem(error: ReadError) -> str:
    """A failed metrics request in words that say which permission or component is missing."""
    text = f"metrics request failed: {error.describe()}"
    if error.kind == "forbidden":
        text += " — reading exporter metrics needs the pods/proxy subresource"
    return text


def discovery_problem_text(error: ReadError, selector: str) -> str:
    """A failed exporter LIST; a 403 names the cluster-wide permission the user lacks."""
    text = f"cannot list exporter pods ({selector}): {error.describe()}"
    if error.kind == "forbidden":
        text += " — listing exporter pods needs cluster-wide pod read access"
    return text


async def _discover(reader: KubeReader, nodes: list[str],
                    namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES,
                    ) -> tuple[dict[str, dict], dict[str, str], str | None]:
    """At most two LISTs: the official label; TauGrid's only if the first covers no run node."""
    path = resource_path("", "v1", "pods")
    # One node: let the API server filter (a tiny answer); several: one LIST, filtered here.
    field = f"spec.nodeName={nodes[0]}" if len(nodes) == 1 else None
    problems: dict[str, str] = {}
    for selector in (DCGM_LABEL, TAUGRID_LABEL):
        found = await reader.list(path, label_selector=selector, field_selector=field,
                                  limit=DISCOVERY_PAGE)
        if isinstance(found, ReadError):
            text = discovery_problem_text(found, selector)
            if selector == TAUGRID_LABEL:
                text = f"no {DCGM_LABEL} pod runs on the run's nodes, and {text}"
            return {}, problems, text
        chosen, not_running = pick_exporters(found, nodes, namespaces)
        for node, why in not_running.items():
            problems.setdefault(node, why)
        if chosen:
            return chosen, problems, None
    if problems:
        return {}, problems, None
    return {}, {}, (f"no dcgm-exporter pod runs on the run's nodes ({', '.join(nodes)}); looked for "
                    f"{DCGM_LABEL} and {TAUGRID_LABEL} cluster-wide")


async def collect_profile(reader: KubeReader, run_objects: RunObjects, *, now: datetime,
                          finished: bool | None = None,
                          namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES) -> GpuProfile:
    """Discover the exporters on the run's nodes and read each once, under the reader's identity.

    ``finished`` defaults to whether the run says it ended (Job conditions,
    RayJob status): a finished run costs no request and keeps only its
    allocation identity.
    """
    start = reader.requests_made
    if finished is None:
        finished = RunContext(objs=run_objects, now=now).terminal() is not None
    pods, claims = run_objects.pods, run_objects.claims
    if not run_objects.found:
        return unavailable_profile("run not found")
    nodes = run_nodes(pods)
    if finished or not nodes:
        return build_profile(pods, claims, {}, finished, None)
    chosen, node_problems, problem = await _discover(reader, nodes, namespaces)
    exporters = {node: f"{meta(p).get('namespace')}/{meta(p).get('name')}:{metrics_port(p)}"
                 for node, p in chosen.items()}
    order = sorted(chosen)
    bodies = await asyncio.gather(*(
        reader.text(proxy_path("pods", meta(chosen[n]).get("namespace") or "", meta(chosen[n]).get("name")
                               or "", metrics_port(chosen[n]), "metrics"))
        for n in order))
    scrapes: dict[str, str] = {}
    for node, body in zip(order, bodies, strict=True):
        if isinstance(body, ReadError):
            node_problems[node] = read_problem(body)
        else:
            scrapes[node] = body
    profile = build_profile(pods, claims, scrapes, False, problem, exporters=exporters,
                            node_problems=node_problems)
    return profile.model_copy(update={"requests": reader.requests_made - start})


__all__ = ["DEFAULT_EXPORTER_NAMESPACES", "collect_profile", "discovery_problem_text", "read_problem"]
