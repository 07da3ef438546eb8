"""The read plan: what one status reads, and whether a watch tick reads in full — decided here, once.

Three callers read a run: `/tau status` (and the CLI), a watch's probe, and a watch's full tick.
Each used to decide for itself: the status which layers to read from its command, the watch
when its probe may stand in for a full read (in the tick), when the queue read is stale (in
the state), and the investigation whether the queue is read at all (from a memo the tick
passed). Those rules are one question — "what must this read cost, and what can it reuse?" —
and they live here:

* `status_plan` — a status's reads from its command and the settings.
* `tick_plan` — a watch tick: the probe first (`workers/collect/probe.py`), when it may stand
  in for a full read, and the full read's plan otherwise (reusing the waiting run's queue read
  while it is fresh enough, and naming the Workloads ahead instead of listing the namespace).
* `ReadMemory.after_full_read` — what a full read leaves for the next ticks.

Nothing here reads anything: a plan is data, and `investigate` (workers/collect/investigate.py)
carries it out.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from workers.collect.dcgm import DEFAULT_EXPORTER_NAMESPACES
from workers.collect.kueue import QueueMemo
from workers.collect.probe import Probe, probe_of
from workers.diagnosis.progress_checks import DEFAULT_STALL_SECONDS

if TYPE_CHECKING:
    from workers.collect.report import RunReport
    from workers.config.settings import Settings
    from workers.contracts.commands import StatusCommand


class ReadPlan(BaseModel):
    """What one status read of a run reads. Layers 1–5 are always read (their cost is fixed:
    SPEC §7's rounds); the fields say what is added, reused or left out."""

    model_config = ConfigDict(frozen=True)

    run: str
    workspace: str | None = None
    timeout: float = 10.0
    profile: bool = False  # `--run-profile`: the GPU telemetry reads, within the status's rounds
    layer7: bool = True  # the log and the experiment record, once the run's process has started
    nodes_health: bool = True  # layer 6: the Nodes of the run's live pods
    stall_seconds: int = DEFAULT_STALL_SECONDS
    exporter_namespaces: tuple[str, ...] = DEFAULT_EXPORTER_NAMESPACES
    queue_memo: QueueMemo | None = None  # a watch's last queue read, reused while the Workloads hold
    list_namespace_workloads: bool = True  # False (a tick): the Workloads ahead read by name
    operator_hints: bool = True  # the operator-hints access review beside the status (a card's)


def status_plan(settings: Settings, command: StatusCommand, *, queue_memo: QueueMemo | None = None,
                tick: bool = False) -> ReadPlan:
    """A status's reads, from its command and the settings (the card's status and a watch's)."""
    return ReadPlan(run=command.run, workspace=command.workspace,
                    timeout=settings.kube_request_timeout_seconds, profile=command.run_profile,
                    stall_seconds=settings.progress_stall_minutes * 60,
                    exporter_namespaces=settings.exporter_namespaces, queue_memo=queue_memo,
                    list_namespace_workloads=not tick)


class ReadMemory(BaseModel):
    """What a watch remembers of its reads between ticks (kept in its state in Redis)."""

    probe: Probe | None = Field(default=None, description="what the next ticks read first, and the "
                                "versions the last full read saw; None: read in full")
    full_tick: int = Field(default=0, description="the tick of the last full read")
    queue: QueueMemo | None = Field(default=None, description="the waiting run's last queue read")
    queue_read_tick: int = Field(default=0, description="the tick that made `queue`")

    def after_full_read(self, tick: int, live: RunReport, *, run_profile: bool) -> None:
        """Keep what a full read at ``tick`` found: its probe (None — every tick reads in full — for
        a workspace that could not be read, a run not found, and `--run-profile`, whose telemetry
        is new each tick) and a fresh queue read (a reused one changes nothing)."""
        self.full_tick = tick
        self.probe = None
        if live.layer_report is None and not run_profile:
            self.probe = probe_of(live.linked, live.objects)
        memo = live.queue_memo
        if memo is None:
            self.queue = None
        elif memo.fresh:
            self.queue, self.queue_read_tick = memo, tick

    def forget_probe(self) -> None:
        """What the last read found is not on the card yet (its update failed or was deferred):
        the next tick reads in full."""
        self.probe = None


class TickPlan(BaseModel):
    """A watch tick's reads: ``probe`` first when it may stand in for a full read (then an
    unchanged run keeps its card), and ``full`` otherwise."""

    model_config = ConfigDict(frozen=True)

    probe: Probe | None
    full: ReadPlan


def tick_plan(settings: Settings, command: StatusCommand, memory: ReadMemory, *, tick: int, now: datetime,
              deadline: datetime) -> TickPlan:
    """The one place that decides when a tick re-reads (a paced re-run reads nothing: it sends what
    its tick computed; a probe that finds a change, or fails, falls back to ``full``).

    The probe stands in for a full read only while all of these hold: a probe exists (see
    `after_full_read`), the watch has not reached its deadline (the last card must say so), the
    last full read is less than `watch_full_every_ticks` ticks old (what a probe does not see:
    the workspace's readiness, nodes, events, the log's progress, time itself), and a waiting
    run's queue read is less than `watch_queue_every_ticks` old (others moving in the queue
    show in no object of the run's own). The full read reuses that queue read while it is fresh."""
    queue = memory.queue if memory.queue is not None and \
        tick - memory.queue_read_tick < settings.watch_queue_every_ticks else None
    full = status_plan(settings, command, queue_memo=queue, tick=True)
    probe = memory.probe
    if probe is not None and (now >= deadline or tick - memory.full_tick >= settings.watch_full_every_ticks
                              or (memory.queue is not None and queue is None)):
        probe = None
    return TickPlan(probe=probe, full=full)


__all__ = ["ReadMemory", "ReadPlan", "TickPlan", "status_plan", "tick_plan"]
