"""The one registry of phases and layer checks: name, layer, order, owner, needs, stall rule, label.

Every other module reads the guide's names from here, so adding a phase is one
entry (plus its module in `phases/`, listed by name in `phases/table.py`; a pod
phase also in `phases/pods.py`), not eight hand-kept tables: the evaluation order,
the pod judges and the phases whose pod status alone proves them are derived.
The order of `ENTRIES` is SPEC §5a's answer order: the first entry that is not
done or skipped is `first_incomplete`.

Stall thresholds are keyed by the results' reason codes (`area.what`,
see `phases/common.reason_code`), never by position or by a summary's words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .models import Owner


@dataclass(frozen=True)
class Entry:
    """One line of the answer: a phase of the tree (SPEC §3) or a layer check (SPEC §5a)."""

    name: str  # the guide's name, exactly
    layer: int  # 0: a check's layer comes from its result (layers 1–2 are reported by their own layer)
    kind: Literal["phase", "check"]
    owner: Owner  # the owner of the phase's failure row before anything failed (SPEC §4)
    label: str  # how a card names it when space is short
    needs: tuple[str, ...] = ()  # resources (plurals) the verdict rests on: a read gap there marks it
    pod_level: bool = False  # judged pod by pod (Pod scheduling … Ready)
    own_process: bool = False  # a failure of the run's own process: resume-from-checkpoint applies
    status_proves: bool = False  # pod status alone proves its verdict: the pods' events would add nothing
    after_pods: bool = False  # judged from the pod phases' verdicts (on its own pods): evaluated after them


WORKSPACE_CONNECTION = Entry("Workspace connection", 1, "check", "platform", "Connection")
WORKSPACE_READINESS = Entry("Workspace readiness", 2, "check", "platform", "Readiness")
SUBMITTED = Entry("Submitted", 3, "phase", "researcher", "Submitted", ("rayjobs", "jobs"))
ADMISSION = Entry("Kueue admission", 4, "phase", "queue-owner", "Admission", ("workloads",))
RAYCLUSTER = Entry("RayCluster", 5, "phase", "node-pool-owner", "RayCluster", ("rayclusters",),
                   after_pods=True)
SCHEDULING = Entry("Pod scheduling", 5, "phase", "node-pool-owner", "Scheduling", ("pods",), pod_level=True,
                   status_proves=True)
DRA = Entry("DRA allocation", 5, "phase", "node-pool-owner", "DRA", ("pods", "resourceclaims"),
            pod_level=True)  # "no claims" is known only from the pods
IMAGE_PULL = Entry("Image pull", 5, "phase", "image-owner", "Image pull", ("pods",), pod_level=True)
INIT_CONTAINERS = Entry("Init containers", 5, "phase", "researcher", "Init", ("pods",), pod_level=True,
                        own_process=True, status_proves=True)
NODE_HEALTH = Entry("GPU/node health", 6, "check", "node-pool-owner", "Nodes")
CONTAINER_START = Entry("Container start", 5, "phase", "researcher", "Start", ("pods",), pod_level=True,
                        own_process=True, status_proves=True)
READY = Entry("Ready", 5, "phase", "researcher", "Ready", ("pods",), pod_level=True, own_process=True)
RUNTIME_PROGRESS = Entry("Runtime progress", 7, "check", "researcher", "Progress", own_process=True)
RAYJOB_STATUS = Entry("RayJob status", 7, "phase", "researcher", "RayJob", own_process=True)
DURABLE_EVIDENCE = Entry("Durable evidence", 7, "check", "taugrid-owner", "Evidence")

# SPEC §5a: the order in which phases and checks compete for `first_incomplete`.
ENTRIES: tuple[Entry, ...] = (
    WORKSPACE_CONNECTION, WORKSPACE_READINESS, SUBMITTED, ADMISSION, RAYCLUSTER, SCHEDULING, DRA,
    IMAGE_PULL, INIT_CONTAINERS, NODE_HEALTH, CONTAINER_START, READY, RUNTIME_PROGRESS, RAYJOB_STATUS,
    DURABLE_EVIDENCE,
)
BY_NAME: dict[str, Entry] = {e.name: e for e in ENTRIES}
ANSWER_ORDER: tuple[str, ...] = tuple(e.name for e in ENTRIES)
# SPEC §3: the phase tree in the guide's order (RayCluster before the pod phases it borrows from).
PHASES: tuple[Entry, ...] = (SUBMITTED, ADMISSION, RAYCLUSTER, SCHEDULING, DRA, IMAGE_PULL, INIT_CONTAINERS,
                             CONTAINER_START, READY, RAYJOB_STATUS)
PHASE_NAMES: tuple[str, ...] = tuple(e.name for e in PHASES)
CHECK_NAMES: tuple[str, ...] = tuple(e.name for e in ENTRIES if e.kind == "check")
POD_PHASES: tuple[str, ...] = tuple(e.name for e in PHASES if e.pod_level)
STATUS_PROVEN: tuple[str, ...] = tuple(e.name for e in PHASES if e.status_proves)


def _evaluation_order() -> tuple[Entry, ...]:
    """The tree's order, with a phase judged from the pod phases' verdicts moved just after the
    last of them (RayCluster borrows their evidence for its own pods)."""
    before = [e for e in PHASES if not e.after_pods]
    last_pod = max(i for i, e in enumerate(before) if e.pod_level)
    return (*before[:last_pod + 1], *(e for e in PHASES if e.after_pods), *before[last_pod + 1:])


EVALUATION: tuple[Entry, ...] = _evaluation_order()
OWN_PROCESS: frozenset[str] = frozenset(e.name for e in ENTRIES if e.own_process)
LAYER_CHECKS: dict[int, str] = {1: WORKSPACE_CONNECTION.name, 2: WORKSPACE_READINESS.name}


@dataclass(frozen=True)
class StallRule:
    """When a result with this reason code counts as stalled (SPEC §7b).

    ``setting`` names the threshold in settings (`stall_<setting>_minutes`); None means
    at once (the evidence itself is the failure: a queue over its maximum, a node fault,
    a crash). ``states`` are the result states the rule applies to."""

    setting: str | None
    states: tuple[str, ...] = ("warning",)


# Reason code (or its area, `area.*`) → stall rule; the most specific key wins. A reason
# with no rule is no stall candidate (healthy, finished, or waiting on something else).
# Kueue's KEP-10852 tokens (kueue_reasons.TOKENS, issue 35): WaitingForQuota, PendingEvaluation and
# WaitingForPreemptedWorkloads are `quota.waiting`; AdmissionGated `quota.gated` and
# WaitingForPodsReady `quota.waiting_pods_ready` wait with thresholds of their own; an unknown token
# (`quota.unknown_reason`, pending) waits as quota does. The warning tokens (OnHold `quota.on_hold`,
# Deactivated, NoMatchingFlavor and its researcher's form, TopologyPlacementFailed `quota.topology`,
# ExceedsMaxQuota, never-fits; Suspended `queue.stopped`, Misconfigured `queue.broken`) are stalled
# at once by their area's rule: Kueue will not move them without a person.
STALL_RULES: dict[str, StallRule] = {
    "quota.waiting": StallRule("quota", ("pending",)),
    "quota.gated": StallRule("gated", ("pending",)),
    "quota.waiting_pods_ready": StallRule("pods_ready_wait", ("pending",)),
    "quota.unknown_reason": StallRule("quota", ("pending",)),
    "quota.check_pending": StallRule("admission_check", ("active",)),
    "quota.*": StallRule(None),  # over the maximum, rejected check, deactivated, preempted, no flavor
    "queue.*": StallRule(None),
    "sched.*": StallRule("unschedulable"),
    "dra.unallocated": StallRule("dra"),
    "dra.*": StallRule("dra"),
    "image.*": StallRule("image_pull"),
    "crash.*": StallRule("crash"),
    "init.*": StallRule("crash"),
    "start.*": StallRule("crash"),
    "ready.probe_failing": StallRule("not_ready"),
    "ready.active": StallRule("not_ready", ("active",)),
    "raycluster.*": StallRule("not_ready"),
    "node.fault": StallRule(None),
    "progress.stalled": StallRule(None),  # the engine already applied the 20-minute threshold
    "progress.hang": StallRule(None),
    "progress.crashed": StallRule(None),
    "rayjob.failed": StallRule(None),
    "run.invalid_spec": StallRule(None),
}


def stall_rule(reason: str) -> StallRule | None:
    """The rule for a reason code: its own entry, else its area's (`image.*`), else none."""
    return STALL_RULES.get(reason) or STALL_RULES.get(reason.partition(".")[0] + ".*")


__all__ = ["ANSWER_ORDER", "BY_NAME", "CHECK_NAMES", "ENTRIES", "EVALUATION", "LAYER_CHECKS", "OWN_PROCESS",
           "PHASES", "PHASE_NAMES", "POD_PHASES", "STALL_RULES", "STATUS_PROVEN", "Entry", "StallRule",
           "stall_rule"]
