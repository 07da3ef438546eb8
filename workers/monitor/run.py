"""`taubot monitor`: sweep the cache, judge each active run, post what is stalled (SPEC §7b, §11).

Every run is judged with the same pure `evaluate()` as a status, on the
cache's objects and the clock's `now`. Log reads for Runtime progress are
bounded (at most `TAUBOT_MONITOR_LOG_READS_PER_SWEEP` runs, oldest-checked
first). The monitor reads with the bot's own read-only identity, never
impersonating, and only in namespaces that descriptors name. What a log read
finds waiting is kept as the record of the run's last read (`last_read.py`), so
a `/tau status` right after a stall's post sends its dependent reads at once.

Staying up is the point: one run's failure (a hostile name, a card that does
not validate, a read error) is logged, counted and skipped; Redis unreachable
means no lease, so nothing is posted, and the loop retries every 2 s with
its cache kept; descriptors added or removed start or stop their
namespaces' streams at the next sweep. Each cluster has its own lease, held
through the sweep and checked before every Slack write (`GatedSurface`),
which also paces new messages to one a second per channel. Slack writes run
in a thread, so the cache's streams keep reading while a post waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis

from workers.collect.kueue import share_cluster_queues
from workers.collect.kueue_etas import remember_eta
from workers.collect.logs.seen import remember
from workers.collect.logs.sources import log_evidence
from workers.collect.report import RunReport
from workers.config.workspaces import WorkspaceConnection
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.linkage import find_run, meta
from workers.diagnosis.models import LogEvidence
from workers.diagnosis.phases.common import RunContext
from workers.diagnosis.progress_checks import main_started
from workers.kube.reader import KubeReader
from workers.plumbing import metrics
from workers.records import keys
from workers.records.stalls import muted
from workers.services import Services
from workers.surfaces.base import Failed, Sent, Surface
from workers.surfaces.pacing import CHANNEL_PER_SECOND, Rate, SlackPacer

from .cache import Cache
from .index import group_by_run
from .last_read import keep_last_read
from .lease import Lease, LeaseLost, cluster_lease_key
from .posts import (
    Candidate,
    changed_group,
    live_group,
    post_group,
    post_run,
    posted_alone,
    settle,
)
from .stalls import Thresholds, classify
from .starts import NextStarts

log = logging.getLogger(__name__)
CHECKED = keys.MONITOR_LOG_CHECKED
REDIS_RETRY_SECONDS = 2.0
PACE_WAIT_SECONDS = 30.0  # a new message waits at most this long for its channel's slot
SYNC_WAIT_SECONDS = 10.0  # before a sweep, how long to wait for namespaces still being LISTed
LOG_KEEP_LINES = 400
# Workspaces whose posts go out at once. Each channel is paced to one message a second, so posting
# workspace after workspace made a first sweep of 200 channels take minutes (349 s at 20,000 runs);
# a few threads spend every channel's budget in parallel while no channel gets more than its own.
POST_WORKERS = 8


@dataclass
class SweepReport:
    runs: int = 0
    stalled: int = 0
    posts: dict[str, int] = field(default_factory=dict)
    log_reads: int = 0
    seconds: float = 0.0
    unread: list[str] = field(default_factory=list)
    by_layer: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    # Workspaces post from several threads at once (`POST_WORKERS`): their counts meet here.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count(self, outcome: str) -> None:
        with self._lock:
            self.posts[outcome] = self.posts.get(outcome, 0) + 1
        metrics.AUTO_POSTS.labels(outcome).inc()

    def error(self, where: str) -> None:
        with self._lock:
            self.errors += 1
        metrics.MONITOR_RUN_ERRORS.labels(where).inc()


class GatedSurface:
    """The monitor's Slack: every write only while this replica holds its cluster's lease (checked,
    and renewed, right before the call), and new messages and edits paced to one a second per
    channel with no burst (Slack's "about one message a second per channel")."""

    def __init__(self, inner: Surface, lease: Lease | None, pacer: SlackPacer | None) -> None:
        self.inner = inner
        self.lease = lease
        self.pacer = pacer

    def _gate(self) -> None:
        if self.lease is not None and not self.lease.held():
            raise LeaseLost(self.lease.key)

    def post(self, channel: str, text: str, blocks: list[dict[str, Any]] | None = None, *,
             thread_ts: str | None = None, paced: float | None = None,
             metadata: dict[str, Any] | None = None) -> Sent | Failed:
        if self.pacer is not None and not self.pacer.acquire("chat.postMessage", channel,
                                                             max_wait=PACE_WAIT_SECONDS):
            return Failed(kind="deferred", error="paced")
        self._gate()
        return self._landed(channel, self.inner.post(channel, text, blocks, thread_ts=thread_ts,
                                                     metadata=metadata))

    def update(self, channel: str, ts: str, text: str, blocks: list[dict[str, Any]], *,
               max_wait: float, reserve_within: float = 0.0, reserved: bool = False) -> Sent | Failed:
        if self.pacer is not None and not reserved and not self.pacer.acquire("chat.update", channel,
                                                                              max_wait=max_wait):
            return Failed(kind="deferred", error="paced")
        self._gate()
        return self._landed(channel, self.inner.update(channel, ts, text, blocks, max_wait=max_wait,
                                                       reserved=True))

    def _landed(self, channel: str, outcome: Sent | Failed) -> Sent | Failed:
        """The channel's next slot counts from when this write landed (see `SlackPacer.sent`)."""
        if self.pacer is not None and isinstance(outcome, Sent):
            self.pacer.sent(channel)
        return outcome

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _uid(objs: Any, ns: str, run: str) -> str:
    return str(meta(objs.run or {}).get("uid") or f"{ns}/{run}")


@dataclass
class Judged:
    """One workspace's sweep verdicts, handed to the posting thread."""

    stalled: list[Candidate] = field(default_factory=list)
    silenced: set[str] = field(default_factory=set)  # muted but still stalled: their posts stay
    finished: dict[str, str] = field(default_factory=dict)
    present: set[str] = field(default_factory=set)


async def judge_workspace(services: Services, ws: WorkspaceConnection, cache: Cache, reader: KubeReader,
                          report: SweepReport, log_budget: list[int],
                          lease: Lease | None = None, etas: dict[str, datetime] | None = None,
                          starts: NextStarts | None = None) -> Judged | None:
    """Every run of the workspace's namespace judged; None when its objects could not all be read.
    ``etas``: the cluster's running Workloads' training ETAs as last judged (namespace/name → end),
    kept up to date here for this namespace; ``starts``: the sweep's next starts (one per sweep and
    cluster), which the groups of runs waiting for quota here take theirs from."""
    ns, name = ws.spec.namespace, ws.metadata.name
    unread = cache.unread(ns)
    if unread:  # never judge a run on objects that could not be read
        report.unread += [f"{name}: {u}" for u in unread]
        return None
    now = services.clock.now()
    thresholds = Thresholds.from_settings(services.settings)
    objects = cache.objects(ns)
    judged = Judged()
    kusto = ws.spec.logs.kusto if ws.spec.logs else None
    per_run = group_by_run(objects)
    runs = sorted(per_run)
    linked = {run: find_run(per_run[run], run, ns) for run in runs}
    started = {r for r in runs if RunContext(objs=linked[r], now=now).terminal() is None
               and main_started(RunContext(objs=linked[r], now=now))}
    # Oldest-checked first, at most the budget per sweep; the others keep their last read log.
    to_read = set(sorted(started, key=lambda r: _last_checked(services, ns, r))[:max(0, log_budget[0])])
    stall_seconds = services.settings.progress_stall_minutes * 60
    log_budget[0] -= len(to_read)
    for run in runs:
        report.runs += 1
        objs = linked[run]
        uid = _uid(objs, ns, run)
        judged.present.add(uid)
        if lease is not None:
            lease.keep()
        try:
            verdict = RunContext(objs=objs, now=now).terminal()
            if verdict is not None:
                judged.finished[uid] = verdict
                continue
            logs = None
            if run in to_read:
                report.log_reads += 1
                logs = await log_evidence(reader, objs, kusto=kusto, now=now, stall_seconds=stall_seconds)
                # An untimed log (Ray's Jobs API) is dated by when its tail was first seen — the
                # record /tau status and watches keep too — so a silent hang becomes a stall.
                logs = remember(services.redis, meta(objs.run or {}).get("uid"), logs, now)
                _remember_log(services, ns, run, logs)
                # Found waiting: the next status sends its ranks' or stack's reads with the log.
                await keep_last_read(services.redis, reader, objs, logs, now, stall_seconds)
            elif run in started:
                logs = _last_log(services, ns, run)
            d = evaluate(per_run[run], run, now, ns, logs=logs, linked=objs, stall_seconds=stall_seconds)
            if etas is not None:
                _keep_eta(etas, objs.workloads, d)
            if run in to_read and d.eta is not None:
                # Kept as a status keeps it (`kueue_etas`): a run waiting behind this one then gets
                # an earliest start from it without anyone reading this run first — and only where
                # that user may read this run's log (the status's own access review).
                remember_eta(services.redis, meta(objs.run or {}).get("uid"), d.eta.expected_end, now)
            stall = classify(d, objs, now, thresholds)
        except (LeaseLost, redis.RedisError):
            raise
        except Exception:  # noqa: BLE001 - one run's failure must not end the sweep for the others
            report.error("judge")
            log.exception("monitor: judging %s/%s failed; the sweep goes on", ns, run[:100])
            judged.silenced.add(uid)  # its post (if any) stays as it is
            continue
        if stall is None or not stall.stalled:
            continue
        report.stalled += 1
        report.by_layer[d.layer] = report.by_layer.get(d.layer, 0) + 1
        if muted(services.redis, name, ns, run):
            judged.silenced.add(uid)
            continue
        live = RunReport(diagnosis=d, workspace=name, namespace=ns, requests=0, objects=per_run[run],
                         descriptor=ws, linked_objects=objs)
        judged.stalled.append(Candidate(stall, d, live, uid))
    if etas:  # forget the ETAs of this namespace's Workloads that are gone
        present = {f"{ns}/{meta(w).get('name')}" for run in runs for w in linked[run].workloads}
        for gone in [k for k in etas if k.partition("/")[0] == ns and k not in present]:
            del etas[gone]
    _with_starts(services, name, judged.stalled, starts or NextStarts(cache, now, etas))
    return judged


def _keep_eta(etas: dict[str, datetime], workloads: list[dict], d: Any) -> None:
    """The run's training ETA (layer 7) as the release estimate of its Workloads, or none."""
    end = d.eta.expected_end if d.eta is not None else None
    if end is None and not etas:
        return
    for wl in workloads:
        key = f"{meta(wl).get('namespace')}/{meta(wl).get('name')}"
        if end is not None:
            etas[key] = end
        else:
            etas.pop(key, None)


def _with_starts(services: Services, ws: str, stalled: list[Candidate], starts: NextStarts) -> None:
    """Each run waiting for quota in a group gets its group's next start (starts.py, issue 35) — for a
    group that posts as one (two runs or more, or its post is live), not a run posted alone."""
    groups: dict[str, list[Candidate]] = {}
    for c in stalled:
        if c.stall.group and c.stall.reason == "quota.waiting" and c.live.linked_objects is not None:
            groups.setdefault(c.stall.group, []).append(c)
    for group, members in groups.items():
        if len(members) < 2 and not live_group(services, ws, group):
            continue
        start = starts.of_group([c.live.linked_objects for c in members])
        for c in members:
            c.start = start


def _guarded(report: SweepReport, what: str, action: Any) -> str:
    """One run's (or group's) posting, isolated: anything but a lost lease or Redis is logged,
    counted and skipped."""
    try:
        return str(action())
    except (LeaseLost, redis.RedisError):
        raise
    except Exception:  # noqa: BLE001 - a hostile run must not stop the posts of the others
        report.error("post")
        log.exception("monitor: posting %s failed; the sweep goes on", what[:120])
        return "error"


def post_workspace(services: Services, ws: WorkspaceConnection, judged: Judged, report: SweepReport) -> None:
    """Post, edit and settle one workspace's verdicts (Slack and Redis only: runs in a thread)."""
    name = ws.metadata.name
    channel = (ws.spec.slack.channels or [None])[0]
    if channel is None:
        return
    at = services.clock.now().strftime("%H:%M UTC")
    for c in judged.stalled:
        _guarded(report, c.stall.run, lambda c=c: changed_group(services, name, c, at))
    groups: dict[str, list[Candidate]] = {}
    singles: list[Candidate] = []
    for c in judged.stalled:
        if c.stall.group and not posted_alone(services, name, c.uid):
            groups.setdefault(c.stall.group, []).append(c)
        else:
            singles.append(c)
    for group, members in list(groups.items()):
        if len(members) < 2 and not live_group(services, name, group):
            singles += members
            del groups[group]
    for c in singles:
        report.count(_guarded(report, c.stall.run, lambda c=c: post_run(services, name, channel, c)))
    for group, members in groups.items():
        outcome = _guarded(report, group, lambda g=group, m=members: post_group(
            services, name, channel, g, m[0].stall.group_label, m))
        report.count(f"group-{outcome}")
    settle(services, name, judged.present, {c.uid for c in judged.stalled} | judged.silenced, judged.finished)


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


def _target_key(ws: WorkspaceConnection) -> str:
    return ws.cluster_target().model_dump_json()


def _post_pacer(services: Services) -> SlackPacer | None:
    """The Slack pacer's budgets with no burst per channel: the monitor posts at most one a second.
    A clock that moves only when told (a test's `ManualClock`) is slept on by moving it."""
    base = services.pacer
    if base is None:
        return None
    sleep = getattr(services.clock, "advance", None) or base.sleep
    return SlackPacer(base.conn, base.workspace, update_rate=base.update_rate,
                      channel_rate=Rate(CHANNEL_PER_SECOND, burst=1), now=base.now, sleep=sleep)


@dataclass
class Cluster:
    """One cluster the descriptors name: its client, cache, lease and gated Services."""

    key: str
    api: Any
    reader: KubeReader
    cache: Cache
    lease: Lease | None
    services: Services
    workspaces: list[WorkspaceConnection]
    etas: dict[str, datetime] = field(default_factory=dict)  # running Workloads' ETAs, for next starts


class Monitor:
    """The clusters of the current descriptors, followed as descriptors come and go."""

    def __init__(self, services: Services, *, leased: bool) -> None:
        self.services = services
        self.leased = leased
        self.clusters: dict[str, Cluster] = {}
        self.stop: asyncio.Event | None = None
        self._posters = ThreadPoolExecutor(max_workers=POST_WORKERS, thread_name_prefix="monitor-post")

    async def sync(self) -> None:
        """Clusters and namespaces as the descriptors say now: new ones start, removed ones stop."""
        by_target: dict[str, list[WorkspaceConnection]] = {}
        for ws in _descriptors(self.services):
            by_target.setdefault(_target_key(ws), []).append(ws)
        for key in sorted(set(self.clusters) - set(by_target)):
            gone = self.clusters.pop(key)
            log.info("monitor: no descriptor names %s any more: its streams stop", key[:120])
            await self._close(gone)
        for key, members in by_target.items():
            namespaces = [w.spec.namespace for w in members]
            cluster = self.clusters.get(key)
            if cluster is None:
                cluster = await self._open(key, members)
                self.clusters[key] = cluster
            else:
                cluster.workspaces = members
                cluster.cache.set_namespaces(namespaces)

    async def _open(self, key: str, members: list[WorkspaceConnection]) -> Cluster:
        settings = self.services.settings
        # No cap on connections: each stream holds at most one request at a time and the sweep reads
        # logs one at a time, so the pool is the streams plus one; a cap could only starve streams.
        api = await self.services.kube.bot(members[0].cluster_target(), pool_size=0)
        reader = KubeReader(api, settings.kube_request_timeout_seconds)
        cache = Cache(reader, [w.spec.namespace for w in members], cluster_wide=settings.monitor_cluster_wide,
                      idle_seconds=settings.monitor_watch_idle_seconds)
        lease = (Lease(self.services.redis, settings.monitor_lease_seconds, cluster_lease_key(key))
                 if self.leased else None)
        gated = dataclasses.replace(self.services, surface=GatedSurface(self.services.surface, lease,
                                                                        _post_pacer(self.services)))
        if self.stop is not None:
            cache.start(self.stop)
        return Cluster(key, api, reader, cache, lease, gated, members)

    async def _close(self, cluster: Cluster) -> None:
        await cluster.cache.close()
        if cluster.lease is not None:
            await asyncio.to_thread(cluster.lease.release)
        await cluster.api.close()

    async def close(self) -> None:
        for cluster in list(self.clusters.values()):
            await self._close(cluster)
        self.clusters.clear()
        self._posters.shutdown(wait=False)

    async def sweep(self, cluster: Cluster, report: SweepReport, budget: list[int]) -> None:
        """Judge the workspaces one after another on the loop (CPU), and post each one's verdicts
        in a thread as soon as it is judged, up to `POST_WORKERS` workspaces at once: a channel
        waiting for its one-a-second slot no longer holds back the channels after it. A lost
        lease or Redis raised by any of them ends the sweep once the others have stopped."""
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(POST_WORKERS)
        posting: list[asyncio.Future[None]] = []

        async def post(ws: WorkspaceConnection, judged: Judged) -> None:
            try:
                await loop.run_in_executor(self._posters, post_workspace, cluster.services, ws, judged,
                                           report)
            finally:
                slots.release()

        starts = NextStarts(cluster.cache, cluster.services.clock.now(), cluster.etas)
        try:
            for ws in cluster.workspaces:
                _share_hints(cluster.services, ws, cluster.cache)
                if not ws.spec.slack.channels:
                    continue
                judged = await judge_workspace(cluster.services, ws, cluster.cache, cluster.reader, report,
                                               budget, cluster.lease, cluster.etas, starts)
                if judged is None:
                    continue
                await slots.acquire()
                for done in (f for f in posting if f.done()):
                    if (exc := done.exception()) is not None:
                        raise exc  # the lease or Redis is gone: judging more is wasted
                posting.append(asyncio.ensure_future(post(ws, judged)))
        finally:
            ended = await asyncio.gather(*posting, return_exceptions=True)
        for outcome in ended:
            if isinstance(outcome, BaseException):
                raise outcome


def _share_hints(services: Services, ws: WorkspaceConnection, cache: Cache) -> None:
    """The workspace's LocalQueues → ClusterQueues, for the workers' statuses (`share_cluster_queues`)."""
    local_queues = [o for o in cache.objects(ws.spec.namespace) if o.get("kind") == "LocalQueue"]
    if not local_queues:
        return
    try:
        share_cluster_queues(services.redis, _target_key(ws), ws.spec.namespace, local_queues)
    except redis.RedisError as exc:  # a hint not shared costs a status one round, nothing else
        log.info("monitor: could not share the ClusterQueue hints of %s: %s", ws.spec.namespace, exc)


def _publish(report: SweepReport) -> None:
    for layer in range(1, 9):
        metrics.STALLED.labels(str(layer)).set(report.by_layer.get(layer, 0))


async def run_once(services: Services) -> SweepReport:
    """One sweep from fresh LISTs (`taubot monitor --once`)."""
    started = time.perf_counter()
    monitor = Monitor(services, leased=False)
    report = SweepReport()
    try:
        await monitor.sync()
        budget = [services.settings.monitor_log_reads_per_sweep]
        for cluster in monitor.clusters.values():
            await cluster.cache.list_all()
            await monitor.sweep(cluster, report, budget)
    finally:
        await monitor.close()
    report.seconds = time.perf_counter() - started
    _publish(report)
    return report


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=max(0.0, seconds))


async def run_forever(services: Services, stop: asyncio.Event) -> None:
    """Follow the descriptors, keep each cluster's cache by WATCH, sweep every interval each cluster
    whose lease this replica holds. Never exits for a fault: only for ``stop``."""
    monitor = Monitor(services, leased=True)
    monitor.stop = stop
    interval = services.settings.monitor_interval_seconds
    redis_down = False
    try:
        while not stop.is_set():
            began = time.monotonic()
            report = SweepReport()
            try:
                await monitor.sync()
                await _until_synced(monitor, stop)
                budget = [services.settings.monitor_log_reads_per_sweep]
                for cluster in list(monitor.clusters.values()):
                    assert cluster.lease is not None
                    if not await asyncio.to_thread(cluster.lease.acquire_or_renew):
                        continue
                    await monitor.sweep(cluster, report, budget)
                if redis_down:
                    log.info("monitor: Redis answers again; sweeping as usual")
                    redis_down = False
            except redis.RedisError as exc:
                metrics.MONITOR_REDIS_DOWN.inc()
                log.warning("monitor: Redis unreachable (%s: %s): posting nothing, keeping the cache, "
                            "retrying in %.0f s", type(exc).__name__, str(exc)[:200], REDIS_RETRY_SECONDS)
                redis_down = True
                await _wait(stop, REDIS_RETRY_SECONDS)
                continue
            except LeaseLost as exc:
                log.warning("monitor: lost the lease %s mid-sweep: another replica posts now", exc)
            except Exception:  # noqa: BLE001 - the loop itself never dies; the next sweep runs as usual
                metrics.MONITOR_RUN_ERRORS.labels("sweep").inc()
                log.exception("monitor: a sweep failed; the next one runs as usual")
            report.seconds = time.monotonic() - began
            _publish(report)
            log.info("monitor: swept %d runs in %.1f s: %d stalled, posts %s, errors %d, unread %d",
                     report.runs, report.seconds, report.stalled, dict(sorted(report.posts.items())),
                     report.errors, len(report.unread))
            if report.seconds > interval:
                log.warning("monitor: the sweep took %.1f s, longer than its %s s interval",
                            report.seconds, interval)
            await _hold_until(monitor, stop, began + interval, early=bool(report.unread))
    finally:
        await monitor.close()


async def _hold_until(monitor: Monitor, stop: asyncio.Event, deadline: float, *, early: bool = False) -> None:
    """Wait for the next sweep, renewing the leases this replica holds every third of a lease.

    With ``early`` (the last sweep left namespaces unread: still on their first LIST), the next
    sweep starts as soon as every one is read rather than an interval later — a first
    cluster-wide LIST of 20,000 pods in 40 pages must not cost a whole interval on top before
    the first post. A namespace whose LIST keeps failing just waits for the interval."""
    step = monitor.services.settings.monitor_lease_seconds / 3
    read = asyncio.ensure_future(_all_synced(monitor)) if early else None
    try:
        while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait([stopped, *([read] if read else [])], timeout=min(left, step),
                               return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if read is not None and read.done():
                log.info("monitor: every namespace is read now: sweeping without waiting for the interval")
                return
            for cluster in list(monitor.clusters.values()):
                if cluster.lease is not None and cluster.lease.renewed_recently(step * 2):
                    with contextlib.suppress(redis.RedisError):
                        await asyncio.to_thread(cluster.lease.renew)
    finally:
        if read is not None:
            read.cancel()


async def _all_synced(monitor: Monitor) -> None:
    """Return once every store of every cluster has been LISTed once (`Cache.first_lists`)."""
    pending = [s for c in monitor.clusters.values() for s in c.cache.first_lists()]
    await asyncio.gather(*(s.until(lambda s=s: s.synced) for s in pending))


async def _until_synced(monitor: Monitor, stop: asyncio.Event) -> None:
    """Wait (a little) for namespaces still on their first LIST, so the first sweep sees them."""
    pending = [s for c in monitor.clusters.values() for s in c.cache.first_lists()]
    if not pending:
        return
    waits = [asyncio.ensure_future(s.until(lambda s=s: s.synced)) for s in pending]
    waits.append(asyncio.ensure_future(stop.wait()))
    try:
        await asyncio.wait_for(asyncio.gather(*waits[:-1]), SYNC_WAIT_SECONDS)
    except TimeoutError:
        pass
    finally:
        for w in waits:
            w.cancel()


__all__ = ["GatedSurface", "Monitor", "SweepReport", "run_forever", "run_once"]
