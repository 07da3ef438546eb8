"""Kueue admission (layer 4): both API versions, both reason vocabularies, checks, eviction.

Workload shapes: tests/fixtures/k8s.py `workload` (Kueue docs troubleshooting_jobs.md,
preemption.md and the v1beta2 Go types, via reference/kueue-workload-status.md).
"""

from __future__ import annotations

import pytest

from tests.fixtures import k8s

from .helpers import Case

PHASE = "Kueue admission"


def job_with(state: str, version: str = "kueue.x-k8s.io/v1beta2", **kw) -> list[dict]:
    j = k8s.job("train", suspend=state not in ("admitted", "finished"))
    return [j, k8s.workload(j, version, state=state, **kw)]


def rayjob_with(state: str, version: str = "kueue.x-k8s.io/v1beta2") -> list[dict]:
    rj = k8s.rayjob("train", job_status="", deployment_status="Suspended", suspend=True)
    return [rj, k8s.workload(rj, version, state=state)]


def unmanaged() -> list[dict]:
    j = k8s.job("train", queue=None)
    return [j, k8s.job_pod(j)]


def suspended_no_workload() -> list[dict]:
    return [k8s.job("train", suspend=True)]


def two_workloads_one_admitted() -> list[dict]:
    # Kueue's pod integration: one Workload per pod group, owned by the pods.
    j = k8s.job("train")
    p1, p2 = k8s.job_pod(j, 0, node=None), k8s.job_pod(j, 1, node=None)
    w1 = k8s.workload(j, state="admitted")
    w2 = k8s.workload(j, state="waiting_for_quota")
    for wl, owner in ((w1, p1), (w2, p2)):
        wl["metadata"]["name"] = f"pod-{owner['metadata']['name']}-3f2a1"
        wl["metadata"]["ownerReferences"] = [k8s.owner_ref(owner)]
        wl["metadata"]["labels"].pop(k8s.KUEUE_JOB_UID_LABEL, None)
    return [j, p1, p2, w1, w2]


def deactivated(reason: str) -> list[dict]:
    """Kueue's deactivation: spec.active=false and Evicted with a Deactivated… reason
    (workload_controller.go: "The workload is deactivated due to exceeding the maximum number of
    re-queuing retries"; reference/stalls.md §3.3)."""
    j = k8s.job("train", suspend=True)
    wl = k8s.workload(j, state="pending")
    wl["spec"]["active"] = False
    wl["status"]["conditions"].append({
        "type": "Evicted", "status": "True", "reason": reason, "lastTransitionTime": "2026-11-30T10:20:00Z",
        "message": "The workload is deactivated due to exceeding the maximum number of re-queuing retries"})
    return [j, wl]


def inactive_local_queue() -> list[dict]:
    j = k8s.job("train", suspend=True)
    lq = k8s.local_queue("team-a", active=False)
    return [j, k8s.workload(j, state="pending"), lq]


CASES = [
    Case("admitted-v1beta2", lambda: job_with("admitted"), PHASE, "done",
         summary="1/1 admitted queue=team-a"),
    Case("admitted-v1beta1", lambda: job_with("admitted", "kueue.x-k8s.io/v1beta1"), PHASE, "done"),
    Case("finished", lambda: job_with("finished"), PHASE, "done"),
    Case("legacy-pending-quota", lambda: job_with("pending"), PHASE, "pending",
         summary="0/1 admitted queue=team-a reason=Pending", first=PHASE, owner="queue-owner",
         transient=True, layer=4),
    Case("granular-waiting-for-quota", lambda: job_with("waiting_for_quota"), PHASE, "pending",
         summary="reason=WaitingForQuota", owner="queue-owner", transient=True),
    Case("v1beta1-waiting", lambda: job_with("waiting_for_quota", "kueue.x-k8s.io/v1beta1"), PHASE,
         "pending", owner="queue-owner"),
    Case("exceeds-max-granular", lambda: job_with("exceeds_max"), PHASE, "warning",
         summary="reason=ExceedsMaxQuota", owner="queue-owner", transient=False),
    Case("exceeds-max-legacy-message", lambda: job_with("exceeds_max_legacy"), PHASE, "warning",
         summary="maximum", owner="queue-owner", transient=False),
    Case("inadmissible-legacy", lambda: job_with("inadmissible"), PHASE, "warning",
         summary="reason=Inadmissible", owner="platform", transient=False),
    Case("misconfigured-granular", lambda: job_with("misconfigured"), PHASE, "warning",
         owner="platform", transient=False),
    Case("admission-check-pending", lambda: job_with("admission_check_pending"), PHASE, "active",
         summary="admission check dws-prov", owner="queue-owner", transient=True),
    Case("admission-check-rejected", lambda: job_with("admission_check_rejected"), PHASE, "warning",
         owner="queue-owner", transient=False),
    Case("preempted", lambda: job_with("preempted"), PHASE, "warning",
         summary="capacity was reclaimed for other work", owner="queue-owner", transient=True),
    Case("cluster-queue-stopped", lambda: job_with("cluster_queue_stopped"), PHASE, "warning",
         summary="the platform stopped the queue", owner="platform", transient=False),
    Case("pods-ready-timeout", lambda: job_with("pods_ready_timeout"), PHASE, "warning",
         summary="PodsReadyTimeout"),
    Case("not-managed-by-kueue", unmanaged, PHASE, "skipped"),
    Case("suspended-no-workload", suspended_no_workload, PHASE, "pending",
         summary="no Workload yet", owner="queue-owner"),
    Case("rayjob-waiting", lambda: rayjob_with("waiting_for_quota"), PHASE, "pending",
         first=PHASE, owner="queue-owner"),
    Case("rayjob-exceeds-max-v1beta1", lambda: rayjob_with("exceeds_max", "kueue.x-k8s.io/v1beta1"),
         PHASE, "warning", owner="queue-owner", transient=False),
    Case("pod-integration-1-of-2", two_workloads_one_admitted, PHASE, "pending",
         summary="1/2 admitted"),
    Case("local-queue-inactive", inactive_local_queue, PHASE, "warning", owner="platform"),
    # SPEC §3: deactivation is not transient — Kueue never requeues it.
    Case("deactivated-requeuing-limit", lambda: deactivated("DeactivatedDueToRequeuingLimitExceeded"), PHASE,
         "warning", owner="queue-owner", transient=False, summary="deactivated"),
    Case("deactivated-admission-check", lambda: deactivated("DeactivatedDueToAdmissionCheck"), PHASE,
         "warning", owner="queue-owner", transient=False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_admission(case: Case) -> None:
    case.check()


def test_admitted_does_not_claim_pods_run() -> None:
    d = Case("x", lambda: job_with("admitted"), PHASE, "done").check()
    assert "does not prove pods run" in d.phase(PHASE).summary
    assert d.phase("Pod scheduling").state.value == "pending"


def test_kueue_gated_pod_is_queued_not_failing() -> None:
    j = k8s.job("train")
    gated = k8s.job_pod(j, node=None, scheduling_gates=[k8s.KUEUE_ADMISSION_GATE])
    d = Case("gated", lambda: [j, k8s.workload(j, state="waiting_for_quota"), gated], PHASE,
             "pending", first=PHASE, owner="queue-owner").check()
    assert d.phase("Pod scheduling").state.value == "pending"
