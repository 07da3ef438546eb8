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
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity
from workers.render.cards import build_phase_card, card_texts, phase_tree_text, queue_line, render_phase_card
from workers.render.tree_text import render_text

from .conftest import write_descriptor

NOW = k8s.T0 + timedelta(minutes=30)
ALICE = Identity(user="alice@example.com", groups=("team-vision", "gpu-users"))
CQ = "h100-shared"
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/team-vision/localqueues/team-a/pendingworkloads"
CQ_VISIBILITY = f"/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/{CQ}/pendingworkloads"
CQ_OBJECT = f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{CQ}"
NLP_WORKLOAD = "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-nlp/workloads/"


def queued(name: str, at: float, ns: str = k8s.NS, queue: str = "team-a", gpus: int = 8,
           parallelism: int = 1) -> list[dict]:
    """A suspended Job and its Workload waiting for quota (kueue WaitingForQuota shape)."""
    job = k8s.job(name, ns, queue=queue, suspend=True, gpus=gpus, parallelism=parallelism, at=at)
    return [job, k8s.workload(job, state="waiting_for_quota", cluster_queue=CQ, flavor="h100", at=at)]


def cluster() -> list[dict]:
    """Ahead of `train`: one Workload of team-nlp (another LocalQueue of the same ClusterQueue)
    and one of team-vision asking for 2 pods × 8 GPUs; behind it, one more of team-vision. The
    ClusterQueue has 64 GPUs of flavour h100, 56 of them reserved (kueue's ClusterQueue shape,
    flavorsReservation / resourceGroups nominalQuota)."""
    return [
        k8s.tau_workspace("vision"), k8s.pvc(),
        k8s.local_queue("team-a", cluster_queue=CQ, pending=3),
        k8s.local_queue("nlp", ns="team-nlp", cluster_queue=CQ, pending=1),
        k8s.cluster_queue(CQ, gpu_quota=64, gpu_used=56, flavor="h100", pending=4),
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


async def test_position_in_the_cluster_queue_gpus_ahead_and_free_quota(tmp_path: Path) -> None:
    report, requests, rounds = await status(tmp_path)
    d = report.diagnosis
    assert d.phase("Kueue admission").reason == "quota.waiting"
    # The card's first screen: the position, what the ones ahead ask for, the free quota; then, on a
    # line of its own, the start estimate (issue 35): the ClusterQueue reports 56 GPUs reserved, and the
    # cluster-wide list of its holders (one more request, in round 2) names none: no time.
    first = ("*Queue:* 3rd of 4 in ClusterQueue h100-shared (2nd of 3 in your LocalQueue team-a); the 2 "
             "ahead of you ask for 24 GPUs; 8 of 64 nvidia.com/gpu free in flavour h100")
    start = "*Start:* unknown: 56 GPUs reserved by no Workload you could read"
    assert queue_line(d) == f"{first} · more in *Details*\n{start}"
    card = render_phase_card(build_phase_card(d, workspace="vision", operator_hints_allowed=False))
    # beside the evidence here: the position and the start (the GPUs ahead and the quota are in *Details*)
    shown = "\n".join(card_texts(card.blocks))
    assert "*Queue:* 3rd of 4 in ClusterQueue h100-shared (2nd of 3 in your LocalQueue team-a) · more in " \
        f"*Details*\n{start}" in shown
    line = phase_tree_text(d)
    assert first.removeprefix("*Queue:* ") in line
    assert f"{start}\n• unknown: 56 reserved nvidia.com/gpu in flavour h100 are held by no Workload" in line
    assert "queue: 3rd of 4 in ClusterQueue h100-shared (2nd of 3 in your LocalQueue team-a); the 2 ahead" \
        in render_text(d)
    qp = d.contract()["queue_position"]
    assert (qp["position_in_cluster_queue"], qp["pending_in_cluster_queue"], qp["position_in_local_queue"],
            qp["gpus_ahead"], qp["gpus_ahead_in_cluster_queue"], qp["unreadable_ahead"]) == (3, 4, 2, 16, 24, 0)
    assert qp["free_quota"] == [{"flavor": "h100", "resource": "nvidia.com/gpu", "nominal": 64.0,
                                 "reserved": 56.0, "borrowed": 0.0}]
    assert qp["ahead_in_local_queue"] == [k8s.workload_name(k8s.job("sweep-7", at=20))]
    [read] = [r for r in requests if r.path == VISIBILITY]
    assert [r.path for r in requests if r.path in (CQ_VISIBILITY, CQ_OBJECT)] != []
    assert {r.path for r in requests if r.path in (CQ_VISIBILITY, CQ_OBJECT)} == {CQ_VISIBILITY, CQ_OBJECT}
    [nlp] = [r for r in requests if r.path.startswith(NLP_WORKLOAD)]  # the one ahead in another namespace
    assert_impersonated(requests)
    assert read.identity.user == ALICE.user
    # A fresh process knows no ClusterQueue for team-a: the LocalQueue is read with the run (round 1,
    # as the user), so round 2 reads the LocalQueue's list with the run's objects and, with them, the
    # ClusterQueue's list and quota, the Workloads holding its quota and the ResourceFlavors (issue 35);
    # round 3 the Workload ahead in team-nlp (and the flavour's nodes, when a ResourceFlavor names
    # them: none here). Three rounds (four before issue 35), 13 requests (12 before the flavours).
    assert rounds == 3, [(r.round, r.path) for r in requests]
    [holders] = [r for r in requests if r.query.get("fieldSelector") == f"status.admission.clusterQueue={CQ}"]
    [local_queue] = [r for r in requests if r.path.endswith("/localqueues/team-a")]
    [flavors] = [r for r in requests if r.path.endswith("/resourceflavors")]
    assert (local_queue.round, read.round, holders.round, flavors.round, nlp.round) == (1, 2, 2, 2, 3)
    assert len(requests) == 13 and report.requests == 13


async def test_team_rbac_hides_the_other_namespaces_requests(tmp_path: Path) -> None:
    """A team's Role reads its own Workloads only: the one ahead in team-nlp is said unreadable,
    and the GPUs ahead are a lower bound."""
    report, requests, _ = await status(
        tmp_path, lambda emu: emu.forbid("get", "workloads", user=ALICE.user, namespace="team-nlp"))
    line = phase_tree_text(report.diagnosis)
    assert ("3rd of 4 in ClusterQueue h100-shared (2nd of 3 in your LocalQueue team-a); the 2 ahead of "
            "you ask for at least 16 GPUs (1 of them in namespaces whose Workloads you may not read)") in line
    assert report.diagnosis.contract()["queue_position"]["unreadable_ahead"] == 1


async def test_only_the_workloads_ahead_of_the_run_are_read(tmp_path: Path) -> None:
    """A Workload of another namespace behind the run (but ahead of eval-late, in the same
    LocalQueue as the run) is not read: the run's own entry in the ClusterQueue's list is found by
    its ownerReferences (Kueue copies them, pkg/visibility/storage/utils.go)."""
    objects = [*cluster(), *queued("nlp-late", 35, ns="team-nlp", queue="nlp")]
    report, requests, _ = await status(tmp_path, objects=objects)
    [nlp] = [r.path for r in requests if r.path.startswith(NLP_WORKLOAD)]
    assert nlp == NLP_WORKLOAD + k8s.workload_name(k8s.job("nlp-pretrain", "team-nlp", at=10))
    assert report.diagnosis.contract()["queue_position"]["pending_in_cluster_queue"] == 5


async def test_cluster_queue_denied_says_unavailable_never_a_guess(tmp_path: Path) -> None:
    """No kueue-pending-workloads-cq-viewer and no `get clusterqueues`: the LocalQueue's answer stays,
    the ClusterQueue's list and free quota are `unavailable` with the reason."""
    def deny(emu: KubeEmulator) -> None:
        emu.forbid("get", "clusterqueues", user=ALICE.user, subresource="pendingworkloads")
        emu.forbid("get", "clusterqueues", user=ALICE.user)

    report, requests, _ = await status(tmp_path, deny)
    d = report.diagnosis
    assert queue_line(d) == ("*Queue:* 3rd in ClusterQueue h100-shared (2nd of 3 in your LocalQueue team-a); "
                             "the 1 ahead of you in it asks for 16 GPUs; 1 more ahead from other LocalQueues "
                             "(their requests are not visible to you) · more in *Details*")
    line = phase_tree_text(d)
    assert ("the ClusterQueue's pending list unavailable: permission denied (get clusterqueues/pendingworkloads "
            "in visibility.kueue.x-k8s.io); the queue owner grants it (Kueue's kueue-pending-workloads-cq-viewer "
            "ClusterRole)") in line
    assert "free quota unavailable: permission denied (get clusterqueues in kueue.x-k8s.io)" in line
    assert " of 4 " not in line and "free in flavour" not in line
    qp = d.contract()["queue_position"]
    assert (qp["pending_in_cluster_queue"], qp["free_quota"]) == (None, [])
    assert not [r for r in requests if r.path.startswith(NLP_WORKLOAD)]  # no list: nothing ahead to read


async def test_kueue_with_only_the_v1alpha1_visibility_api(tmp_path: Path) -> None:
    """Kueue v0.6–v0.9 served visibility.kueue.x-k8s.io/v1alpha1 only (v1beta1 since v0.9,
    v1alpha1 removed in v0.10 by kubernetes-sigs/kueue#3499): a 404 for v1beta1 is asked again there."""
    report, requests, _ = await status(
        tmp_path, lambda emu: emu.serve_versions("visibility.kueue.x-k8s.io", ["v1alpha1"]))
    line = phase_tree_text(report.diagnosis)
    assert "3rd of 4 in ClusterQueue h100-shared (2nd of 3 in your LocalQueue team-a)" in line, line
    paths = [r.path for r in requests if "visibility.kueue" in r.path]
    # The ClusterQueue's name is known from round 1, so its list is asked for at v1beta1 with the
    # LocalQueue's; both 404 and are asked again at v1alpha1.
    assert sorted(paths) == sorted([VISIBILITY, CQ_VISIBILITY, VISIBILITY.replace("v1beta1", "v1alpha1"),
                                    CQ_VISIBILITY.replace("v1beta1", "v1alpha1")])
    assert_impersonated(requests)


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
    assert ("*Queue:* unavailable: this cluster's Kueue does not serve its visibility API "
            "(visibility.kueue.x-k8s.io v1beta1 or v1alpha1: Kueue before v0.6, or VisibilityOnDemand off)") \
        in line, line
    assert "not found" not in line
    # The LocalQueue's list at v1beta1, then v1alpha1; the ClusterQueue's (its name known from round 1)
    # at v1beta1 with the LocalQueue's: without a LocalQueue list there is no place to say.
    assert len([r for r in requests if "visibility.kueue" in r.path]) == 3
    assert_impersonated(requests)


async def test_admitted_run_reads_no_queue(tmp_path: Path) -> None:
    """A run Kueue admitted is not suspended: no visibility read, no queue line. A process that does
    not know the LocalQueue's ClusterQueue yet reads the LocalQueue with the run (round 1, before it
    knows the run's state: issue 35) and learns it; once known, a status reads nothing of the queue."""
    job = k8s.job("train", suspend=False, at=30, start_at=60)
    objs = [k8s.tau_workspace("vision"), k8s.pvc(), k8s.local_queue("team-a", cluster_queue=CQ),
            job, k8s.workload(job, state="admitted", cluster_queue=CQ, at=30)]
    async with KubeEmulator(objs, latency=0.05) as emu:
        write_descriptor(tmp_path, emu.base_url)
        for hint_known in (False, True):
            emu.clear_requests()
            report = await diagnose_live(load_descriptors(tmp_path), run="train", identity=ALICE, now=NOW,
                                         workspace="vision")
            assert report.diagnosis.queue_position is None
            assert "*Queue:*" not in phase_tree_text(report.diagnosis)
            requests = list(emu.requests)
            assert not [r for r in requests if "visibility.kueue" in r.path or "clusterqueues" in r.path]
            learnt = [r.round for r in requests if "localqueues" in r.path]
            assert learnt == ([] if hint_known else [1]), learnt
            assert emu.rounds() == 2


def test_shell_demo_prints_the_queue_line() -> None:
    """`taubot shell --demo` (its in-process emulator serves the visibility API too) tells a true queue
    (issue 35): the ClusterQueue reserves what its admitted Workloads hold (136 of 144 GPUs). The waiting
    run's place and start — at the latest when the holders' time limits free enough, and, once a status
    of ray-pretrain-live has computed its training ETA, earliest then; the preempted run's card names
    what took its place, the priorities, and again its own place and start; the run too big for its
    ClusterQueue is a warning whose next action says the numbers (SPEC §5b)."""
    runs = ("llama-ft-queued", "ray-sweep-preempted", "ray-pretrain-huge", "ray-pretrain-live", "llama-ft-queued")
    done = subprocess.run([sys.executable, "-m", "workers.cli", "shell", "--demo"],
                          input="".join(f"/tau status {r}\n" for r in runs), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    queued, preempted, huge, live, again = done.stdout.split("› /tau status ")[1:]
    # ray-sweep-preempted (priority 100, issue 35) waits ahead of it in the same ClusterQueue.
    assert "Queue: 2nd of 4 in ClusterQueue cluster-queue (2nd of 4 in your LocalQueue vision-default)" in queued
    # urgent-eval's 2 h limit frees 16 GPUs by 12:00 (the preempted run takes them), resnet-hang's 4 h 16
    # more by 13:00, llama-ft-xid's 6 h the last 16 it needs by 15:00
    assert ("Start: at the latest 15:00 UTC (the holders' time limits) — preemption, fair sharing and "
            "borrowing can change it") in queued
    assert "reason=Preempted: preempted by Job/urgent-eval in /cluster-queue, priority 1000 over yours 100" \
        in preempted
    assert "Queue: 1st of 4 in ClusterQueue cluster-queue (1st of 4 in your LocalQueue vision-default)" in preempted
    assert "Start: at the latest 12:00 UTC (the holders' time limits)" in preempted
    assert "First incomplete: Kueue admission (warning)" in huge and "Transient: no" in huge
    assert ("Next: The run asks for 160 nvidia.com/gpu; ClusterQueue cluster-queue can grant at most 144 in "
            "flavour a100 (its nominal quota 144, no cohort to borrow from): request fewer resources") in huge
    assert "ETA: ends about 2026-11-30 13:41 UTC" in live
    # ray-pretrain-live (team-vision, whose logs alice may read) ends about 13:41: then its 16 are free
    assert ("Start: earliest ≈ 13:41 UTC (when ray-pretrain-live's ETA frees 16 GPUs), at the latest 15:00 UTC "
            "(the holders' time limits)") in again


async def test_a_watch_ticks_read_names_the_same_place_without_listing_the_namespace(tmp_path: Path) -> None:
    """Issue 28: a watch re-reads a waiting run's place every few ticks; listing every Workload of a
    namespace each time made 1,000 watched runs cost the square of their number. A tick reads the
    ones ahead by name instead (the LocalQueue's with those of other namespaces) and must say
    exactly what the status says."""
    status_report, _, _ = await status(tmp_path)
    async with KubeEmulator(cluster(), latency=0.05) as emu:
        write_descriptor(tmp_path, emu.base_url)
        tick = await diagnose_live(load_descriptors(tmp_path), run="train", identity=ALICE, now=NOW,
                                   workspace="vision", list_namespace_workloads=False)
        requests = list(emu.requests)
    assert tick.diagnosis.contract()["queue_position"] == status_report.diagnosis.contract()["queue_position"]
    listed = [r for r in requests if r.path == "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-vision/workloads"
              and "labelSelector" not in r.query]
    assert listed == []
    sweep = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/team-vision/workloads/{k8s.workload_name(k8s.job('sweep-7', at=20))}"
    assert [r.method for r in requests if r.path == sweep] == ["GET"]  # the one ahead here, by name
    assert [r for r in requests if r.path.startswith(NLP_WORKLOAD)]  # and the one ahead elsewhere
    assert_impersonated(requests)
