"""What took a preempted run's place (issue 35, SPEC §3 "Preemption", §5b `preemption`).

Messages are Kueue's `preemptionMessage` (pkg/scheduler/preemption/preemption.go at ff69552e79ad,
docs/reference/kueue-verified.md): the `Evicted`/`Preempted` conditions carry the text, the
`Preempted` event on the preemptee Workload (events.k8s.io/v1, `note`) the text plus the
effective priorities. The preemptor lives in another namespace (`research`), as the
kueue-who-preempted skill describes for a multi-namespace ClusterQueue.
"""

from __future__ import annotations

import pytest

from tests.fixtures import k8s
from workers.diagnosis.preemption import parse_message

from .helpers import diagnose

PHASE = "Kueue admission"
WORDS = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}


def preemptor() -> tuple[dict, dict]:
    urgent = k8s.job("urgent-eval", ns="research")
    wl = k8s.workload(urgent, state="admitted", cluster_queue="research-h100", priority=1000)
    return urgent, wl


def message(reason: str, wl: dict, *, priorities: bool) -> str:
    text = (f"Preempted to accommodate a workload (UID: {wl['metadata']['uid']}, JobUID: "
            f"{wl['metadata']['labels'][k8s.KUEUE_JOB_UID_LABEL]}) due to {WORDS[reason]}; "
            "preemptor path: /research/research-h100; preemptee path: /research/h100-shared")
    if priorities:
        text += ("; preemptor effective priority: 1000 (base: 1000, boost: 0); preemptee effective "
                 "priority: 100 (base: 100, boost: 0)")
    return text


def preempted(reason: str, *, event: bool, readable: bool) -> list[dict]:
    j = k8s.job("train", suspend=True)
    wl = k8s.workload(j, state="preempted", cluster_queue="h100-shared", priority=100)
    _urgent, pre = preemptor()
    cond_msg = message(reason, pre, priorities=False)
    for cond in wl["status"]["conditions"]:
        if cond["type"] in ("Evicted", "Preempted", "Requeued"):
            cond["message"] = cond_msg
        if cond["type"] == "Preempted":
            cond["reason"] = reason
        if cond["type"] == "QuotaReserved":  # Kueue 0.18+: requeued and waiting again, with its token
            cond["reason"] = "WaitingForQuota"
    objects = [j, wl]
    if event:
        objects.append(k8s.event_v1_events(wl, "Preempted", message(reason, pre, priorities=True),
                                           type="Normal", first=600, reporting_controller="kueue-admission"))
    if readable:
        objects.append(pre)
    return objects


@pytest.mark.parametrize("reason", list(WORDS))
@pytest.mark.parametrize("event", [True, False], ids=["event", "condition-only"])
def test_each_preemption_reason_in_both_forms(reason: str, event: bool) -> None:
    d = diagnose(preempted(reason, event=event, readable=False), "train")
    p = d.phase(PHASE)
    assert p.state.value == "warning" and d.owner == "queue-owner" and d.transient is True
    pre = p.preemption
    assert pre is not None
    assert pre.reason == reason
    assert pre.preemptor_path == "/research/research-h100"
    assert pre.preemptee_path == "/research/h100-shared"
    assert pre.preemptor is None  # not read: never named
    if event:
        assert (pre.source, pre.preemptor_priority, pre.preemptee_priority) == ("event", 1000, 100)
        assert "a workload in /research/research-h100, priority 1000 over yours 100" in p.summary
    else:
        # SPEC §3: once only the condition remains, the run's own spec.priority; the preemptor's null.
        assert (pre.source, pre.preemptor_priority, pre.preemptee_priority) == ("condition", None, 100)
        assert "a workload in /research/research-h100" in p.summary
    assert WORDS[reason] in p.summary
    # then its place in the queue again: requeued, with Kueue's token
    assert "requeued: waiting for unused quota" in p.summary
    admission = next(x for x in d.contract()["phases"] if x["name"] == PHASE)
    assert admission["kueue_reason"] == "WaitingForQuota"
    assert {"reason", "preemptor_path", "preemptee_path", "preemptor_priority", "preemptee_priority",
            "preemptor"} <= set(admission["preemption"])


def test_the_preemptor_is_named_only_when_the_user_could_read_it() -> None:
    d = diagnose(preempted("InClusterQueue", event=True, readable=True), "train")
    pre = d.phase(PHASE).preemption
    assert pre is not None
    _urgent, wl = preemptor()
    assert pre.preemptor == f"research/{wl['metadata']['name']}"
    assert pre.preemptor_job == "Job/urgent-eval"
    assert (f"preempted by Job/urgent-eval in /research/research-h100, priority 1000 over yours 100 (its Workload "
            f"research/{wl['metadata']['name']})") in d.phase(PHASE).summary
    unread = diagnose(preempted("InClusterQueue", event=True, readable=False), "train").phase(PHASE)
    assert unread.preemption is not None and unread.preemption.preemptor is None
    assert "urgent-eval" not in unread.summary


def test_older_messages_parse_to_what_they_say() -> None:
    # Kueue's preemption.md (2025): no paths; troubleshooting_jobs.md (2024): no UID either.
    old = parse_message("Preempted to accommodate a workload (UID: 5c023c28-8533-4927-b266-56bca5e310c1, "
                        "JobUID: 4548c8bd-c399-4027-bb02-6114f3a8cdeb) due to prioritization in the ClusterQueue")
    assert old is not None and old["uid"] == "5c023c28-8533-4927-b266-56bca5e310c1"
    assert old["preemptor_path"] is None and old["why"] == "prioritization in the ClusterQueue"
    assert parse_message("Preempted to accommodate a higher priority Workload") == {"why": None}
    assert parse_message("The ClusterQueue is stopped") is None


def test_the_legacy_preempted_fixture_still_reads() -> None:
    """tests/fixtures/k8s.py's `preempted` state (condition only, no token): still named a preemption."""
    j = k8s.job("train", suspend=True)
    d = diagnose([j, k8s.workload(j, state="preempted")], "train")
    p = d.phase(PHASE)
    assert p.preemption is not None and p.preemption.reason == "InClusterQueue"
    assert p.kueue_reason is None  # reason Pending: older Kueue
