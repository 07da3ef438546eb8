"""`--run-profile`'s reads: dcgm-exporter found and scraped through the API server, as the user.

See `workers/diagnosis/profile.py` for why the budget is fixed, why the API server, and why
"unavailable", never zero. This module only reads: which exporter to believe and what the scrapes
say is the engine's (`workers/diagnosis/profile_build.py`), handed everything in one call.

When each read goes (issue 36.2: a `--run-profile` status in the status's own 3 rounds, was 5–6):
the exporter discovery does not depend on the run, only on whether it is live, so its LIST goes
with round 2 once round 1 found the run neither finished nor suspended (`ProfileReads.discover`);
the metrics reads need the run's pods (round 2) and the exporters, so they go in round 3 beside
the nodes and the log (`ProfileReads.scrape`). Knowing no node yet, the early LIST cannot ask the
API server to filter by `spec.nodeName`: it lists the cluster's labelled exporters (one pod per
GPU node, one page up to `DISCOVERY_PAGE`), as a run on several nodes always did.

SPEC §6's bound is kept exactly: TauGrid's label is listed only when the official one covers none
of the run's nodes. Learning that takes round 2's answers, so on its own it would cost a fourth
round (the second LIST in round 3, the metrics in round 4). A cluster where it did is remembered
(Redis, `taubot:exporter-labels:<digest>`, a week): its next statuses send both LISTs together
with round 2 — still at most two discovery requests, and the official label's answer still wins
wherever it covers a node. Only a cluster's first such status (or a CLI without Redis) takes the
fourth round. The hint only chooses when a LIST goes, never what is believed; one read back from
Redis that is not the one value written is ignored and counted (SPEC §11).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
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
from workers.plumbing.metrics import UNTRUSTED_DROPPED
from workers.records import keys

from .logs.seen import SeenStore

log = logging.getLogger(__name__)

HINT_TTL_SECONDS = 7 * 24 * 3600
BOTH = "both"  # the one value the hint holds: send TauGrid's LIST with the official one

Found = tuple[dict[str, dict], dict[str, str], str | None]  # exporter per node, why not per node, why none


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


def judge_discovery(answers: Sequence[tuple[str, list[dict] | ReadError]], nodes: list[str],
                    namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES) -> Found | None:
    """The exporters of the run's nodes from the discovery LISTs answered so far, in SPEC §6's
    order (the official label first); None when the next label must be listed. The first label
    that covers a run node wins; a failed LIST ends discovery with its reason."""
    problems: dict[str, str] = {}
    for selector, found in answers:
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
    if len(answers) < 2:
        return None
    if problems:
        return {}, problems, None
    return {}, {}, (f"no dcgm-exporter pod runs on the run's nodes ({', '.join(nodes)}); looked for "
                    f"{DCGM_LABEL} and {TAUGRID_LABEL} cluster-wide")


def metrics_path(exporter: dict) -> str:
    """The exporter pod's `/metrics` through the API server's `pods/proxy` subresource."""
    return proxy_path("pods", meta(exporter).get("namespace") or "", meta(exporter).get("name") or "",
                      metrics_port(exporter), "metrics")


def both_labels_hinted(store: SeenStore | None, cluster: str) -> bool:
    """Whether the cluster's last discovery needed TauGrid's label (see the module docstring)."""
    if store is None:
        return False
    try:
        raw = store.get(keys.exporter_labels_key(cluster))
    except Exception as exc:  # noqa: BLE001 - Redis away: no hint, one round more where it was needed
        log.warning("exporter-label hint unavailable: %s", type(exc).__name__)
        return False
    if raw in (None, b"", ""):
        return False
    if raw in (BOTH, BOTH.encode()):
        return True
    log.warning("ignored a malformed exporter-label hint")
    UNTRUSTED_DROPPED.labels("exporter_hint").inc()
    return False


def learn_labels(store: SeenStore | None, cluster: str, both: bool) -> None:
    """Keep whether this discovery needed TauGrid's label; a hint not kept only costs a round."""
    if store is None:
        return
    try:
        store.set(keys.exporter_labels_key(cluster), BOTH if both else "", ex=HINT_TTL_SECONDS)
    except Exception as exc:  # noqa: BLE001 - Redis away: the next status learns it again
        log.warning("exporter-label hint not kept: %s", type(exc).__name__)


class ProfileReads:
    """One status's `--run-profile` reads, each sent as soon as what it needs is in.

    They go through a reader of their own on the status's client — the same impersonated
    session, so every request carries the user's identity — only so that `requests` counts
    them apart from the status's reads, which go on concurrently.
    """

    def __init__(self, reader: KubeReader, *, now: datetime,
                 namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES,
                 hints: SeenStore | None = None, cluster: str = "") -> None:
        self.reader = KubeReader(reader.api_client, reader.timeout)
        self.now = now
        self.namespaces = namespaces
        self.hints = hints
        self.cluster = cluster
        self._hinted: bool | None = None  # what the hint said, once read
        self._lists: dict[str, asyncio.Future[list[dict] | ReadError]] = {}
        self._profile: asyncio.Future[GpuProfile] | None = None

    @property
    def requests(self) -> int:
        """Requests the profile made (discovery LIST pages and metrics reads)."""
        return self.reader.requests_made

    def discover(self, objs: RunObjects) -> None:
        """After round 1 (``objs``: the run alone): the discovery LIST with round 2 — and TauGrid's
        beside it where the hint says the official label covered no run node last time. None for a
        finished run (no telemetry is read) or a suspended one (it has no pods)."""
        suspended = ((objs.run or {}).get("spec") or {}).get("suspend") is True
        if suspended or RunContext(objs=objs, now=self.now).terminal() is not None:
            return
        self._send(DCGM_LABEL)
        self._hinted = both_labels_hinted(self.hints, self.cluster)
        if self._hinted:
            self._send(TAUGRID_LABEL)

    def scrape(self, objs: RunObjects) -> None:
        """After round 2 (``objs``: the run's objects): the metrics reads, once the discovery
        answered — with round 3 when it went with round 2."""
        if self._profile is None:
            self._profile = asyncio.ensure_future(self._read(objs))

    async def profile(self, objs: RunObjects) -> GpuProfile:
        """The profile (reading now whatever was not sent early)."""
        self.scrape(objs)
        assert self._profile is not None
        return await self._profile

    async def settle(self) -> None:
        """Wait for what was sent, so nothing outlives the client it went on."""
        pending = [*self._lists.values(), *([self._profile] if self._profile is not None else [])]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def _send(self, selector: str, nodes: list[str] | None = None) -> None:
        # Sent late (the run's nodes known): one node lets the API server filter (a tiny answer).
        field = f"spec.nodeName={nodes[0]}" if nodes is not None and len(nodes) == 1 else None
        self._lists[selector] = asyncio.ensure_future(self.reader.list(
            resource_path("", "v1", "pods"), label_selector=selector, field_selector=field,
            limit=DISCOVERY_PAGE))

    async def _read(self, objs: RunObjects) -> GpuProfile:
        if not objs.found:
            return unavailable_profile("run not found")
        finished = RunContext(objs=objs, now=self.now).terminal() is not None
        nodes = run_nodes(objs.pods)
        if finished or not nodes:
            profile = build_profile(objs.pods, objs.claims, {}, finished, None)
        else:
            profile = await self._scrape(objs, nodes)
        return profile.model_copy(update={"requests": self.requests})

    async def _exporters(self, nodes: list[str]) -> Found:
        answers: list[tuple[str, list[dict] | ReadError]] = []
        for selector in (DCGM_LABEL, TAUGRID_LABEL):
            if selector not in self._lists:
                self._send(selector, nodes)
            answers.append((selector, await self._lists[selector]))
            found = judge_discovery(answers, nodes, self.namespaces)
            if found is not None:
                break
        assert found is not None  # two answers always decide
        self._learn(answers, nodes)
        return found

    def _learn(self, answers: list[tuple[str, list[dict] | ReadError]], nodes: list[str]) -> None:
        """Remember whether TauGrid's label was needed — the official one answered and covered none
        of the run's nodes — when that differs from what the hint said. A failed LIST teaches
        nothing, nor does a discovery not sent early (a run suspended at round 1)."""
        official = answers[0][1]
        if isinstance(official, ReadError) or self._hinted is None:
            return
        needed = judge_discovery(answers[:1], nodes, self.namespaces) is None
        if needed != self._hinted:
            learn_labels(self.hints, self.cluster, needed)

    async def _scrape(self, objs: RunObjects, nodes: list[str]) -> GpuProfile:
        chosen, node_problems, problem = await self._exporters(nodes)
        exporters = {node: f"{meta(p).get('namespace')}/{meta(p).get('name')}:{metrics_port(p)}"
                     for node, p in chosen.items()}
        order = sorted(chosen)
        bodies = await asyncio.gather(*(self.reader.text(metrics_path(chosen[n])) for n in order))
        scrapes: dict[str, str] = {}
        for node, body in zip(order, bodies, strict=True):
            if isinstance(body, ReadError):
                node_problems[node] = read_problem(body)
            else:
                scrapes[node] = body
        return build_profile(objs.pods, objs.claims, scrapes, False, problem, exporters=exporters,
                             node_problems=node_problems)


__all__ = ["DEFAULT_EXPORTER_NAMESPACES", "ProfileReads", "both_labels_hinted", "discovery_problem_text",
           "judge_discovery", "learn_labels", "read_problem"]
