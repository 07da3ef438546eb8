"""Kueue's whole answer, read live (issue 35): the preemptor and the holders of a ClusterQueue's quota,
each read under the user's impersonation through the emulator over real HTTP.

Shapes: the preemption message, event and conditions as pkg/scheduler/preemption/preemption.go
writes them; `spec.maximumExecutionTimeSeconds` and the Workload CRD's selectable field
`status.admission.clusterQueue` as apis/kueue/v1beta2/workload_types.go declares them (see
docs/reference/kueue-verified.md). A team's RBAC is the emulator's `forbid(..., cluster_scope=True)`:
its own namespace yes, the cluster-wide list no.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from redis import Redis

from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from workers.collect.investigate import diagnose_live
from workers.collect.kueue import position_from, read_queue
from workers.collect.kueue_forecast import read_holders, read_preemption, with_estimate, with_preemptor
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity, KubeClients
from workers.kube.reader import KubeReader
from workers.render.forecast import queue_position_text, start_text

from .conftest import write_descriptor

NOW = k8s.T0 + timedelta(minutes=30)
ALICE = Identity(user="alice@example.com", groups=("team-vision", "gpu-users"))
CQ = "h100-shared"
PHASE = "Kueue admission"


def flavor_and_nodes(gpus: int = 8) -> list[dict]:
    """ResourceFlavor h100 (Kueue v1beta2 resourceflavor_types.go: `spec.nodeLabels`, which Kueue adds to
    the admitted pods' node affinity) and its two nodes, as `kubectl get node -o json` prints them."""
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
              "metadata": {"name": "h100", "uid": "5a1c0d7e-0000-4000-8000-000000000001",
                           "creationTimestamp": "2026-10-31T10:00:00Z"},
              "spec": {"nodeLabels": {"kubernetes.azure.com/agentpool": "h100"}}}
    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": f"aks-h100-{i}", "uid": f"5a1c0d7e-0000-4000-8000-00000000010{i}",
                           "labels": {"kubernetes.io/hostname": f"aks-h100-{i}",
                                      "kubernetes.azure.com/agentpool": "h100"}},
              "status": {"allocatable": {"cpu": "95", "memory": "1730000000Ki", "nvidia.com/gpu": str(gpus),
                                         "pods": "110"}}} for i in range(2)]
    cpu = {"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": "aks-cpu-0", "uid": "5a1c0d7e-0000-4000-8000-000000000200",
                        "labels": {"kubernetes.io/hostname": "aks-cpu-0", "kubernetes.azure.com/agentpool": "cpu"}},
           "status": {"allocatable": {"cpu": "95", "memory": "1730000000Ki", "pods": "110"}}}
    return [flavor, *nodes, cpu]


def preempted_cluster() -> list[dict]:
    """train (priority 100, team-vision) preempted by urgent-eval (priority 1000, namespace research)."""
    j = k8s.job("train", suspend=True)
    wl = k8s.workload(j, state="preempted", cluster_queue=CQ, flavor="h100", priority=100)
    urgent = k8s.job("urgent-eval", ns="research", queue="research")
    pre = k8s.workload(urgent, cluster_queue=CQ, flavor="h100", priority=1000)
    text = (f"Preempted to accommodate a workload (UID: {pre['metadata']['uid']}, JobUID: "
            f"{urgent['metadata']['uid']}) due to prioritization in the ClusterQueue; preemptor path: "
            f"/{CQ}; preemptee path: /{CQ}")
    for c in wl["status"]["conditions"]:
        if c["type"] in ("Evicted", "Preempted", "Requeued"):
            c["message"] = text
        if c["type"] == "QuotaReserved":  # requeued, waiting for the flavour of its ClusterQueue
            c["reason"], c["message"] = "WaitingForQuota", c["message"].replace("flavor a100", "flavor h100")
    event = k8s.event_v1_events(wl, "Preempted", text + "; preemptor effective priority: 1000 (base: 1000, "
                                "boost: 0); preemptee effective priority: 100 (base: 100, boost: 0)",
                                type="Normal", first=600, reporting_controller="kueue-admission")
    return [k8s.tau_workspace("vision"), k8s.pvc(), k8s.local_queue("team-a", cluster_queue=CQ),
            k8s.local_queue("research", ns="research", cluster_queue=CQ),
            k8s.cluster_queue(CQ, gpu_quota=16, gpu_used=16, flavor="h100"), j, wl, urgent, pre, event,
            *flavor_and_nodes()]


async def _reader_session(tmp_path: Path, emu: KubeEmulator):
    write_descriptor(tmp_path, emu.base_url)
    registry = load_descriptors(tmp_path)
    report = await diagnose_live(registry, run="train", identity=ALICE, now=NOW, workspace="vision")
    resolution = registry.resolve(workspace="vision", channel=None)
    api = await KubeClients().user(resolution.descriptor.cluster_target(), ALICE)
    return report, api


def _impersonated(requests) -> None:
    for req in requests:
        assert req.headers.getall("Impersonate-User") == [ALICE.user], req.path
        assert req.headers.getall("Impersonate-Group") == list(ALICE.groups), req.path


async def preemptor_answer(tmp_path: Path, setup=None):
    """The status as a user gets it (its reads of the preemptor included), and the same reads made
    again through `read_preemption` to count them."""
    async with KubeEmulator(preempted_cluster(), latency=0.05) as emu:
        if setup:
            setup(emu)
        report, api = await _reader_session(tmp_path, emu)
        status_requests = list(emu.requests)
        before = len(emu.requests)
        async with api:
            objs = report.linked_objects
            read = await read_preemption(KubeReader(api, 10), objs.namespace, objs.workloads)
        again = with_preemptor(report.diagnosis, objs, read)
        assert again.phase(PHASE).preemption == report.diagnosis.phase(PHASE).preemption
        return report, report.diagnosis, emu.requests[before:], status_requests, emu


async def test_the_preemptor_is_named_when_the_users_read_finds_it(tmp_path: Path) -> None:
    report, d, requests, status_requests, _ = await preemptor_answer(tmp_path)
    pre = d.phase(PHASE).preemption
    assert pre is not None
    wl_name = k8s.workload_name(k8s.job("urgent-eval", ns="research"))
    assert pre.preemptor == f"research/{wl_name}" and pre.preemptor_job == "Job/urgent-eval"
    assert (pre.preemptor_priority, pre.preemptee_priority, pre.source) == (1000, 100, "event")
    assert (f"preempted by Job/urgent-eval in /{CQ}, priority 1000 over yours 100 (its Workload "
            f"research/{wl_name})") in d.phase(PHASE).summary
    # then its place in the queue again
    assert d.queue_position is not None and d.queue_position.position_in_cluster_queue == 1
    # Two requests, sent together: the Workloads by the job's uid, the Workload's events.
    assert len(requests) == 2 and len({r.round for r in requests}) == 1
    _impersonated(requests)
    _impersonated(status_requests)
    assert [r for r in status_requests if r.query.get("labelSelector") == f"kueue.x-k8s.io/job-uid="
            f"{k8s.job('urgent-eval', ns='research')['metadata']['uid']}"]


async def test_a_denied_read_of_the_preemptor_says_unavailable_and_why(tmp_path: Path) -> None:
    _, d, requests, _, _ = await preemptor_answer(
        tmp_path, lambda emu: emu.forbid("list", "workloads", user=ALICE.user, cluster_scope=True))
    pre = d.phase(PHASE).preemption
    assert pre is not None and pre.preemptor is None
    assert pre.preemptor_unavailable == "permission denied (list workloads in all namespaces)"
    assert pre.preemptor_priority == 1000  # the event still gives the priorities
    assert f"preempted by a workload in /{CQ}, priority 1000 over yours 100" in d.phase(PHASE).summary
    assert "urgent-eval" not in d.phase(PHASE).summary
    admission = next(x for x in d.contract()["phases"] if x["name"] == PHASE)
    assert admission["preemption"]["preemptor"] is None
    assert admission["preemption"]["preemptor_unavailable"].startswith("permission denied")
    _impersonated(requests)


# ----------------------------------------------------------------------- the holders


def waiting_cluster() -> list[dict]:
    """train (8 GPUs) waits in h100-shared (16 GPUs, all held): llama-a of team-vision holds 8 until
    its 2 h limit; bert of team-nlp holds 8 until its 1 h limit."""
    j = k8s.job("train", suspend=True, gpus=8, at=30)
    wl = k8s.workload(j, state="waiting_for_quota", cluster_queue=CQ, flavor="h100", at=30)
    holders = []
    for name, ns, queue, limit in (("llama-a", k8s.NS, "team-a", 2 * 3600), ("bert", "team-nlp", "nlp", 3600)):
        job = k8s.job(name, ns=ns, queue=queue, gpus=8, at=-600)
        hw = k8s.workload(job, cluster_queue=CQ, flavor="h100", at=-600)
        hw["spec"]["maximumExecutionTimeSeconds"] = limit
        holders += [job, hw]
    return [k8s.tau_workspace("vision"), k8s.pvc(), k8s.local_queue("team-a", cluster_queue=CQ),
            k8s.local_queue("nlp", ns="team-nlp", cluster_queue=CQ),
            k8s.cluster_queue(CQ, gpu_quota=16, gpu_used=16, flavor="h100"), j, wl, *holders, *flavor_and_nodes()]


async def estimate_answer(tmp_path: Path, setup=None):
    async with KubeEmulator(waiting_cluster(), latency=0.05) as emu:
        if setup:
            setup(emu)
        report, api = await _reader_session(tmp_path, emu)
        objs = report.linked_objects
        async with api:
            reader = KubeReader(api, 10)
            read = await read_queue(reader, k8s.NS, "team-a", run_uid=objs.run["metadata"]["uid"])
            before = len(emu.requests)
            holders = await read_holders(reader, CQ)
        extra = emu.requests[before:]
        qp = position_from(read, run_uid=objs.run["metadata"]["uid"],
                           workload_names={w["metadata"]["name"] for w in objs.workloads}, run_workloads=objs.workloads)
        assert isinstance(read.cluster_queue_object, dict)
        qp = with_estimate(qp, read.cluster_queue_object, run_workloads=objs.workloads,
                           namespace_workloads=read.workloads if isinstance(read.workloads, list) else None,
                           holders=holders, ahead=read.ahead, ahead_keys=[], now=NOW)
        return qp, extra


async def test_the_estimate_from_every_holder_of_the_cluster_queue(tmp_path: Path) -> None:
    qp, extra = await estimate_answer(tmp_path)
    est = qp.start_estimate
    assert est is not None
    # bert (team-nlp) was admitted at 09:50:02 with a 1 h limit: its 8 GPUs come back by 10:50:02.
    assert est.latest == "2026-11-30T10:50:02Z" and est.earliest is None
    assert start_text(qp) == ("at the latest 10:50 UTC (the holders' time limits) — preemption, fair sharing and "
                              "borrowing can change it")
    [req] = extra
    assert req.query.get("fieldSelector") == f"status.admission.clusterQueue={CQ}"
    _impersonated(extra)


async def test_a_denied_cluster_wide_list_uses_the_namespace_and_says_what_it_missed(tmp_path: Path) -> None:
    qp, extra = await estimate_answer(
        tmp_path, lambda emu: emu.forbid("list", "workloads", user=ALICE.user, cluster_scope=True))
    est = qp.start_estimate
    assert est is not None
    # Only llama-a (team-vision, 2 h) is known; the other 8 are held by what the user could not see.
    assert est.latest is None
    assert any(u.startswith("unavailable: permission denied (list workloads in all namespaces)")
               for u in est.unknown)
    assert any("8 reserved nvidia.com/gpu in flavour h100 are held by no Workload you could read" in u for u in est.unknown)
    _impersonated(extra)


async def test_a_waiting_runs_status_with_its_estimate_takes_at_most_three_rounds(tmp_path: Path) -> None:
    """The figure (issue 35): the run (round 1), its own objects with the LocalQueue's list (round 2),
    the ClusterQueue's list and quota with its holders (round 3; with the ClusterQueue's name already
    known, round 2). Nobody ahead in another namespace here: no GETs of theirs."""
    async with KubeEmulator(waiting_cluster(), latency=0.05) as emu:
        write_descriptor(tmp_path, emu.base_url)
        report = await diagnose_live(load_descriptors(tmp_path), run="train", identity=ALICE, now=NOW,
                                     workspace="vision")
        requests, rounds = list(emu.requests), emu.rounds()
    qp = report.diagnosis.queue_position
    assert qp is not None and qp.start_estimate is not None
    assert qp.start_estimate.latest == "2026-11-30T10:50:02Z"  # bert's 1 h limit, the first release
    assert rounds <= 3, [(r.round, r.path) for r in requests]
    holders = [r for r in requests if r.query.get("fieldSelector") == f"status.admission.clusterQueue={CQ}"]
    assert len(holders) == 1
    _impersonated(requests)


async def test_the_estimate_moves_when_a_holder_finishes(tmp_path: Path) -> None:
    """A watch re-reads a waiting run's queue every few ticks: once bert (team-nlp) has finished (its
    Workload gone, the ClusterQueue's reservation down to 8), the run's 8 are free now."""
    async with KubeEmulator(waiting_cluster(), latency=0.05) as emu:
        write_descriptor(tmp_path, emu.base_url)
        registry = load_descriptors(tmp_path)
        first = await diagnose_live(registry, run="train", identity=ALICE, now=NOW, workspace="vision")
        bert = k8s.workload(k8s.job("bert", ns="team-nlp", queue="nlp", gpus=8, at=-600))
        emu.delete("Workload", "team-nlp", bert["metadata"]["name"])
        emu.upsert(k8s.cluster_queue(CQ, gpu_quota=16, gpu_used=8, flavor="h100"))  # Kueue's own bookkeeping
        later = await diagnose_live(registry, run="train", identity=ALICE, now=NOW + timedelta(minutes=5),
                                    workspace="vision")
    a, b = (r.diagnosis.queue_position.start_estimate for r in (first, later))  # type: ignore[union-attr]
    assert a is not None and b is not None
    # bert's 8 are free now: the run fits at once
    assert a.latest == "2026-11-30T10:50:02Z"
    assert b.earliest == b.latest == "2026-11-30T10:35:00Z"
    assert b.basis == ["8 nvidia.com/gpu of flavour h100 free now"]


# ----------------------------------------------------------------------- rounds in every case


def preempted_behind_one_elsewhere() -> list[dict]:
    """The preempted `train` (priority 100) behind eval-next of namespace research (priority 500), both
    waiting in h100-shared: the preemptor's reads and the GET of the one ahead can share round 3."""
    j = k8s.job("eval-next", ns="research", queue="research", suspend=True, gpus=8)
    return [*preempted_cluster(),
            j, k8s.workload(j, state="waiting_for_quota", cluster_queue=CQ, flavor="h100", priority=500)]


def behind_one_elsewhere() -> list[dict]:
    """`train` (8 GPUs) behind nlp-pretrain of namespace team-nlp in h100-shared (Kueue's order: the
    older first at equal priority)."""
    j = k8s.job("nlp-pretrain", ns="team-nlp", queue="nlp", suspend=True, gpus=8, at=10)
    return [*waiting_cluster(), j, k8s.workload(j, state="waiting_for_quota", cluster_queue=CQ, flavor="h100",
                                                at=10)]


ROUNDS_CASES = [  # (case, objects, rounds, requests): the same with or without the ClusterQueue's name known
    ("nobody ahead", waiting_cluster, 3, 13),
    ("one ahead in another namespace", behind_one_elsewhere, 3, 14),
    ("preempted", preempted_cluster, 3, 15),
    ("preempted, one ahead in another namespace", preempted_behind_one_elsewhere, 3, 16),
]


async def test_a_waiting_runs_whole_answer_takes_at_most_three_rounds_in_every_case(tmp_path: Path) -> None:
    """Issue 35's figure at 50 ms a request, in a process that knows no ClusterQueue for the LocalQueue
    (none in memory, no Redis) and then in the same process, which has learnt it: the LocalQueue is read
    with the run (round 1) when nothing is known, so the ClusterQueue's reads join round 2, and the
    preemptor's reads start the moment round 2 listed the run's Workloads — beside the GETs of the
    Workloads ahead elsewhere (round 3), not after them."""
    from workers.collect.kueue import CLUSTER_QUEUE_NAMES

    for case, objects, rounds, count in ROUNDS_CASES:
        async with KubeEmulator(objects(), latency=0.05) as emu:
            write_descriptor(tmp_path, emu.base_url)
            CLUSTER_QUEUE_NAMES._names.clear()  # what a fresh process holds
            for known in (False, True):
                emu.clear_requests()
                report = await diagnose_live(load_descriptors(tmp_path), run="train", identity=ALICE, now=NOW,
                                             workspace="vision")
                requests = list(emu.requests)
                figure = (emu.rounds(), len(requests), report.requests)
                assert figure == (rounds, count, count), (case, known, [(r.round, r.path) for r in requests])
                _impersonated(requests)
                lq = [r.round for r in requests if r.path.endswith("/localqueues/team-a")]
                assert lq == ([2] if known else [1]), (case, known, lq)
                qp = report.diagnosis.queue_position
                assert qp is not None and qp.cluster_queue == CQ and qp.start_estimate is not None, case
                pre = report.diagnosis.phase(PHASE).preemption
                if "preempted" in case:
                    assert pre is not None and pre.preemptor is not None, case
                    by_uid = [r for r in requests if r.query.get("labelSelector", "").startswith("kueue.x-k8s.io/job-uid=")
                              and "/namespaces/" not in r.path]
                    assert [r.round for r in by_uid] == [3], case
                if "one ahead" in case:
                    assert qp.position_in_cluster_queue == 2 and qp.unreadable_ahead == 0, case
                    [ahead] = [r for r in requests if r.method == "GET" and "/workloads/" in r.path
                               and "/team-vision/" not in r.path]
                    assert ahead.round == 3, case
                # never-fits by node size (issue 35): the flavours with the ClusterQueue, then the flavour's
                # nodes by its node labels, beside the Workloads ahead
                [flavors] = [r for r in requests if r.path.endswith("/resourceflavors")]
                [nodes] = [r for r in requests if r.path == "/api/v1/nodes"]
                assert (flavors.round, nodes.round) == (2, 3), case
                assert nodes.query.get("labelSelector") == "kubernetes.azure.com/agentpool=h100", case
                assert qp.never_fits is None and qp.node_size is None, case


# ----------------------------------------------------------------------- never fits, live and offline


def too_big(token: str, message: str) -> list[dict]:
    """`train` asks for 2 pods × 16 GPUs of h100-shared, whose nominal quota is 16 with no cohort:
    more than it may ever grant. The condition is Kueue's (kueue_reasons.TOKENS); PendingEvaluation is
    what a Workload the scheduler has not looked at yet carries (workload_controller.go)."""
    j = k8s.job("train", suspend=True, gpus=16, parallelism=2, at=30)
    wl = k8s.workload(j, state="waiting_for_quota", cluster_queue=CQ, flavor="h100", at=30)
    qr = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
    qr["reason"], qr["message"] = token, message
    return [k8s.tau_workspace("vision"), k8s.pvc(), k8s.local_queue("team-a", cluster_queue=CQ),
            k8s.cluster_queue(CQ, gpu_quota=16, gpu_used=0, flavor="h100"), j, wl]


NEVER = ("asks for 32 nvidia.com/gpu; ClusterQueue h100-shared can grant at most 16 in flavour h100 (its "
         "nominal quota 16, no cohort to borrow from)")


async def test_a_run_that_can_never_fit_is_a_warning_with_the_numbers_live_as_offline(tmp_path: Path) -> None:
    """SPEC §5b: never-fits is `warning`, the owner of the limit, not transient, the next action with the
    numbers, recovery `fix-then-resubmit` — the same from a live status as from a dump of the same objects
    (`taubot diagnose --from-file`: evaluate, then `with_queue_position`)."""
    from workers.collect.dumps import with_queue_position
    from workers.diagnosis.evaluate import evaluate

    cases = [("PendingEvaluation", "Workload is pending evaluation in the scheduling queue", "quota.never_fits"),
             ("ExceedsMaxQuota", "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu "
              "in flavor h100, previously considered podsets requests (0) + current podset request (32) > maximum "
              "capacity (16)", "quota.over_max")]
    for token, message, reason in cases:
        objects = too_big(token, message)
        async with KubeEmulator(objects, latency=0.05) as emu:
            write_descriptor(tmp_path, emu.base_url)
            live = (await diagnose_live(load_descriptors(tmp_path), run="train", identity=ALICE, now=NOW,
                                        workspace="vision")).diagnosis
            _impersonated(emu.requests)
        offline = with_queue_position(evaluate(objects, "train", NOW, k8s.NS))
        for d in (live, offline):
            phase = d.phase(PHASE)
            assert (phase.state.value, phase.reason, phase.kueue_reason) == ("warning", reason, token), d
            assert (d.first_incomplete, d.owner, d.transient) == (PHASE, "queue-owner", False)
            assert d.next_action == (f"The run {NEVER}: request fewer resources, or ask the queue owner to "
                                     "raise the quota.")
            assert d.recovery is not None and d.recovery.action == "fix-then-resubmit"
            assert d.queue_position is not None and d.queue_position.never_fits == NEVER
            assert d.queue_position.never_fits_owner == "queue-owner"
            assert f"can never fit: {NEVER}" in phase.summary
        assert live.contract()["queue_position"]["never_fits"] == offline.contract()["queue_position"]["never_fits"]


# ----------------------------------------------------------------------- never fits by node size, live


def too_big_per_pod() -> list[dict]:
    """`train` asks for one pod of 16 GPUs of h100-shared (nominal 32: the queue could grant it), whose
    flavour's nodes have 8 each (`flavor_and_nodes`): it can never be placed."""
    j = k8s.job("train", suspend=True, gpus=16, at=30)
    wl = k8s.workload(j, state="waiting_for_quota", cluster_queue=CQ, flavor="h100", at=30)
    return [k8s.tau_workspace("vision"), k8s.pvc(), k8s.local_queue("team-a", cluster_queue=CQ),
            k8s.cluster_queue(CQ, gpu_quota=32, gpu_used=24, flavor="h100"), j, wl, *flavor_and_nodes()]


PER_POD = "each main pod asks for 16 nvidia.com/gpu; the largest node of flavour h100 has 8 (aks-h100-0)"


async def test_a_pod_larger_than_every_node_of_its_flavour_never_fits_live_as_offline(tmp_path: Path) -> None:
    """SPEC §5b: the researcher's, with the numbers — read live as the user (the ResourceFlavors with the
    ClusterQueue, the flavour's nodes by its node labels), the same as from a dump of the same objects."""
    from workers.collect.dumps import with_queue_position
    from workers.diagnosis.evaluate import evaluate

    objects = too_big_per_pod()
    async with KubeEmulator(objects, latency=0.05) as emu:
        write_descriptor(tmp_path, emu.base_url)
        report = await diagnose_live(load_descriptors(tmp_path), run="train", identity=ALICE, now=NOW,
                                     workspace="vision")
        requests, rounds = list(emu.requests), emu.rounds()
    offline = with_queue_position(evaluate(objects, "train", NOW, k8s.NS))
    for d in (report.diagnosis, offline):
        assert d.queue_position is not None and d.queue_position.never_fits == PER_POD, d.queue_position
        assert (d.queue_position.never_fits_owner, d.owner, d.transient) == ("researcher", "researcher", False)
        assert d.phase(PHASE).state.value == "warning" and f"can never fit: {PER_POD}" in d.phase(PHASE).summary
    assert report.diagnosis.contract()["queue_position"]["never_fits"] == offline.contract()["queue_position"][
        "never_fits"]
    [nodes] = [r for r in requests if r.path == "/api/v1/nodes"]
    assert nodes.query.get("labelSelector") == "kubernetes.azure.com/agentpool=h100" and nodes.round == 3
    assert rounds == 3 and len(requests) == report.requests == 13, [(r.round, r.path) for r in requests]
    _impersonated(requests)


async def test_a_team_that_may_not_list_nodes_is_told_node_size_unavailable_never_that_it_fits(
        tmp_path: Path) -> None:
    async with KubeEmulator(too_big_per_pod(), latency=0.05) as emu:
        emu.forbid("list", "nodes", user=ALICE.user)
        write_descriptor(tmp_path, emu.base_url)
        report = await diagnose_live(load_descriptors(tmp_path), run="train", identity=ALICE, now=NOW,
                                     workspace="vision")
    d = report.diagnosis
    qp = d.queue_position
    assert qp is not None and qp.never_fits is None
    assert qp.node_size == "unavailable: permission denied (list nodes)"
    assert d.contract()["queue_position"]["node_size"] == "unavailable: permission denied (list nodes)"
    assert "node size: unavailable: permission denied (list nodes)" in queue_position_text(qp)
    assert d.phase(PHASE).state.value == "pending"  # still waiting for quota: never "fits", never "too big"
    _impersonated(emu.requests)


# ----------------------------------------------------------------------- the holders' ETAs, live


async def test_a_holders_recorded_eta_gives_the_earliest_only_where_the_user_may_read_its_log(
        tmp_path: Path, seen: Redis) -> None:
    """taubot's own ETA of bert (team-nlp), as a status of bert recorded it (`remember_eta`, what
    `investigate_in` writes after a read that computed it): with alice allowed `get pods/log` in team-nlp
    it gives `earliest` (its basis the ETA); one access review more, in round 3, nothing else. Denied,
    bert is again what its time limit says."""
    from workers.collect.kueue_etas import remember_eta

    bert_job = k8s.job("bert", ns="team-nlp", queue="nlp", gpus=8, at=-600)
    remember_eta(seen, bert_job["metadata"]["uid"], NOW + timedelta(minutes=10), NOW - timedelta(minutes=2))
    answers = {}
    for allowed in (True, False):
        async with KubeEmulator(waiting_cluster(), latency=0.05) as emu:
            if not allowed:
                emu.forbid("get", "pods", user=ALICE.user, namespace="team-nlp", subresource="log")
            write_descriptor(tmp_path, emu.base_url)
            report = await diagnose_live(load_descriptors(tmp_path), run="train", identity=ALICE, now=NOW,
                                         workspace="vision", seen=seen)
            answers[allowed] = (report, list(emu.requests), emu.rounds())
    report, requests, rounds = answers[True]
    est = report.diagnosis.queue_position.start_estimate  # type: ignore[union-attr]
    assert est is not None and est.earliest == "2026-11-30T10:40:00Z"
    assert est.earliest_because == "when team-nlp/bert's ETA frees 8 GPUs"
    assert est.latest == "2026-11-30T10:50:02Z"  # bert's 1 h limit, as before
    [review] = [r for r in requests if r.path.endswith("/selfsubjectaccessreviews")]
    assert review.body["spec"]["resourceAttributes"] == {"verb": "get", "resource": "pods", "group": "",
                                                         "namespace": "team-nlp", "subresource": "log"}
    assert review.round == 3 and rounds == 3 and len(requests) == 14
    _impersonated(requests)
    denied, requests, rounds = answers[False]
    est = denied.diagnosis.queue_position.start_estimate  # type: ignore[union-attr]
    assert est is not None and est.earliest is None and est.latest == "2026-11-30T10:50:02Z"
    assert rounds == 3 and len(requests) == 14


def test_an_eta_record_that_is_malformed_future_dated_stale_or_past_is_not_used(seen: Redis) -> None:
    """The record is read back from Redis, so it is untrusted (SPEC §11): one that does not validate or
    is dated after now is ignored and counted; a stale one (computed over an hour ago) or one whose end
    has passed with the run still holding its quota says nothing, and is not used either."""
    from workers.collect.kueue_etas import recorded, remember_eta
    from workers.plumbing.metrics import UNTRUSTED_DROPPED
    from workers.records import keys

    holder = next(o for o in waiting_cluster() if o["kind"] == "Workload" and "bert" in o["metadata"]["name"])
    uid = holder["metadata"]["labels"]["kueue.x-k8s.io/job-uid"]
    key = f"team-nlp/{holder['metadata']['name']}"
    dropped = UNTRUSTED_DROPPED.labels("eta")
    before = dropped._value.get()
    for raw in ("not json", '{"end": "2026-11-30T11:00:00Z"}', '{"end": "2026-11-30T11:00:00", "at": '
                '"2026-11-30T10:20:00Z"}', '{"end": "2026-11-30T11:00:00Z", "at": "2026-11-30T10:45:00Z"}'):
        seen.set(keys.run_eta_key(uid), raw)
        assert recorded(seen, [holder], NOW) == {}, raw
    assert dropped._value.get() - before == 4
    remember_eta(seen, uid, NOW + timedelta(minutes=30), NOW - timedelta(hours=2))  # stale
    assert recorded(seen, [holder], NOW) == {}
    remember_eta(seen, uid, NOW - timedelta(minutes=1), NOW - timedelta(minutes=5))  # already past: not kept
    assert recorded(seen, [holder], NOW) == {}
    remember_eta(seen, uid, NOW + timedelta(minutes=30), NOW - timedelta(minutes=5))
    assert recorded(seen, [holder], NOW) == {key: ("team-nlp", NOW + timedelta(minutes=30))}
