"""The monitor's informer cache: per namespace and kind, LIST once, then WATCH from the list's
resourceVersion, re-LIST only on `410 Gone` (client-go's informer pattern, CONVENTIONS).

Read with the bot's own read-only identity, and only in the namespaces the
WorkspaceConnection descriptors name — never cluster-wide. `--once` LISTs
and does not watch. A failed LIST leaves that (namespace, kind) marked
unread, so no run there is judged on missing objects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from workers.kube.reader import KubeReader, ReadError, resource_path

log = logging.getLogger(__name__)

PAGE = 500
WATCH_SECONDS = 300


@dataclass(frozen=True)
class Kind:
    name: str
    group: str
    version: str
    plural: str
    field_selector: str | None = None


KINDS: tuple[Kind, ...] = (
    Kind("Job", "batch", "v1", "jobs"),
    Kind("RayJob", "ray.io", "v1", "rayjobs"),
    Kind("Workload", "kueue.x-k8s.io", "v1beta2", "workloads"),
    Kind("LocalQueue", "kueue.x-k8s.io", "v1beta2", "localqueues"),
    Kind("RayCluster", "ray.io", "v1", "rayclusters"),
    Kind("Pod", "", "v1", "pods"),
    Kind("ResourceClaim", "resource.k8s.io", "v1", "resourceclaims"),
    Kind("Event", "", "v1", "events", field_selector="type=Warning"),
)


@dataclass
class Store:
    """Objects of one (namespace, kind), with where the WATCH resumes."""

    objects: dict[str, dict] = field(default_factory=dict)
    version: str = ""
    error: str | None = None
    lists: int = 0
    watches: int = 0
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


class Cache:
    def __init__(self, reader: KubeReader, namespaces: list[str]) -> None:
        self.reader = reader
        self.namespaces = sorted(set(namespaces))
        self.stores: dict[tuple[str, str], Store] = {(ns, k.name): Store() for ns in self.namespaces
                                                     for k in KINDS}

    def _path(self, ns: str, kind: Kind) -> str:
        return resource_path(kind.group, kind.version, kind.plural, ns)

    async def relist(self, ns: str, kind: Kind) -> None:
        store = self.stores[(ns, kind.name)]
        store.lists += 1
        got = await self.reader.list_versioned(self._path(ns, kind), field_selector=kind.field_selector,
                                               limit=PAGE)
        if isinstance(got, ReadError):
            store.error = got.describe()
            if got.kind == "not_found":  # the kind is not served here (no KubeRay, no DRA): nothing to read
                store.error, store.objects, store.version = None, {}, ""
            return
        items, version = got
        for item in items:
            item.setdefault("kind", kind.name)
        store.objects = {self._key(o): o for o in items}
        store.version, store.error = version, None
        store.changed.set()

    @staticmethod
    def _key(obj: dict) -> str:
        return str((obj.get("metadata") or {}).get("name"))

    async def list_all(self) -> None:
        await asyncio.gather(*(self.relist(ns, k) for ns in self.namespaces for k in KINDS))

    async def watch(self, ns: str, kind: Kind, stop: asyncio.Event) -> None:
        """Keep one store current until ``stop``: WATCH from the stored version, re-LIST on 410."""
        store = self.stores[(ns, kind.name)]
        while not stop.is_set():
            if store.error is not None or not store.version:
                await self.relist(ns, kind)
                if store.error is not None:
                    await asyncio.wait([asyncio.ensure_future(stop.wait())], timeout=30)
                    continue
            store.watches += 1
            gone = False
            async for event in self.reader.watch(self._path(ns, kind), field_selector=kind.field_selector,
                                                 resource_version=store.version, timeout=WATCH_SECONDS):
                kind_of_event = event.get("type")
                obj = event.get("object") or {}
                if kind_of_event == "ERROR":
                    gone = obj.get("code") == 410
                    if not gone:
                        store.error = f"watch: {obj.get('message') or obj.get('code')}"
                    break
                obj.setdefault("kind", kind.name)
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind_of_event == "DELETED":
                    store.objects.pop(self._key(obj), None)
                elif kind_of_event in ("ADDED", "MODIFIED"):
                    store.objects[self._key(obj)] = obj
                if version:
                    store.version = str(version)
                store.changed.set()
                if stop.is_set():
                    return
            if gone:
                log.info("monitor: %s/%s watch expired (410 Gone): re-listing", ns, kind.plural)
                store.version = ""

    def objects(self, ns: str) -> list[dict]:
        return [o for k in KINDS for o in self.stores[(ns, k.name)].objects.values()]

    def unread(self, ns: str) -> list[str]:
        return [f"{k.plural}: {self.stores[(ns, k.name)].error}" for k in KINDS
                if self.stores[(ns, k.name)].error is not None]


__all__ = ["KINDS", "Cache", "Kind", "Store"]
