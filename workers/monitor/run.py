"""`taubot monitor`: sweep the cache, judge each active run, post what is stalled (SPEC §7b).

Every run is judged with the same pure `evaluate()` as a status, on the
cache's objects and the clock's `now`. Log reads for Runtime progress are
bounded (at most `TAUBOT_MONITOR_LOG_READS_PER_SWEEP` runs, oldest-checked
first). The monitor reads with the bot's own read-only identity, never
impersonating, and only in namespaces that descriptors name.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from workers import metrics
from workers.collect.logs.sources import log_evidence
from workers.collect.report import RunReport
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.linkage import find_run
from workers.diagnosis.models import LogEvidence
from workers.diagnosis.phases.common import RunContext
from workers.diagnosis.runtime import main_started
from workers.kube.reader import KubeReader
from workers.services import Services
from workers.workspaces import WorkspaceConnection

from .cache import KINDS, Cache
from .index import group_by_run
from .lease import Lease
from .posts import Candidate, muted, post_group, post_run, settle
from .stalls import Thresholds, classify

log = logging.getLogger(__name__)
CHECKED = "taubot:monitor:log-checked:"


@dataclass
class SweepReport:
    runs: int = 0
    stalled: int = 0
    posts: dict[str, int] = field(default_factory=dict)
    log_reads: int = 0
    seconds: float = 0.0
    unread: list[str] = field(default_factory=list)
    by_layer: dict[int, int] = field(default_factory=dict)


async def sweep_workspace(services: Services, ws: WorkspaceConnection, cache: Cache, reader: KubeReader,
                          report: SweepReport, log_budget: list[int]) -> None:
    ns, name = ws.spec.namespace, ws.metadata.name
    channel = (ws.spec.slack.channels or [None])[0]
    if channel is None:
        return
    unread = cache.unread(ns)
    if unread:  # never judge a run on objects that could not be read
        report.unread += [f"{name}: {u}" for u in unread]
        return
    now = services.clock.now()
    thresholds = Thresholds.from_settings(services.settings)
    objects = cache.objects(ns)
    stalled: list[Candidate] = []
    silenced: set[str] = set()  # muted but still stalled: their posts stay as they are
    finished: dict[str, str] = {}
    kusto = ws.spec.logs.kusto if ws.spec.logs else None
    per_run = group_by_run(objects)
    runs = sorted(per_run)
    linked = {run: find_run(per_run[run], run, ns) for run in runs}
    started = {r for r in runs if RunContext(objs=linked[r], now=now).terminal() is None
               and main_started(RunContext(objs=linked[r], now=now))}
    # Oldest-checked first, at most the budget per sweep; the others keep their last read log.
    to_read = set(sorted(started, key=lambda r: _last_checked(services, ns, r))[:max(0, log_budget[0])])
    log_budget[0] -= len(to_read)
    for run in runs:
        report.runs += 1
        objs = linked[run]
        verdict = RunContext(objs=objs, now=now).terminal()
        if verdict is not None:
            finished[run] = verdict
            continue
        logs = None
        if run in to_read:
            report.log_reads += 1
            logs = await log_evidence(reader, objs, kusto=kusto, now=now)
            _remember_log(services, ns, run, logs)
        elif run in started:
            logs = _last_log(services, ns, run)
        d = evaluate(per_run[run], run, now, ns, logs=logs, linked=objs,
                     stall_seconds=services.settings.progress_stall_minutes * 60)
        stall = classify(d, objs, now, thresholds)
        if stall is None or not stall.stalled:
            continue
        report.stalled += 1
        report.by_layer[d.layer] = report.by_layer.get(d.layer, 0) + 1
        if muted(services, name, ns, run):
            silenced.add(run)
            continue
        live = RunReport(diagnosis=d, workspace=name, namespace=ns, requests=0, objects=per_run[run],
                         descriptor=ws, linked_objects=objs)
        stalled.append(Candidate(stall, d, live))
    groups: dict[str, list[Candidate]] = {}
    for c in stalled:
        if c.stall.group:
            groups.setdefault(c.stall.group, []).append(c)
    for c in stalled:
        members = groups.get(c.stall.group or "", [])
        if len(members) >= 2:
            continue
        outcome = post_run(services, name, channel, c)
        report.posts[outcome] = report.posts.get(outcome, 0) + 1
        metrics.AUTO_POSTS.labels(outcome).inc()
    for group, members in groups.items():
        if len(members) >= 2:
            outcome = post_group(services, name, channel, group, members[0].stall.group_label, members)
            report.posts[f"group-{outcome}"] = report.posts.get(f"group-{outcome}", 0) + 1
            metrics.AUTO_POSTS.labels(f"group-{outcome}").inc()
    settle(services, name, {c.stall.run for c in stalled} | silenced, finished)


LOG_KEEP_LINES = 400


def _last_checked(services: Services, ns: str, run: str) -> float:
    raw = services.redis.get(f"{CHECKED}{ns}:{run}")
    return float(raw) if raw else 0.0


def _remember_log(services: Services, ns: str, run: str, logs: LogEvidence) -> None:
    """The last read, kept (its newest lines) so a run not read this sweep keeps its verdict."""
    kept = logs.model_copy(update={"lines": logs.lines[-LOG_KEEP_LINES:]})
    services.redis.set(f"{CHECKED}{ns}:{run}", str(services.clock.now().timestamp()), ex=24 * 3600)
    services.redis.set(f"{CHECKED}log:{ns}:{run}", kept.model_dump_json(), ex=24 * 3600)


def _last_log(services: Services, ns: str, run: str) -> LogEvidence | None:
    raw = services.redis.get(f"{CHECKED}log:{ns}:{run}")
    return LogEvidence.model_validate_json(raw) if raw else None


def _descriptors(services: Services) -> list[WorkspaceConnection]:
    return [d.descriptor for d in services.registry.descriptors]


async def sweep(services: Services, caches: dict[str, tuple[Cache, KubeReader]]) -> SweepReport:
    started = time.perf_counter()
    report = SweepReport()
    budget = [services.settings.monitor_log_reads_per_sweep]
    for ws in _descriptors(services):
        cache, reader = caches[_target_key(ws)]
        await sweep_workspace(services, ws, cache, reader, report, budget)
    report.seconds = time.perf_counter() - started
    for layer in range(1, 9):
        metrics.STALLED.labels(str(layer)).set(report.by_layer.get(layer, 0))
    return report


def _target_key(ws: WorkspaceConnection) -> str:
    return ws.cluster_target().model_dump_json()


async def _listed_caches(services: Services, clients: list[Any]) -> dict[str, tuple[Cache, KubeReader]]:
    """One bot-identity client and one LISTed cache per cluster (workspaces sharing a cluster share
    them); each client goes into ``clients`` as soon as it exists, for the caller to close."""
    by_target: dict[str, list[WorkspaceConnection]] = {}
    for ws in _descriptors(services):
        by_target.setdefault(_target_key(ws), []).append(ws)
    caches: dict[str, tuple[Cache, KubeReader]] = {}
    for key, members in by_target.items():
        api = await services.kube.bot(members[0].cluster_target())
        clients.append(api)
        reader = KubeReader(api, services.settings.kube_request_timeout_seconds)
        cache = Cache(reader, [w.spec.namespace for w in members])
        await cache.list_all()
        caches[key] = (cache, reader)
    return caches


async def run_once(services: Services) -> SweepReport:
    """One sweep from fresh LISTs (`taubot monitor --once`)."""
    clients: list[Any] = []
    try:
        return await sweep(services, await _listed_caches(services, clients))
    finally:
        for api in clients:
            await api.close()


async def run_forever(services: Services, stop: asyncio.Event) -> None:
    """LIST once, WATCH from there, sweep every interval while holding the lease."""
    lease = Lease(services.redis, services.settings.monitor_lease_seconds)
    clients: list[Any] = []
    caches: dict[str, tuple[Cache, KubeReader]] = {}
    tasks: list[asyncio.Task[None]] = []
    try:
        caches.update(await _listed_caches(services, clients))
        for cache, _reader in caches.values():
            tasks += [asyncio.create_task(cache.watch(ns, kind, stop))
                      for ns in cache.namespaces for kind in KINDS]
        interval = services.settings.monitor_interval_seconds
        while not stop.is_set():
            if lease.acquire_or_renew():
                report = await sweep(services, caches)
                if report.seconds > interval:
                    log.warning("monitor: the sweep took %.1f s, longer than its %s s interval",
                                report.seconds, interval)
            try:
                pause = min(interval, services.settings.monitor_lease_seconds / 2)
                await asyncio.wait_for(stop.wait(), timeout=pause)
            except TimeoutError:
                pass
    finally:
        lease.release()
        for task in tasks:
            task.cancel()
        for api in clients:
            await api.close()


__all__ = ["SweepReport", "run_forever", "run_once", "sweep"]
