"""The diagnosis vocabulary: phases, states, owners and the Diagnosis itself.

These are the boundary models between the pure evaluator and everything that
shows its answer (CLI text, JSON contract, Slack cards), so the names are the
guide's and SPEC §3–§5's, exactly.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from workers.outside.text import Outside

from .eta import Eta
from .preemption import Preemption
from .queue_position import QueuePosition

Owner = Literal[
    "researcher", "platform", "queue-owner", "node-pool-owner", "image-owner", "taugrid-owner"
]
OWNERS: tuple[str, ...] = (
    "researcher",
    "platform",
    "queue-owner",
    "node-pool-owner",
    "image-owner",
    "taugrid-owner",
)
RunKind = Literal["RayJob", "Job"]


class PhaseState(StrEnum):
    """The five states of SPEC §3; `done` and `skipped` are the finished ones."""

    PENDING = "pending"
    ACTIVE = "active"
    DONE = "done"
    WARNING = "warning"
    SKIPPED = "skipped"

    @property
    def finished(self) -> bool:
        return self in (PhaseState.DONE, PhaseState.SKIPPED)


class Finding(BaseModel):
    """Who fixes a phase that is not done, and how: the owner table of SPEC §4.

    Every phase result carries one, even when healthy, because before anything
    has failed the owner is still "the owner of that phase's failure row".
    """

    model_config = ConfigDict(frozen=True)

    reason: str = Field(description="Machine-readable code of the evidence row, `area.what` "
                        "(e.g. `quota.waiting`, `image.not_found`); code reads this, never a summary")
    owner: Owner
    transient: bool | None
    next_action: Outside


class PhaseResult(BaseModel):
    """One line of the phase tree (or one layer check).

    `summary` and `evidence` are for people; `reason`, `cause` and `via` are for code (the
    monitor's grouping, the collector's read plan, the card's labels), so rewording a sentence
    changes nothing a program does.
    """

    model_config = ConfigDict(validate_assignment=True)

    name: str
    state: PhaseState
    summary: Outside
    evidence: list[Outside] = Field(default_factory=list)
    finding: Finding
    layer: int = Field(description="Lifecycle layer of the guide this phase belongs to")
    reason: str = Field(default="", description="`area.what` code of this result (see registry.py)")
    cause: str | None = Field(default=None, description="What runs stalled for one shared cause have in "
                              "common: `ClusterQueue <name>`, `<node pool>: <normalised message>`, an image")
    via: str | None = Field(default=None, description="The pod-level phase whose evidence this result "
                            "borrows (RayCluster not ready because of Pod scheduling, …)")
    culprit: Culprit | None = Field(default=None, description="Runtime progress of a distributed run: the "
                                    "rank the evidence singles out (SPEC §5c), else None")
    kueue: bool = Field(default=False, description="The Kueue admission phase: its `kueue_reason` and "
                        "`preemption` are part of the JSON contract (SPEC §5b), null or not")
    kueue_reason: Outside | None = Field(default=None, description="Kueue's QuotaReserved=False reason "
                                         "token (KEP-10852), verbatim; None for older Kueue's `Pending`")
    preemption: Preemption | None = Field(default=None, description="what took a preempted run's place")
    forecast: QueuePosition | None = Field(default=None, description="Kueue admission waiting: the place, "
                                           "start estimate and never-fits a snapshot holding the run's "
                                           "ClusterQueue gives (SPEC §5b offline; not in the phase's JSON)")
    driver_stack: list[Outside] = Field(default_factory=list, description=(
        "Runtime progress of a stalled RayJob: the driver's top frames from Ray's py-spy endpoint, redacted"))


class Culprit(BaseModel):
    """The rank (or only the node) the ranks' logs single out for a hang or crash (SPEC §5c).

    `rank` is None when the evidence names a node or worker IP but no rank (Ray's "A worker
    died … Worker IP address"); `summary` is the one sentence the card shows."""

    rank: int | None = None
    pod: Outside | None = None
    node: Outside | None = None
    operation: Outside | None = None
    seq: int | None = None
    evidence: list[Outside] = Field(default_factory=list)
    summary: Outside = ""
    node_fault: Outside | None = Field(default=None, description="The culprit node's layer-6 fault, if any")

    def contract(self) -> dict:
        return {"rank": self.rank, "pod": self.pod, "node": self.node, "operation": self.operation,
                "seq": self.seq, "evidence": list(self.evidence)}


class RunRef(BaseModel):
    name: str
    namespace: str | None
    kind: RunKind | None


class LayerInfo(BaseModel):
    """What a layer's success proves and does not, in the guide's words."""

    number: int
    title: str
    proves: str
    does_not_prove: str
    command: str
    operator_hints: list[str] = Field(default_factory=list)


RecoveryAction = Literal["wait", "retry", "resume-from-checkpoint", "fix-then-resubmit", "none"]


class Recovery(BaseModel):
    """Layer 8: what to do about the answer as a whole (SPEC §5a)."""

    action: RecoveryAction
    summary: Outside
    states_next_action: bool = Field(default=False, description=(
        "The summary already says the answer's next action, so a card shows the summary in its "
        "place instead of both (not part of the --format json contract)"))


class PodLog(BaseModel):
    """One pod's log tail among a distributed run's ranks (SPEC §5c), or why it could not be read."""

    pod: str
    lines: list[tuple[str | None, str]] = Field(default_factory=list)
    unavailable: str | None = None
    truncated: bool = Field(default=False, description="the bound (lines or bytes) cut the tail")


class LogEvidence(BaseModel):
    """The run's log as the Runtime progress check reads it: (time, text) lines, oldest first,
    or why it could not be read; for a distributed run also every rank's tail (`ranks`)."""

    lines: list[tuple[str | None, str]] = Field(default_factory=list)
    unavailable: str | None = None
    source: str | None = None
    ranks: list[PodLog] = Field(default_factory=list, description="each pod's tail, one round (SPEC §5c)")
    ranks_sampled: str | None = Field(default=None, description="beyond the bound: which pods were read")
    driver_stack: list[str] = Field(default_factory=list, description=(
        "a stalled RayJob: the driver's top frames from the Ray dashboard's py-spy endpoint"))
    driver_stack_unavailable: str | None = Field(default=None, description="why the stack was not read")
    unchanged_since: datetime | None = Field(default=None, description=(
        "An untimed source (Ray's Jobs API): since when this log's tail has been the same, as "
        "remembered across reads (SPEC §11); None when no earlier read is known"))


class ExperimentEvidence(BaseModel):
    """The run's durable experiment record (SPEC §10), or why it could not be read."""

    found: bool = False
    run_id: str | None = None
    last_step: float | None = None
    last_metric_at: datetime | None = None
    unavailable: str | None = None


class ProgressTimeline(BaseModel):
    """When the log's progress lines were written: the charts' time axis, so a curve that stopped
    reads as a stall and not as a healthy run (issue 38.7). Times are the kubelet's (or Kusto's)
    per line; an untimed log (Ray's Jobs API) has none, only when its tail was first seen as is."""

    points: list[tuple[datetime, float | None, float | None]] = Field(
        default_factory=list, description="(time, step, loss) of the last progress lines that carry a time")
    last_progress_at: datetime | None = Field(default=None, description="the newest line that advanced")
    unchanged_since: datetime | None = Field(default=None, description=(
        "an untimed log: since when its tail has been the same (LogEvidence.unchanged_since)"))


class Diagnosis(BaseModel):
    """The answer of `evaluate()`: the tree plus the handoff for its first open phase.

    Every sentence in it (summaries, evidence, next actions) is `Outside` text: it quotes the
    cluster, so it is stripped and redacted as the model is built, before any surface, log line
    or JSON answer sees it (SPEC §11)."""

    model_config = ConfigDict(validate_assignment=True)

    run: RunRef
    phases: list[PhaseResult]
    first_incomplete: str | None
    layer: int
    owner: Owner
    transient: bool | None
    next_action: Outside
    evidence: list[Outside] = Field(default_factory=list)
    layer_info: LayerInfo
    unreachable_from: int | None = Field(
        default=None,
        description="Set when layer 1 or 2 failed: later layers were not checked",
    )
    checks: list[PhaseResult] = Field(default_factory=list, description="SPEC §5a, in ANSWER_ORDER")
    recovery: Recovery | None = None
    progress_summary: Outside = ""
    loss_points: list[float] = Field(default_factory=list)
    queue_position: QueuePosition | None = Field(default=None, description="layer 4, waiting for quota, live")
    eta: Eta | None = Field(default=None, description="layer 7: when training ends, from the log")
    loss_curve: list[tuple[float | None, float]] = Field(default_factory=list,
                                                         description="(step, loss) of the log's last lines")
    lr_curve: list[tuple[float | None, float]] = Field(
        default_factory=list, description="(step, learning rate) the same lines state")
    progress_timeline: ProgressTimeline | None = Field(default=None, description=(
        "when the progress lines were written (None: no log was read); the charts' time axis"))
    read_gaps: dict[str, Outside] = Field(
        default_factory=dict, description="what a live collection could not read: resource plural → why "
        "(`HTTP 500`, `permission denied`); SPEC §7 names each on the card's first screen")

    def phase(self, name: str) -> PhaseResult:
        for p in [*self.phases, *self.checks]:
            if p.name == name:
                return p
        raise KeyError(name)

    def contract(self) -> dict:
        """The JSON object of SPEC §5 (its keys keep their meaning), with §5a's `checks` and
        `recovery`; each phase and check also carries its machine-readable `reason` code."""
        return {
            "run": self.run.model_dump(),
            "phases": [
                {"name": p.name, "state": p.state.value, "summary": p.summary, "reason": p.reason,
                 **({"kueue_reason": p.kueue_reason,
                     "preemption": p.preemption.contract() if p.preemption else None} if p.kueue else {})}
                for p in self.phases
            ],
            "first_incomplete": self.first_incomplete,
            "layer": self.layer,
            "owner": self.owner,
            "transient": self.transient,
            "next_action": self.next_action,
            "checks": [
                {"name": c.name, "layer": c.layer, "state": c.state.value, "summary": c.summary,
                 "owner": c.finding.owner, "reason": c.reason,
                 **({"culprit": c.culprit.contract() if c.culprit else None}
                    if c.reason.startswith("progress.") else {})} for c in self.checks
            ],
            "recovery": self.recovery.model_dump(include={"action", "summary"}) if self.recovery else None,
            "queue_position": self.queue_position.model_dump() if self.queue_position else None,
            "eta": self.eta.model_dump(mode="json") if self.eta else None,
            "charts": {"loss": [{"step": s, "loss": v} for s, v in self.loss_curve],
                       "learning_rate": [{"step": s, "learning_rate": v} for s, v in self.lr_curve]},
        }
