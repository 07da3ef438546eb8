"""A waiting run's place in its Kueue queue, read live from the visibility API under impersonation.

The emulator computes Kueue's `PendingWorkloadsSummary` (apis/visibility/v1beta1/types.go) from the
stored Workloads and LocalQueues as Kueue's queue manager orders them; these tests read what the
user reads (the card's line, the CLI tree, `--format json`) and what the API server received.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from workers.collect.investigate import diagnose_live
from workers.kube.client import Identity
from workers.render.cards import build_phase_card, card_texts, phase_tree_text, queue_line, render_phase_card
from workers.render.tree_text import render_text
from workers.workspaces import load_descriptors

from .conftest import write_descriptor

NOW = k8s.T0 + timedelta(minutes=30)
ALICE = Identity(user="alice@example.com", groups=("team-vision", "gpu-users"))
CQ = "h100-shared"
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/team-vision/localqueues/team-a/pendingworkloads"


def queued(name: str, at: float, ns: str = k8s.NS, queue: str = "team-a", gpus: int = 8,
           parallelism: int = 1) -> list[dict]:
    """A suspended Job and its Workload waiting for quota (kueue WaitingForQuota shape)."""
    job = k8s.job(name, ns, queue=queue, suspend=True, gpus=gpus, parallelism=parallelism, at=at)
    return [job, k8s.workload(job, state="waiting_for_quota", cluster_queue=CQ, at=at)]


def cluster() -> list[dict]:
    """Ahead of `train`: one Workload of team-nlp (another LocalQueue of the same ClusterQueue)
    and one of team-vision asking for 2 pods × 8 GPUs; behind it, one more of team-vision."""
    return [
        k8s.tau_workspace("vision"), k8s.pvc(),
        k8s.local_queue("team-a", cluster_queue=CQ, pending=3),
        k8s.local_queue("nlp", ns="team-nlp", cluster_queue=CQ, pending=1),
        k8s.cluster_queue(CQ, gpu_quota=16, gpu_used=16, pending=4),
        *queued("nlp-pretrain", 10, ns="team-nlp", queue="nlp"),
        *queued("sweep-7", 20, parallelism=2),
        *queued("train", 30),
        *queued("eval-late", 40, gpus=1),
    ]


async def status(tmp_path: Path, setup=None, objects: list[dict] | None = None):
    async with KubeEmulator(objects or cluster(), latency=0.05) as emu:
        if setup:
            setup(emu)
        write_descriptor(tmp_path, emu.base_url)
        report = await diagnose_live(load_descriptors(tmp_path), run="train", identity=ALICE, now=NOW,
                                     workspace="vision")
        return report, list(emu.requests), emu.rounds()


def assert_impersonated(requests) -> None:
    for req in requests:
        assert req.headers.getall("Impersonate-User") == [ALICE.user], req.path
        assert req.headers.getall("Impersonate-Group") == list(ALICE.groups), req.path


async def test_position_gpus_ahead_and_no_start_time_within_two_rounds(tmp_path: Path) -> None:
    report, requests, rounds = await status(tmp_path)
    d = report.diagnosis
    assert d.phase("Kueue admission").reason == "quota.waiting"
    # The card's first screen: the position; *Details* and the terminal: what the ones ahead ask.
    assert queue_line(d) == ("*Queue:* 3rd in ClusterQueue h100-shared (2nd of 3 in your LocalQueue team-a) · "
                             "more in *Details*")
    card = render_phase_card(build_phase_card(d, workspace="vision", operator_hints_allowed=False))
    assert queue_line(d) in "\n".join(card_texts(card.blocks))  # it fits beside the evidence here
    line = phase_tree_text(d)
    assert ("*Queue:* 3rd in ClusterQueue h100-shared (2nd of 3 in your LocalQueue team-a); the 1 ahead "
            "of you in it asks for 16 GPUs; 1 more ahead from other LocalQueues") in line
    assert "start time unknown: Kueue does not know when the running workloads end" in line
    assert "queue: 3rd in ClusterQueue h100-shared (2nd of 3 in your LocalQueue team-a); the 1 ahead" \
        in render_text(d)
    qp = d.contract()["queue_position"]
    assert (qp["position_in_cluster_queue"], qp["position_in_local_queue"], qp["gpus_ahead"]) == (3, 2, 16)
    assert qp["ahead_in_local_queue"] == [k8s.workload_name(k8s.job("sweep-7", at=20))]
    [read] = [r for r in requests if r.path == VISIBILITY]
    assert_impersonated(requests)
    assert read.identity.user == ALICE.user
    # Issue 28: decided before layer 5, so two rounds; the queue reads join round 2 (5 → 8 requests).
    assert rounds == 2, [(r.round, r.path) for r in requests]
    assert len(requests) == 8 and report.requests == 8


async def test_forbidden_visibility_says_why(tmp_path: Path) -> None:
    report, requests, rounds = await status(
        tmp_path, lambda emu: emu.forbid("get", "localqueues", user=ALICE.user, subresource="pendingworkloads"))
    line = queue_line(report.diagnosis)
    assert line == ("*Queue:* unavailable: permission denied (get localqueues/pendingworkloads in "
                    "visibility.kueue.x-k8s.io)")
    assert "kueue-pending-workloads-lq-viewer" in phase_tree_text(report.diagnosis)
    assert "3rd" not in line and "GPUs" not in line
    assert report.diagnosis.contract()["queue_position"]["position_in_cluster_queue"] is None
    assert [r.path for r in requests if r.path == VISIBILITY]
    assert_impersonated(requests)
    assert rounds == 2


async def test_kueue_without_visibility_api(tmp_path: Path) -> None:
    """Kueue before v0.9 (or VisibilityOnDemand off): the group is not served, a 404."""
    report, requests, _ = await status(
        tmp_path, lambda emu: emu.serve_versions("visibility.kueue.x-k8s.io", []))
    line = phase_tree_text(report.diagnosis)
    assert "*Queue:* unavailable: this cluster's Kueue does not serve its visibility API" in line, line
    assert "not found" not in line
    assert_impersonated(requests)


async def test_admitted_run_reads_no_queue(tmp_path: Path) -> None:
    """A run Kueue admitted is not suspended: no visibility read, no queue line."""
    job = k8s.job("train", suspend=False, at=30, start_at=60)
    objs = [k8s.tau_workspace("vision"), k8s.pvc(), k8s.local_queue("team-a", cluster_queue=CQ),
            job, k8s.workload(job, state="admitted", cluster_queue=CQ, at=30)]
    report, requests, _ = await status(tmp_path, objects=objs)
    assert report.diagnosis.queue_position is None
    assert "*Queue:*" not in phase_tree_text(report.diagnosis)
    assert not [r for r in requests if "visibility.kueue" in r.path or "localqueues" in r.path]


def test_shell_demo_prints_the_queue_line() -> None:
    """`taubot shell --demo` (its in-process emulator serves the visibility API too)."""
    done = subprocess.run([sys.executable, "-m", "workers.cli", "shell", "--demo"],
                          input="/tau status llama-ft-queued\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Queue: 1st in ClusterQueue cluster-queue (1st of 3 in your LocalQueue team-a)" in done.stdout
