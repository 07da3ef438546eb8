"""Kueue's `QuotaReserved=False` reason tokens (KEP-10852) as data: state, owner, next action.

Kueue 0.18 (alpha, gate `UnadmittedWorkloadsObservability`; on by default from 0.19) writes one
token in the `QuotaReserved=False` condition's `reason` saying *why* quota is not reserved,
instead of the old `Pending` / `Inadmissible`. Each token's meaning was read in Kueue's source
(docs/reference/kueue-verified.md names the file and commit of every one): the constants and
their comments in `apis/kueue/v1beta2/workload_types.go`, where each is set
(`pkg/scheduler/scheduler.go`, `pkg/controller/core/workload_controller.go`,
`pkg/controller/jobframework/reconciler.go`) and the tiers of
`keps/10852-inadmissible-workloads-observability/README.md`.

A table, not a chain of ifs, so a token Kueue adds is one row; a token not in the table is
shown verbatim (`UNKNOWN`), `pending`, never dropped. The legacy reasons (`Pending`,
`Inadmissible`, and `Waiting`, the deprecated fallback of `WaitingForPodsReady`) are not
tokens: their Workloads keep the message rules of the admission phase and `kueue_reason` null.
"""

from __future__ import annotations

from dataclasses import dataclass

from .models import Finding, PhaseState

# The pre-KEP reasons: a message says why, the reason does not (SPEC §3: `Pending` is not a token).
LEGACY_REASONS = frozenset({"Pending", "Inadmissible", "Waiting"})
# Kueue's `kueue.x-k8s.io/admission-gated-by` annotation names the gates (pkg/constants/constants.go).
ADMISSION_GATED_BY = "kueue.x-k8s.io/admission-gated-by"


@dataclass(frozen=True)
class ReasonRow:
    """What one token means for the run: the phase state, who acts, and the words of the summary."""

    token: str
    state: PhaseState
    finding: Finding
    explain: str
    source: str  # where Kueue sets it (repo-relative path in kubernetes-sigs/kueue)


def _f(reason: str, owner: str, transient: bool | None, action: str) -> Finding:
    return Finding(reason=reason, owner=owner, transient=transient, next_action=action)  # type: ignore[arg-type]


WAITING_ACTION = ("The queue has no free quota for this run right now (including borrowing limits): "
                  "wait, or ask the queue owner for capacity or priority.")

_ROWS: tuple[ReasonRow, ...] = (
    ReasonRow("WaitingForQuota", PhaseState.PENDING,
              _f("quota.waiting", "queue-owner", True, WAITING_ACTION),
              "waiting for unused quota in the ClusterQueue/cohort",
              "pkg/scheduler/scheduler.go, pkg/scheduler/flavorassigner/flavorassigner.go"),
    ReasonRow("PendingEvaluation", PhaseState.PENDING,
              _f("quota.waiting", "queue-owner", True,
                 "The Workload is in the queue and Kueue's scheduler has not evaluated it yet: wait; "
                 "if it stays so for minutes, the platform checks the Kueue controller."),
              "in the queue, not yet evaluated by Kueue's scheduler",
              "pkg/controller/core/workload_controller.go, pkg/scheduler/scheduler.go"),
    ReasonRow("WaitingForPreemptedWorkloads", PhaseState.PENDING,
              _f("quota.waiting", "queue-owner", True,
                 "Kueue is freeing capacity for this run (it preempted other Workloads, which have not "
                 "released their quota yet): wait — it is admitted once they have stopped."),
              "capacity is being freed for it (preempted Workloads have not released their quota yet)",
              "pkg/scheduler/scheduler.go"),
    ReasonRow("WaitingForPodsReady", PhaseState.PENDING,
              _f("quota.waiting_pods_ready", "queue-owner", True,
                 "Kueue (waitForPodsReady) admits nothing new until the Workloads it admitted before have "
                 "all their pods ready: wait; if one of them never gets ready, the queue owner looks at it."),
              "Kueue holds admission until earlier admitted Workloads' pods are ready (waitForPodsReady)",
              "pkg/scheduler/scheduler.go (waitForPodsReadyIfNeeded)"),
    ReasonRow("AdmissionGated", PhaseState.PENDING,
              _f("quota.gated", "queue-owner", True,
                 "An admission gate holds the Workload (its kueue.x-k8s.io/admission-gated-by annotation, "
                 "or a closed preemption gate): the controller that owns the gate opens it — ask the queue "
                 "owner which one that is if it does not."),
              "admission gated",
              "pkg/controller/core/workload_controller.go, pkg/scheduler/scheduler.go"),
    ReasonRow("OnHold", PhaseState.WARNING,
              _f("quota.on_hold", "queue-owner", False,
                 "The run's job integration released its quota on purpose and Kueue will not requeue it "
                 "(\"Job is on hold\"): whoever put the job on hold releases it; resubmitting unchanged "
                 "puts it on hold again."),
              "on hold: quota released on purpose, not requeued",
              "pkg/controller/jobframework/reconciler.go"),
    ReasonRow("Deactivated", PhaseState.WARNING,
              _f("quota.deactivated", "queue-owner", False,
                 "The Workload is deactivated (spec.active: false) and Kueue never requeues it: the queue "
                 "owner reactivates it once the cause is fixed, or resubmit."),
              "the Workload is deactivated",
              "pkg/controller/core/workload_controller.go"),
    ReasonRow("Suspended", PhaseState.WARNING,
              _f("queue.stopped", "platform", False,
                 "The LocalQueue or ClusterQueue is stopped (its stopPolicy): the platform restarts the "
                 "queue; resubmitting will not help."),
              "the queue is stopped (stopPolicy)",
              "pkg/controller/core/workload_controller.go (getQueueBlocker), pkg/scheduler/scheduler.go"),
    ReasonRow("Misconfigured", PhaseState.WARNING,
              _f("queue.broken", "platform", False,
                 "The run's queue is missing or misconfigured: the platform fixes the LocalQueue/"
                 "ClusterQueue (kubectl describe localqueue/clusterqueue); resubmitting will not help."),
              "queue missing or misconfigured",
              "pkg/controller/core/workload_controller.go, pkg/scheduler/scheduler.go"),
    ReasonRow("NoMatchingFlavor", PhaseState.WARNING,
              _f("quota.no_flavor", "queue-owner", False,
                 "No ResourceFlavor of the ClusterQueue fits the run (taint or node affinity mismatch): "
                 "the queue owner reviews the flavors."),
              "no ResourceFlavor of the queue matches",
              "pkg/scheduler/flavorassigner/flavorassigner.go"),
    ReasonRow("TopologyPlacementFailed", PhaseState.WARNING,
              _f("quota.topology", "queue-owner", False,
                 "Kueue's topology-aware scheduling cannot place the run's pods in the topology domain it "
                 "asks for (the free capacity is fragmented): the queue owner reviews the flavour's "
                 "Topology, or ask for a looser topology (preferred instead of required)."),
              "topology placement failed",
              "pkg/scheduler/flavorassigner/flavorassigner.go, tas_flavorassigner.go"),
    ReasonRow("ExceedsMaxQuota", PhaseState.WARNING,
              _f("quota.over_max", "queue-owner", False,
                 "The run asks for more than the queue can ever grant (its maximum, including borrowing): "
                 "request fewer resources, or ask the queue owner to raise the quota."),
              "request exceeds the queue's maximum quota",
              "pkg/scheduler/flavorassigner/flavorassigner.go"),
)

TOKENS: dict[str, ReasonRow] = {row.token: row for row in _ROWS}

# A request for a flavour or topology that no ResourceFlavor of the queue offers is the run's to
# change (SPEC §3): the node affinity/selector picks flavours, the topology level is asked for by
# the run's annotations (flavorassigner.go, tas_flavorassigner.go messages).
RESEARCHER_FLAVOR = _f(
    "quota.no_flavor_requested", "researcher", False,
    "The run asks for a flavour, resource or topology that no ResourceFlavor of its ClusterQueue offers "
    "(its node selector/affinity or topology annotation): fix the request in the run config and resubmit.")
RESEARCHER_FLAVOR_RE = (r"doesn't match node affinity|unavailable in ClusterQueue|"
                        r"does not contain the requested level|does not support TopologyAwareScheduling")

UNKNOWN = _f("quota.unknown_reason", "queue-owner", None,
             "Kueue gave a reason taubot does not know (shown verbatim): read its message, or ask the "
             "queue owner.")


def row_for(token: str) -> ReasonRow | None:
    """The table's row for a token; None for a legacy reason and for a token not in the table."""
    return TOKENS.get(token)


def is_token(reason: str) -> bool:
    """A `QuotaReserved=False` reason that is a KEP-10852 token (known or not): any reason but the
    legacy ones and the `QuotaReserved` of a reservation."""
    return bool(reason) and reason not in LEGACY_REASONS and reason != "QuotaReserved"


__all__ = ["ADMISSION_GATED_BY", "LEGACY_REASONS", "RESEARCHER_FLAVOR", "RESEARCHER_FLAVOR_RE", "TOKENS",
           "UNKNOWN", "WAITING_ACTION", "ReasonRow", "is_token", "row_for"]
