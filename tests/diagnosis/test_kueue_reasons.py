"""Every KEP-10852 `QuotaReserved=False` reason token → state, owner, next action (issue 35).

Each row's condition is the shape Kueue writes (`metav1.Condition`, status False, type
QuotaReserved) with the message Kueue writes for that token, quoted from kubernetes-sigs/kueue at
ff69552e79ad (docs/reference/kueue-verified.md names each file):
* WaitingForQuota, ExceedsMaxQuota: flavorassigner.go messages (the KEP's Scenario 2);
* PendingEvaluation: workload_controller.go "Workload is pending evaluation in the scheduling queue";
* WaitingForPreemptedWorkloads: scheduler.go "Workload has overlapping preemption targets with
  another workload, but will fit after these preemptions complete";
* WaitingForPodsReady: scheduler.go "waiting for all admitted workloads to be in PodsReady condition";
* AdmissionGated: workload_controller.go "Admission is gated by: %s" (annotation
  kueue.x-k8s.io/admission-gated-by);
* OnHold: jobframework/reconciler.go "Job is on hold";
* Deactivated: workload_controller.go "The workload is deactivated";
* Suspended: workload_controller.go getQueueBlocker "ClusterQueue %s is inactive";
* Misconfigured: "LocalQueue %s doesn't exist" (the KEP's Scenario 3);
* NoMatchingFlavor: the KEP's Scenario 4 and flavorassigner.go "flavor %s doesn't match node affinity";
* TopologyPlacementFailed: tas_flavorassigner.go-style message.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.fixtures import k8s
from workers.diagnosis.kueue_reasons import TOKENS

from .helpers import NOW, diagnose

PHASE = "Kueue admission"


def waiting(reason: str, message: str, *, annotations: dict | None = None, active: bool = True) -> list[dict]:
    j = k8s.job("train", suspend=True)
    wl = k8s.workload(j, state="waiting_for_quota")
    cond = wl["status"]["conditions"][0]
    cond["reason"], cond["message"] = reason, message
    wl["status"]["conditions"].append(k8s.condition(
        "Admitted", False, "NoReservation", "The workload has no reservation", at=600))
    if annotations:
        wl["metadata"].setdefault("annotations", {}).update(annotations)
    if not active:
        wl["spec"]["active"] = False
    return [j, wl]


@dataclass
class Row:
    token: str
    message: str
    state: str
    owner: str
    transient: bool | None
    action: str  # a substring of the next action
    summary: str  # a substring of the phase summary
    annotations: dict | None = None
    active: bool = True


ROWS = [
    Row("WaitingForQuota", "couldn't assign flavors to pod set main: insufficient unused quota for "
        "nvidia.com/gpu in flavor a100, 4 more needed", "pending", "queue-owner", True, "no free quota",
        "waiting for unused quota"),
    Row("PendingEvaluation", "Workload is pending evaluation in the scheduling queue", "pending",
        "queue-owner", True, "has not evaluated it yet", "not yet evaluated"),
    Row("WaitingForPreemptedWorkloads", "Workload has overlapping preemption targets with another workload, "
        "but will fit after these preemptions complete", "pending", "queue-owner", True,
        "freeing capacity", "capacity is being freed for it"),
    Row("WaitingForPodsReady", "waiting for all admitted workloads to be in PodsReady condition", "pending",
        "queue-owner", True, "waitForPodsReady", "earlier admitted Workloads' pods are ready"),
    Row("AdmissionGated", "Admission is gated by: example.com/budget-gate", "pending", "queue-owner", True,
        "opens it", "admission gated by example.com/budget-gate",
        annotations={"kueue.x-k8s.io/admission-gated-by": "example.com/budget-gate"}),
    Row("OnHold", "Job is on hold", "warning", "queue-owner", False, "put the job on hold", "on hold"),
    Row("Deactivated", "The workload is deactivated", "warning", "queue-owner", False, "reactivate",
        "deactivated", active=False),
    Row("Suspended", "ClusterQueue cluster-queue is inactive", "warning", "platform", False,
        "restarts the queue", "the queue is stopped (stopPolicy): ClusterQueue cluster-queue is inactive"),
    Row("Misconfigured", "LocalQueue team-a doesn't exist", "warning", "platform", False,
        "fixes the LocalQueue", "queue missing or misconfigured"),
    Row("NoMatchingFlavor", "couldn't assign flavors to pod set main: untolerated taint "
        "{nvidia.com/gpu NoSchedule} in flavor a100", "warning", "queue-owner", False,
        "reviews the flavors", "no ResourceFlavor of the queue matches"),
    Row("TopologyPlacementFailed", "couldn't assign flavors to pod set main: topology \"gpu-topology\" "
        "doesn't allow to fit any of 4 pod(s)", "warning", "queue-owner", False, "Topology",
        "topology placement failed"),
    Row("ExceedsMaxQuota", "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu "
        "in flavor a100, previously considered podsets requests (0) + current podset request (32) > "
        "maximum capacity (16)", "warning", "queue-owner", False, "request fewer resources",
        "exceeds the queue's maximum"),
]


def test_every_token_of_the_table_has_a_row_here() -> None:
    """The table and these tests name the same tokens: a token added to one is added to both."""
    assert {r.token for r in ROWS} == set(TOKENS)


@pytest.mark.parametrize("row", ROWS, ids=[r.token for r in ROWS])
def test_token(row: Row) -> None:
    d = diagnose(waiting(row.token, row.message, annotations=row.annotations, active=row.active), "train")
    p = d.phase(PHASE)
    assert p.state.value == row.state, (p.state, p.summary)
    assert d.first_incomplete == PHASE
    assert d.owner == row.owner
    assert d.transient is row.transient
    assert row.action in d.next_action, d.next_action
    assert row.summary in p.summary, p.summary
    assert p.kueue_reason == row.token
    admission = next(x for x in d.contract()["phases"] if x["name"] == PHASE)
    assert admission["kueue_reason"] == row.token and admission["preemption"] is None


def test_no_matching_flavor_for_a_flavour_no_resource_flavor_offers_is_the_researchers() -> None:
    """SPEC §3: a request for a flavour no ResourceFlavor of the queue offers is the researcher's
    (flavorassigner.go: "flavor %s doesn't match node affinity" for every flavour of the queue)."""
    d = diagnose(waiting("NoMatchingFlavor", "couldn't assign flavors to pod set main: flavor a100 doesn't "
                         "match node affinity, flavor h100 doesn't match node affinity"), "train")
    assert d.phase(PHASE).state.value == "warning"
    assert (d.owner, d.transient) == ("researcher", False)
    assert "run config" in d.next_action


def test_an_unknown_token_is_shown_verbatim_pending_transient_unknown() -> None:
    d = diagnose(waiting("WaitingForQuantumEntanglement", "the scheduler is thinking"), "train")
    p = d.phase(PHASE)
    assert p.state.value == "pending"
    assert "reason=WaitingForQuantumEntanglement" in p.summary
    assert "WaitingForQuantumEntanglement (not known to taubot): the scheduler is thinking" in p.summary
    assert d.transient is None and d.owner == "queue-owner"
    assert p.kueue_reason == "WaitingForQuantumEntanglement"


@pytest.mark.parametrize(("reason", "message", "state", "owner"), [
    # Kueue before 0.18 (and 0.18 with the gate off): the message says why (troubleshooting_jobs.md).
    ("Pending", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
     "default-flavor, 9 more needed", "pending", "queue-owner"),
    ("Pending", "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor "
     "default-flavor in ClusterQueue", "warning", "queue-owner"),
    ("Inadmissible", "LocalQueue user-queue doesn't exist", "warning", "platform"),
    # `Waiting`: the deprecated fallback of WaitingForPodsReady (scheduler.go, workload_types.go).
    ("Waiting", "waiting for all admitted workloads to be in PodsReady condition", "pending", "queue-owner"),
])
def test_older_kueue_without_a_token_keeps_the_message_rules(reason: str, message: str, state: str,
                                                             owner: str) -> None:
    d = diagnose(waiting(reason, message), "train")
    p = d.phase(PHASE)
    assert (p.state.value, d.owner) == (state, owner), p.summary
    assert p.kueue_reason is None
    admission = next(x for x in d.contract()["phases"] if x["name"] == PHASE)
    assert admission["kueue_reason"] is None


def test_admitted_run_has_no_token() -> None:
    j = k8s.job("train")
    d = diagnose([j, k8s.workload(j, state="admitted")], "train")
    assert d.phase(PHASE).kueue_reason is None


def test_cli_json_carries_the_token(tmp_path) -> None:
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(k8s.kube_list(*waiting("PendingEvaluation",
                                                      "Workload is pending evaluation in the scheduling queue"))))
    out = subprocess.run([sys.executable, "-m", "workers.cli", "diagnose", "train", "--from-file", str(dump),
                          "--now", NOW.isoformat(), "--format", "json"], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    admission = next(x for x in json.loads(out.stdout)["phases"] if x["name"] == PHASE)
    assert admission["kueue_reason"] == "PendingEvaluation"
