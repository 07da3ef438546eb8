"""SPEC §3: later evidence proves earlier phases; a retrying RayJob's verdict is in RayJob status.

Partial pastes as people make them in public issue threads: `kubectl get
jobs,pods -o yaml` without the Workload, a RayJob without its pods. Object
shapes come from tests/fixtures/k8s.py (batch/v1 Job, KubeRay v1 RayJob
status fields `jobDeploymentStatus`/`jobStatus`/`failed`, kubelet pod
statuses), each builder citing its source.
"""

from __future__ import annotations

from datetime import timedelta

from tests.fixtures import k8s
from workers.diagnosis.evaluate import evaluate

NOW = k8s.T0 + timedelta(minutes=30)


def test_a_running_job_pasted_without_its_workload_was_admitted_not_waiting_for_the_queue() -> None:
    job = k8s.job("llama-ft-7b", suspend=False, active=1)
    pod = k8s.job_pod(job, node="gpu-node-1", phase="Running", containers=[k8s.running()])
    d = evaluate([job, pod], "llama-ft-7b", NOW, k8s.NS)
    admission = d.phase("Kueue admission")
    assert admission.state.value == "done" and admission.reason == "quota.proven"
    assert "Workload not in the snapshot; running pods prove admission" == admission.summary
    assert d.owner != "queue-owner" and d.first_incomplete is None and d.layer == 7


def test_a_suspended_job_without_a_workload_is_still_waiting_contradicting_evidence_wins() -> None:
    job = k8s.job("llama-ft-7b", suspend=True)
    d = evaluate([job], "llama-ft-7b", NOW, k8s.NS)
    assert d.first_incomplete == "Kueue admission" and d.phase("Kueue admission").state.value == "pending"


def test_gated_pods_prove_nothing_about_admission() -> None:
    job = k8s.job("llama-ft-7b", suspend=False)
    pod = k8s.job_pod(job, phase="Pending", scheduling_gates=["kueue.x-k8s.io/admission"])
    d = evaluate([job, pod], "llama-ft-7b", NOW, k8s.NS)
    assert d.first_incomplete == "Kueue admission"


def test_a_rayjob_whose_application_failed_without_its_pods_is_the_researchers_not_the_node_pools() -> None:
    # KubeRay reports jobStatus FAILED before jobDeploymentStatus moves on (reference/kuberay-status.md).
    rj = k8s.rayjob("ray-pretrain-13b", job_status="FAILED", deployment_status="Running",
                    message="Job entrypoint command failed with exit code 1")
    d = evaluate([rj], "ray-pretrain-13b", NOW, k8s.NS)
    assert d.first_incomplete == "RayJob status" and d.owner == "researcher"
    assert d.phase("RayCluster").reason == "raycluster.proven"
    assert all(d.phase(p).state.value in ("done", "skipped") for p in
               ("Kueue admission", "Pod scheduling", "Image pull", "Container start", "Ready"))


def test_a_running_rayjob_pasted_alone_answers_with_its_progress() -> None:
    rj = k8s.rayjob("ray-pretrain-13b", job_status="RUNNING", deployment_status="Running")
    d = evaluate([rj], "ray-pretrain-13b", NOW, k8s.NS)
    assert d.first_incomplete == "RayJob status" and d.phase("RayJob status").state.value == "active"
    assert d.phase("Pod scheduling").summary.startswith("pods not in the snapshot")


def test_a_retrying_rayjob_is_judged_by_its_failed_attempt_not_blamed_on_the_raycluster() -> None:
    rj = k8s.rayjob("ray-pretrain-13b", job_status="FAILED", deployment_status="Retrying", failed=1,
                    message="Job entrypoint command failed with exit code 1")
    d = evaluate([rj], "ray-pretrain-13b", NOW, k8s.NS)
    assert d.first_incomplete == "RayJob status" and d.phase("RayJob status").state.value == "warning"
    assert d.owner == "researcher"
    for name in ("RayCluster", "Pod scheduling", "Image pull", "Container start", "Ready"):
        phase = d.phase(name)
        assert (phase.state.value, phase.summary) == ("skipped", "re-created for attempt 2"), name


def test_once_the_new_attempts_raycluster_exists_its_phases_are_judged_as_usual() -> None:
    rj = k8s.rayjob("ray-pretrain-13b", job_status="PENDING", deployment_status="Initializing", failed=1)
    rc = k8s.raycluster(rayjob=rj)
    rj["status"]["rayClusterName"] = rc["metadata"]["name"]
    head = k8s.ray_pod(rc, "head", phase="Pending", conditions=k8s.cond_unschedulable())
    d = evaluate([rj, rc, head], "ray-pretrain-13b", NOW, k8s.NS)
    assert d.phase("RayCluster").reason.startswith("sched.")
    assert d.owner == "node-pool-owner"


def test_a_succeeded_run_is_told_it_succeeded_not_sent_to_check_its_log() -> None:
    """batch/v1 Job with Complete=True (k8s.job_complete: the Job controller's conditions)."""
    job = k8s.job("llama-ft-7b", succeeded=1, conditions=k8s.job_complete(k8s.T0, 1800))
    d = evaluate([job], "llama-ft-7b", NOW, k8s.NS)
    assert d.first_incomplete is None and d.next_action.startswith("The run succeeded")
    assert "check the driver" not in d.next_action and d.recovery and d.recovery.action == "none"
