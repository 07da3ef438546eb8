"""One `Services` per worker process: what every flow is handed instead of reaching for globals.

Settings, the Redis pool, the descriptor registry (re-read when its files
change, so a ConfigMap update needs no restart), the Kubernetes client
factory, the surface cards go to, the clock and the queue.
Built once (`taubot worker` builds it before rq forks, so work horses
inherit it), or installed by a test or the shell with a manual clock, a
terminal surface or an inline queue.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis
from rq import Queue

from workers.config.settings import Settings, load_settings
from workers.config.workspaces import Registry, load_descriptors
from workers.kube.client import KubeClients, WarmKubeClients
from workers.plumbing.clock import Clock, SystemClock
from workers.plumbing.jobqueue import JobQueue, RqQueue
from workers.plumbing.loop import PROCESS_LOOP, ProcessLoop
from workers.records.cards import CardStore
from workers.surfaces.base import Surface
from workers.surfaces.pacing import CHANNEL_PER_SECOND, Rate, SlackPacer, workspace_scope
from workers.surfaces.slack import SlackSurface
from workers.surfaces.slack_client import make_web_client

T = TypeVar("T")


class DescriptorSource:
    """The descriptor directory, re-parsed only when a file in it changed (name, size, mtime)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._signature: tuple[Any, ...] | None = None
        self._registry: Registry | None = None
        self._lock = threading.Lock()

    def _stat(self) -> tuple[Any, ...]:
        if self.directory is None:
            return ()
        try:
            entries = sorted(os.scandir(self.directory), key=lambda e: e.name)
        except OSError as exc:
            return (type(exc).__name__,)
        out = []
        for entry in entries:
            try:
                st = entry.stat()  # follows ConfigMap symlinks: their targets change on update
            except OSError:
                continue
            out.append((entry.name, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def get(self) -> Registry:
        signature = self._stat()
        with self._lock:
            if self._registry is None or signature != self._signature:
                self._registry = load_descriptors(self.directory)
                self._signature = signature
            return self._registry


@dataclass
class Services:
    settings: Settings
    redis: redis.Redis
    surface: Surface
    queue: JobQueue
    clock: Clock = field(default_factory=SystemClock)
    descriptors: DescriptorSource | None = None
    # One pool per cluster for the process's life, on `loop` (issue 28): jobs run their async work
    # with `run`, never a loop of their own, so the next job finds the connections open.
    kube: KubeClients = field(default_factory=WarmKubeClients)
    pacer: SlackPacer | None = None
    loop: ProcessLoop = PROCESS_LOOP

    def __post_init__(self) -> None:
        if self.descriptors is None:
            self.descriptors = DescriptorSource(self.settings.workspaces_dir)
        self.cards = CardStore(self.redis, self.surface, ttl=self.settings.diagnosis_ttl_seconds,
                               key=self.settings.button_key())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """A job's async work, on the process's long-lived loop (`workers/plumbing/loop.py`)."""
        return self.loop.run(coro)

    def close(self) -> None:
        """Close what the process keeps open for jobs: the clusters' connection pools."""
        if isinstance(self.kube, WarmKubeClients) and self.kube.pools:
            self.run(self.kube.close())

    @property
    def registry(self) -> Registry:
        assert self.descriptors is not None
        return self.descriptors.get()

    @classmethod
    def for_slack(cls, settings: Settings, *, clock: Clock | None = None) -> Services:
        """Production: Slack's Web API (paced in Redis), rq on the settings' queue."""
        conn = redis.Redis.from_url(settings.redis_url)
        pacer = make_pacer(settings, conn, clock)
        surface = SlackSurface(make_web_client(settings), pacer)
        return cls(settings=settings, redis=conn, surface=surface, pacer=pacer,
                   queue=RqQueue(Queue(settings.queue_name, connection=conn)), clock=clock or SystemClock())


def make_pacer(settings: Settings, conn: redis.Redis, clock: Clock | None = None) -> SlackPacer:
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    per_minute = settings.slack_updates_per_minute
    now = (lambda: clock.now().timestamp()) if clock is not None else time.time
    return SlackPacer(conn, workspace_scope(token),
                      update_rate=Rate(per_minute / 60.0, burst=max(1, min(5, per_minute // 10))),
                      channel_rate=Rate(CHANNEL_PER_SECOND, burst=settings.slack_channel_burst), now=now)


_installed: Services | None = None
_lock = threading.Lock()


def install(services: Services | None) -> None:
    """Make ``services`` what jobs in this process use (None: build from settings again)."""
    global _installed
    with _lock:
        _installed = services


def current() -> Services:
    """The process's Services, built from the environment on first use."""
    global _installed
    with _lock:
        if _installed is None:
            _installed = Services.for_slack(load_settings())
        return _installed


__all__ = ["DescriptorSource", "KubeClients", "Services", "current", "install", "make_pacer"]
