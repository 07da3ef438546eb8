"""The monitor's informer cache, modelled on client-go's reflector (SPEC §7b, §11).

Per stream — one (namespace, kind), or one kind cluster-wide when the
monitor's RBAC allows it (`TAUBOT_MONITOR_CLUSTER_WIDE`) — LIST once, then
WATCH from the list's resourceVersion with bookmarks on, and re-LIST only on
`410 Gone`. Every other way a stream can end — a connection error, a
timeout, a 5xx, a stream closed at once, a stream silent past the idle limit
— is restarted with jittered exponential backoff (from 1 s, capped at 30 s),
never given up, and never more than one request (WATCH or LIST) per second
per stream. A healthy stream that ended normally (the server's
`timeoutSeconds`) resets its backoff.

Why hand-written: kubernetes_asyncio's `watch.Watch` re-raises on a 410 and
has neither backoff nor bookmarks nor an idle limit, and there is no
asyncio reflector on PyPI; the loop below is client-go's `ListAndWatch`
in a few lines.

Read with the bot's own read-only identity, only in the namespaces the
WorkspaceConnection descriptors name (cluster-wide streams drop every object
of another namespace on arrival). A namespace is *unread* until each of its
kinds has been LISTed once; after that a failing stream keeps its objects
(a stale cache, as an informer's), and says why in `errors`. Each object is
trimmed as it arrives to what the monitor and the engine read (`trim.py`, as
client-go's `SetTransform`), so 20,000 runs fit in memory.

Kueue's ClusterQueues are cluster-scoped: one stream for the cluster, whatever
the namespaces (issue 35: the grouped post's start estimate reads their quota).
They are not a namespace's kind: a ClusterQueue the monitor may not read leaves
the estimate unsaid, never a run unjudged. A Kueue kind whose version the
cluster does not serve (a 404 for `v1beta2`) is read at `v1beta1`, as statuses
read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import aiohttp

from workers.kube.reader import KubeReader, ReadError, resource_path
from workers.monitor.trim import trim
from workers.plumbing import metrics

log = logging.getLogger(__name__)

PAGE = 500
WATCH_SECONDS = (300, 600)  # each WATCH asks for a random timeout in this range, as client-go does
BACKOFF_FIRST, BACKOFF_CAP = 1.0, 30.0
MIN_GAP = 1.0  # seconds between two requests of one stream, whatever happens
HEALTHY_SECONDS = 30.0  # a WATCH that lived this long and ended cleanly resets the backoff
# LISTs in flight at once per cluster. Each LIST has the reader's timeout (10 s); 1,600 streams
# LISTing together queued at the API server until most timed out, were retried, and timed out
# again (the 20,000-run bench: 4,720 failed LISTs in its first two minutes, 1,180 runs never
# read). client-go bounds the same herd with its client-side rate limiter; a bound on what is in
# flight keeps each LIST's timeout for the LIST itself, not for the queue in front of it.
LIST_IN_FLIGHT = 16


@dataclass(frozen=True)
class Kind:
    name: str
    group: str
    version: str
    plural: str
    field_selector: str | None = None
    older: str | None = None  # the version read when the cluster does not serve ``version`` (a 404)


KINDS: tuple[Kind, ...] = (
    Kind("Job", "batch", "v1", "jobs"),
    Kind("RayJob", "ray.io", "v1", "rayjobs"),
    Kind("Workload", "kueue.x-k8s.io", "v1beta2", "workloads", older="v1beta1"),
    Kind("LocalQueue", "kueue.x-k8s.io", "v1beta2", "localqueues", older="v1beta1"),
    Kind("RayCluster", "ray.io", "v1", "rayclusters"),
    Kind("Pod", "", "v1", "pods"),
    Kind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims"),
    Kind("Event", "", "v1", "events", field_selector="type=Warning"),
)
# Cluster-scoped kinds: one stream and one store for the cluster (the store's namespace is "").
CLUSTER_KINDS: tuple[Kind, ...] = (
    Kind("ClusterQueue", "kueue.x-k8s.io", "v1beta2", "clusterqueues", older="v1beta1"),
)
CLUSTER = ""  # the namespace key of a cluster-scoped kind's store


@dataclass
class Store:
    """Objects of one (namespace, kind)."""

    objects: dict[str, dict] = field(default_factory=dict)
    synced: bool = False  # LISTed at least once: its runs may be judged
    # Set after every LIST and every applied WATCH event: whoever needs "the cache has moved"
    # (a test, a sweep that wants fresh objects) waits on it instead of polling.
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def until(self, condition: Callable[[], bool]) -> None:
        """Return once ``condition()`` holds, re-checked at each change (bound it with a timeout)."""
        while not condition():
            self.changed.clear()
            if condition():
                return
            await self.changed.wait()


class Backoff:
    """client-go's jittered exponential backoff: 1 s, 2 s, 4 s … capped at 30 s, each × [1, 1.5)."""

    def __init__(self, first: float = BACKOFF_FIRST, cap: float = BACKOFF_CAP) -> None:
        self.first, self.cap, self.failures = first, cap, 0

    def next(self) -> float:
        delay = min(self.cap, self.first * 2 ** min(self.failures, 16))
        self.failures += 1
        return min(self.cap, delay * random.uniform(1.0, 1.5))

    def reset(self) -> None:
        self.failures = 0


@dataclass
class Stream:
    """One LIST+WATCH loop: a kind in one namespace, or cluster-wide (``namespace`` None)."""

    namespace: str | None
    kind: Kind
    version: str = ""
    api_version: str = ""  # the kind's version this cluster serves (its `older` after a 404); "" until read
    lists: int = 0
    watches: int = 0
    error: str | None = None
    backoff: Backoff = field(default_factory=Backoff)
    last_request: float = float("-inf")
    not_before: float = float("-inf")

    @property
    def label(self) -> str:
        return f"{self.namespace or '*'}/{self.kind.plural}"


class Cache:
    """The objects of every watched namespace, kept by one stream per (namespace, kind) — or one
    per kind with ``cluster_wide`` — each restarting on its own, never giving up."""

    def __init__(self, reader: KubeReader, namespaces: Iterable[str], *, cluster_wide: bool = False,
                 idle_seconds: float = 300.0) -> None:
        self.reader = reader
        self.cluster_wide = cluster_wide
        self.idle_seconds = idle_seconds
        self.namespaces: list[str] = []
        self.stores: dict[tuple[str, str], Store] = {}
        self.streams: dict[tuple[str | None, str], Stream] = {}
        self._tasks: dict[tuple[str | None, str], asyncio.Task[None]] = {}
        self._stop: asyncio.Event | None = None
        self._list_slots: asyncio.Semaphore | None = None  # made in the loop that LISTs
        self._add_namespaces(namespaces)

    # ------------------------------------------------------------ namespaces and streams

    def _add_namespaces(self, namespaces: Iterable[str]) -> list[tuple[str | None, str]]:
        """Stores (and streams) for new namespaces; the keys of streams that must (re)start."""
        new = sorted(set(namespaces) - set(self.namespaces))
        if not new:
            return []
        self.namespaces = sorted({*self.namespaces, *new})
        started = []
        for k in CLUSTER_KINDS:  # once, with the first namespace: they do not change with namespaces
            if (None, k.name) not in self.streams:
                self.stores[(CLUSTER, k.name)] = Store()
                self.streams[(None, k.name)] = Stream(None, k)
                started.append((None, k.name))
        for ns in new:
            for k in KINDS:
                self.stores[(ns, k.name)] = Store()
        if self.cluster_wide:
            for k in KINDS:  # a new namespace's objects come from a fresh cluster-wide LIST
                stream = self.streams.setdefault((None, k.name), Stream(None, k))
                stream.version = ""
            return [*started, *((None, k.name) for k in KINDS)]
        for ns in new:
            for k in KINDS:
                self.streams[(ns, k.name)] = Stream(ns, k)
        return [*started, *((ns, k.name) for ns in new for k in KINDS)]

    def set_namespaces(self, namespaces: Iterable[str]) -> None:
        """Follow the descriptors: streams start for added namespaces and stop for removed ones
        (their objects are forgotten). Takes effect at once when the cache is running."""
        wanted = set(namespaces)
        gone = sorted(set(self.namespaces) - wanted)
        for ns in gone:
            self.namespaces.remove(ns)
            for k in KINDS:
                self.stores.pop((ns, k.name), None)
                if not self.cluster_wide:
                    self.streams.pop((ns, k.name), None)
                    task = self._tasks.pop((ns, k.name), None)
                    if task is not None:
                        task.cancel()
        if gone:
            log.info("monitor: stopped watching %s", ", ".join(gone))
        restart = self._add_namespaces(wanted)
        if restart:
            log.info("monitor: watching %s", ", ".join(sorted(wanted - set(gone))))
        if self._stop is not None:
            for key in restart:
                task = self._tasks.pop(key, None)
                if task is not None:
                    task.cancel()
                self._tasks[key] = asyncio.create_task(self._run(self.streams[key], self._stop))
        metrics.MONITOR_STREAMS.set(len(self._tasks))

    def start(self, stop: asyncio.Event) -> None:
        """Run every stream until ``stop`` (or `close`)."""
        self._stop = stop
        for key, stream in self.streams.items():
            if key not in self._tasks:
                self._tasks[key] = asyncio.create_task(self._run(stream, stop))
        metrics.MONITOR_STREAMS.set(len(self._tasks))

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    # ------------------------------------------------------------ reading

    def _path(self, stream: Stream) -> str:
        k = stream.kind
        return resource_path(k.group, stream.api_version or k.version, k.plural, stream.namespace)

    def _store_of(self, stream: Stream, obj: dict) -> Store | None:
        if stream.kind in CLUSTER_KINDS:
            return self.stores.get((CLUSTER, stream.kind.name))
        ns = stream.namespace or (obj.get("metadata") or {}).get("namespace")
        return self.stores.get((ns or "", stream.kind.name))

    def _stores_of(self, stream: Stream) -> list[Store]:
        if stream.kind in CLUSTER_KINDS:
            store = self.stores.get((CLUSTER, stream.kind.name))
            return [store] if store is not None else []
        if stream.namespace is not None:
            store = self.stores.get((stream.namespace, stream.kind.name))
            return [store] if store is not None else []
        return [self.stores[(ns, stream.kind.name)] for ns in self.namespaces]

    @staticmethod
    def _key(obj: dict) -> str:
        return str((obj.get("metadata") or {}).get("name"))

    async def relist(self, stream: Stream) -> bool:
        """One LIST into the stream's stores; False (and ``stream.error``) when it failed."""
        if self._list_slots is None:
            self._list_slots = asyncio.Semaphore(LIST_IN_FLIGHT)
        async with self._list_slots:  # waiting here is not the LIST's time: its timeout starts inside
            stream.lists += 1
            stream.last_request = time.monotonic()
            metrics.MONITOR_STREAM_REQUESTS.labels("list", stream.kind.plural).inc()
            got = await self.reader.list_versioned(self._path(stream), limit=PAGE,
                                                   field_selector=stream.kind.field_selector)
        if isinstance(got, ReadError):
            older = stream.kind.older
            if got.kind == "not_found" and older and stream.api_version != older:
                stream.api_version = older  # a Kueue that serves only v1beta1: read it there
                return await self.relist(stream)
            if got.kind == "not_found":  # the kind is not served here (no KubeRay, no DRA): nothing to read
                for store in self._stores_of(stream):
                    store.objects, store.synced = {}, True
                    store.changed.set()
                stream.error, stream.version = None, ""
                return True
            stream.error = got.describe()
            return False
        items, version = got
        fresh: dict[int, dict[str, dict]] = {id(s): {} for s in self._stores_of(stream)}
        for item in items:
            item.setdefault("kind", stream.kind.name)
            store = self._store_of(stream, item)
            if store is not None and id(store) in fresh:
                fresh[id(store)][self._key(item)] = trim(item)
        for store in self._stores_of(stream):
            store.objects, store.synced = fresh[id(store)], True
            store.changed.set()
        stream.version, stream.error = version, None
        return True

    async def list_all(self) -> None:
        """LIST every stream once (`--once`, or before the first sweep)."""
        await asyncio.gather(*(self.relist(s) for s in list(self.streams.values())))

    def _apply(self, stream: Stream, event: dict) -> str | None:
        """Apply one WATCH event; "gone" on 410, an error text on any other ERROR, else None."""
        kind_of_event = event.get("type")
        obj = event.get("object") or {}
        if kind_of_event == "ERROR":
            if obj.get("code") == 410:
                return "gone"
            return f"watch error: {obj.get('code')} {obj.get('message') or ''}".strip()
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind_of_event in ("ADDED", "MODIFIED", "DELETED"):
            obj.setdefault("kind", stream.kind.name)
            store = self._store_of(stream, obj)
            if store is not None:
                if kind_of_event == "DELETED":
                    store.objects.pop(self._key(obj), None)
                else:
                    store.objects[self._key(obj)] = trim(obj)
                store.changed.set()
        if version:  # BOOKMARK included: the stream resumes from there without a re-LIST
            stream.version = str(version)
        return None

    async def watch_once(self, stream: Stream) -> tuple[str, float, int]:
        """One WATCH from the stream's version: (how it ended, how long it lived, how many events and
        bookmarks it delivered). The end is "ended" (the server closed it), "gone" (410), "idle"
        (silent past the limit) or an error."""
        stream.watches += 1
        stream.last_request = started = time.monotonic()
        metrics.MONITOR_STREAM_REQUESTS.labels("watch", stream.kind.plural).inc()
        loop = asyncio.get_running_loop()
        events = self.reader.watch(self._path(stream), field_selector=stream.kind.field_selector,
                                   resource_version=stream.version, timeout=random.randint(*WATCH_SECONDS),
                                   bookmarks=True)
        outcome, delivered = "ended", 0
        try:
            async with asyncio.timeout(self.idle_seconds) as idle:
                async for event in events:
                    idle.reschedule(loop.time() + self.idle_seconds)
                    ended = self._apply(stream, event)
                    if ended is not None:
                        outcome = ended
                        break
                    delivered += 1
                    if delivered == 1 and stream.backoff.failures:  # it works again: backoff starts over
                        log.info("monitor: %s stream is back after %d failure(s)", stream.label,
                                 stream.backoff.failures)
                        stream.backoff.reset()
                        stream.error = None
        except TimeoutError:
            outcome = "idle"
        except (aiohttp.ClientError, OSError, ValueError) as exc:  # connection, protocol, bad JSON
            outcome = f"{type(exc).__name__}: {exc}"[:200]
        finally:
            await events.aclose()
        return outcome, time.monotonic() - started, delivered

    async def _pause(self, stream: Stream, stop: asyncio.Event) -> None:
        """Wait for the stream's backoff, and at least MIN_GAP after its last request."""
        wake = max(stream.not_before, stream.last_request + MIN_GAP)
        delay = wake - time.monotonic()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    def _failed(self, stream: Stream, why: str) -> None:
        delay = stream.backoff.next()
        stream.not_before = time.monotonic() + delay
        stream.error = why
        metrics.MONITOR_STREAM_FAILURES.labels(stream.kind.plural).inc()
        log.warning("monitor: %s stream failed (%s); retrying in %.1f s", stream.label, why, delay)

    async def _run(self, stream: Stream, stop: asyncio.Event) -> None:
        """client-go's ListAndWatch for one stream, until ``stop``: never gives up."""
        while not stop.is_set():
            try:
                if not stream.version:
                    await self._pause(stream, stop)
                    if stop.is_set():
                        return
                    if not await self.relist(stream):
                        self._failed(stream, stream.error or "list failed")
                        continue
                    if not stream.version:  # not served: look again later, slowly
                        stream.not_before = time.monotonic() + BACKOFF_CAP
                        continue
                await self._pause(stream, stop)
                if stop.is_set():
                    return
                outcome, lived, delivered = await self.watch_once(stream)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a stream never dies: log, back off, go on
                log.exception("monitor: %s stream raised", stream.label)
                self._failed(stream, f"{type(exc).__name__}")
                continue
            if delivered or lived >= HEALTHY_SECONDS:  # the stream worked: its next failure starts at 1 s
                stream.backoff.reset()
                stream.error = None
                if outcome == "ended":
                    continue
            if outcome == "gone":
                log.info("monitor: %s watch expired (410 Gone): re-listing", stream.label)
                stream.version = ""
            self._failed(stream, "closed at once" if outcome == "ended" else outcome)

    # ------------------------------------------------------------ what a sweep reads

    def objects(self, ns: str) -> list[dict]:
        return [o for k in KINDS for o in self.stores[(ns, k.name)].objects.values()]

    def of_kind(self, kind: str) -> list[dict]:
        """The cached objects of one namespaced kind in every watched namespace."""
        return [o for ns in self.namespaces if (store := self.stores.get((ns, kind))) is not None
                for o in store.objects.values()]

    def cluster_objects(self, kind: str) -> list[dict]:
        """The cached objects of a cluster-scoped kind (`CLUSTER_KINDS`): none before its first LIST,
        or when the monitor may not read it."""
        store = self.stores.get((CLUSTER, kind))
        return list(store.objects.values()) if store is not None else []

    def first_lists(self) -> list[Store]:
        """Stores still waiting for their first LIST that a sweep should wait for: every namespace's,
        and a cluster-scoped kind's while its LIST has not failed (one it may not read waits no sweep)."""
        pending = []
        for (ns, kind), store in self.stores.items():
            if store.synced:
                continue
            if ns == CLUSTER:
                stream = self.streams.get((None, kind))
                if stream is not None and stream.error:
                    continue
            pending.append(store)
        return pending

    def unread(self, ns: str) -> list[str]:
        """Kinds of ``ns`` never LISTed yet, with why: its runs are not judged."""
        out = []
        for k in KINDS:
            if not self.stores[(ns, k.name)].synced:
                stream = self.streams.get((None if self.cluster_wide else ns, k.name))
                out.append(f"{k.plural}: {(stream.error if stream else None) or 'not listed yet'}")
        return out

    def stream_errors(self) -> list[str]:
        return [f"{s.label}: {s.error}" for s in self.streams.values() if s.error]


__all__ = ["CLUSTER_KINDS", "KINDS", "Backoff", "Cache", "Kind", "Store", "Stream"]
