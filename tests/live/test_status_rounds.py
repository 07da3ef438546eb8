"""Rounds per live status (issue 28): at most three dependent rounds with layers 6–8, two when
the answer is decided before layer 5.

The emulator answers every request after `LATENCY`, so the requests a status sends together
arrive together, a burst: a request's round is 1 + the deepest round answered before it
arrived (`RecordedRequest.round`), which is how many round trips the status waited for.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.diagnosis.test_node_health import node
from tests.fakes.kube_api import KubeEmulator, RecordedRequest
from tests.fixtures import k8s
from tests.fixtures.ray_dashboard import serve_driver_log
from workers.collect.investigate import diagnose_live
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity

from .conftest import workspace_objects, write_descriptor

NOW = k8s.T0 + timedelta(minutes=30)
ALICE = Identity(user="alice@example.com", groups=("team-vision",))
LATENCY = 0.05
RUN = "ray-pretrain-13b"
# Ray's driver log as the dashboard's log API answers it: no timestamps (shared/reference/training-logs.md)
DRIVER_LOG = "".join(f"{{'loss': {2 - i / 10:.4f}, 'grad_norm': 1.1, 'epoch': {i / 10:.2f}}}\n" for i in range(8))


def running_rayjob() -> list[dict]:
    """A running RayJob (KubeRay shapes), its cluster's pods on two nodes, and the head service."""
    rj = k8s.rayjob(RUN)
    rc = k8s.raycluster(rayjob=rj, state="ready")
    pods = [k8s.ray_pod(rc, "head", phase="Running", containers=[k8s.running("ray-head")], node="gpu-node-1"),
            k8s.ray_pod(rc, "worker", phase="Running", containers=[k8s.running("ray-worker")], node="gpu-node-2")]
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": f"{rj['status']['rayClusterName']}-head-svc", "namespace": k8s.NS},
               "spec": {"ports": [{"name": "dashboard", "port": 8265}]}}
    nodes = [node(**{"metadata.name": n}) for n in ("gpu-node-1", "gpu-node-2")]
    return [*workspace_objects(), rj, rc, *pods, service, k8s.workload(rj, state="admitted"), *nodes]


def served(emu: KubeEmulator) -> None:
    rj = k8s.rayjob(RUN)["status"]
    serve_driver_log(emu, k8s.NS, f"{rj['rayClusterName']}-head-svc", rj["jobId"], DRIVER_LOG)


async def status(emu: KubeEmulator, tmp_path: Path, run: str = RUN):  # noqa: ANN201
    write_descriptor(tmp_path, emu.base_url)
    return await diagnose_live(load_descriptors(tmp_path), run=run, identity=ALICE, now=NOW, workspace="vision")


def rounds_of(requests: list[RecordedRequest]) -> list[tuple[int, str, str]]:
    return [(r.round, r.method, r.path) for r in requests]


async def test_a_running_rayjob_with_nodes_and_its_driver_log_takes_three_rounds(tmp_path: Path) -> None:
    async with KubeEmulator(running_rayjob(), latency=LATENCY) as emu:
        served(emu)
        d = (await status(emu, tmp_path)).diagnosis
        assert d.phase("Runtime progress").state.value == "active", d.phase("Runtime progress").summary
        requests = list(emu.requests)
        assert emu.rounds() == 3, rounds_of(requests)
        [review] = [r for r in requests if r.path.endswith("/selfsubjectaccessreviews")]
        [log] = [r for r in requests if "/proxy/" in r.path]
        [nodes] = [r for r in requests if r.path == "/api/v1/nodes"]
        assert review.body["spec"]["resourceAttributes"]["subresource"] == "log"
        # The review rides with the pods (round 2); the log read waits for its answer (round 3).
        assert (review.round, log.round, nodes.round) == (2, 3, 3)
        assert log.path.endswith("-head-svc:dashboard/proxy/api/v0/logs/file")
        head_ip = next(p["status"]["podIP"] for p in running_rayjob()
                       if p.get("kind") == "Pod" and "head" in p["metadata"]["name"])
        assert log.query["node_ip"] == head_ip and log.query["submission_id"] == k8s.rayjob(RUN)["status"]["jobId"]
        # 10, and the LocalQueue read with the run by a process that knows no ClusterQueue for it
        # (issue 35: a waiting run's ClusterQueue reads then join round 2; it teaches the hint)
        assert len(requests) == 11, rounds_of(requests)


async def test_a_user_denied_pod_logs_gets_no_dashboard_read_in_a_status(tmp_path: Path) -> None:
    """Issue 26.6 holds with the early review: nothing is read through the proxy before it allows."""
    async with KubeEmulator(running_rayjob(), latency=LATENCY) as emu:
        served(emu)
        emu.forbid("get", "pods", subresource="log", user=ALICE.user)
        d = (await status(emu, tmp_path)).diagnosis
        assert "permission denied (get pods/log)" in d.phase("Runtime progress").summary
        assert not [r for r in emu.requests if "/proxy/" in r.path]
        assert emu.rounds() <= 3


async def test_waiting_for_quota_reads_its_own_objects_in_two_rounds_and_no_node_or_log(tmp_path: Path) -> None:
    job = k8s.job("llama-ft-7b", suspend=True)
    objects = [*workspace_objects(), job, k8s.workload(job, state="pending")]
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        d = (await status(emu, tmp_path, "llama-ft-7b")).diagnosis
        assert d.first_incomplete == "Kueue admission"
        requests = list(emu.requests)
        # The run's own reads take two rounds; its queue position (issue 29) too: with no
        # ClusterQueue known to this process, the LocalQueue is read with the run (round 1, issue 35),
        # so the ClusterQueue's list and quota go with the LocalQueue's list (round 2); only Workloads
        # ahead in other namespaces would take a third.
        queue_paths = ("visibility.kueue", "/localqueues/", "/clusterqueues/")
        own = [r for r in requests if not any(q in r.path for q in queue_paths)
               and not (r.path.endswith("/workloads") and "labelSelector" not in r.query)]
        assert max(r.round for r in own) <= 2, rounds_of(requests)
        [local_queue] = [r for r in requests if r.path.endswith("/localqueues/team-a")]
        assert local_queue.round == 1, rounds_of(requests)
        assert emu.rounds() == 2, rounds_of(requests)
        assert not [r for r in requests if r.path.endswith(("/log", "/selfsubjectaccessreviews"))
                    or "/nodes" in r.path or "/proxy/" in r.path]


async def test_a_later_status_of_a_waiting_run_sends_the_cluster_queue_reads_with_its_own(
        tmp_path: Path) -> None:
    """A process that has read a LocalQueue once knows its ClusterQueue (a warm worker keeps it
    across jobs): the next status sends the ClusterQueue's list and quota in the same round as the
    LocalQueue's, so with nobody ahead in other namespaces the whole answer takes two rounds."""
    job = k8s.job("llama-ft-7b", suspend=True)
    objects = [*workspace_objects(), job, k8s.workload(job, state="pending")]
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        first = (await status(emu, tmp_path, "llama-ft-7b")).diagnosis
        emu.clear_requests()
        again = (await status(emu, tmp_path, "llama-ft-7b")).diagnosis
        requests = list(emu.requests)
        assert again.queue_position == first.queue_position and again.queue_position is not None
        cluster_reads = [r for r in requests if "/clusterqueues/" in r.path]
        assert cluster_reads and {r.round for r in cluster_reads} == {2}, rounds_of(requests)
        assert emu.rounds() <= 2, rounds_of(requests)
        assert all(r.header_values("Impersonate-User") == [ALICE.user] for r in requests)


async def test_a_user_who_may_not_read_the_local_queue_gets_nothing_from_anothers_hint(
        tmp_path: Path) -> None:
    """The remembered ClusterQueue is only a hint: Bob, denied the LocalQueue, gets no ClusterQueue
    figures from Alice's earlier read, and every read made for him is made as him."""
    bob = Identity(user="bob@example.com", groups=("team-vision",))
    job = k8s.job("llama-ft-7b", suspend=True)
    objects = [*workspace_objects(), job, k8s.workload(job, state="pending")]
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        alice = (await status(emu, tmp_path, "llama-ft-7b")).diagnosis
        assert alice.contract()["queue_position"]["cluster_queue"] == "cluster-queue"
        emu.forbid("get", "localqueues", user=bob.user)
        emu.clear_requests()
        his = (await diagnose_live(load_descriptors(tmp_path), run="llama-ft-7b", identity=bob, now=NOW,
                                   workspace="vision")).diagnosis
        assert his.first_incomplete == "Kueue admission"
        theirs = his.contract()["queue_position"]
        assert theirs["cluster_queue"] is None and theirs["pending_in_cluster_queue"] is None, theirs
        assert theirs["cluster_queue_unavailable"] == ("not read (the LocalQueue could not be read: "
                                                       "permission denied (get localqueues in kueue.x-k8s.io))")
        assert all(r.header_values("Impersonate-User") == [bob.user] for r in emu.requests)


async def test_a_fresh_worker_finds_the_cluster_queue_hint_another_process_left_in_redis(
        tmp_path: Path, redis_url: str) -> None:
    """The hint lives in Redis too: a process that never read this LocalQueue (a new worker, another
    replica — here the same process with its own memory emptied) still sends the ClusterQueue's
    reads with the LocalQueue's, two rounds in all, and every read is the user's own."""
    from redis import Redis

    from workers.collect.kueue import CLUSTER_QUEUE_NAMES

    shared = Redis.from_url(redis_url)
    job = k8s.job("llama-ft-7b", suspend=True)
    objects = [*workspace_objects(), job, k8s.workload(job, state="pending")]
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        write_descriptor(tmp_path, emu.base_url)

        async def status_in_a_process() -> object:
            CLUSTER_QUEUE_NAMES._names.clear()  # what a process that never read the LocalQueue holds
            return (await diagnose_live(load_descriptors(tmp_path), run="llama-ft-7b", identity=ALICE,
                                        now=NOW, workspace="vision", seen=shared)).diagnosis

        first = await status_in_a_process()
        # Nobody knew the ClusterQueue yet: the LocalQueue is read with the run (round 1) to learn it.
        assert [r.round for r in emu.requests if r.path.endswith("/localqueues/team-a")] == [1]
        emu.clear_requests()
        again = await status_in_a_process()
        requests = list(emu.requests)
        # Now Redis knows it: no read in round 1, the LocalQueue is read (and must agree) in round 2.
        assert [r.round for r in requests if r.path.endswith("/localqueues/team-a")] == [2]
        assert again.queue_position == first.queue_position and again.queue_position is not None
        assert {r.round for r in requests if "/clusterqueues/" in r.path} == {2}, rounds_of(requests)
        assert emu.rounds() <= 2, rounds_of(requests)
        assert all(r.header_values("Impersonate-User") == [ALICE.user] for r in requests)
    shared.close()


async def test_a_first_status_after_the_monitor_shared_the_local_queues_cluster_queue_takes_two_rounds(
        tmp_path: Path, redis_url: str) -> None:
    """The stall monitor writes each cached LocalQueue's ClusterQueue to Redis (`share_cluster_queues`):
    a process that never read this LocalQueue sends the ClusterQueue's reads with it — two rounds —
    and every read is still the user's own (the hint only chose which reads to send early)."""
    from redis import Redis

    from workers.collect.kueue import CLUSTER_QUEUE_NAMES, share_cluster_queues

    shared = Redis.from_url(redis_url)
    job = k8s.job("llama-ft-7b", suspend=True)
    objects = [*workspace_objects(), job, k8s.workload(job, state="pending")]
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        write_descriptor(tmp_path, emu.base_url)
        [ws] = [d.descriptor for d in load_descriptors(tmp_path).descriptors]
        local_queues = [o for o in objects if o["kind"] == "LocalQueue"]  # what the monitor's cache holds
        assert share_cluster_queues(shared, ws.cluster_target().model_dump_json(), ws.spec.namespace,
                                    local_queues) == 1
        CLUSTER_QUEUE_NAMES._names.clear()  # a process that never read the LocalQueue
        d = (await diagnose_live(load_descriptors(tmp_path), run="llama-ft-7b", identity=ALICE, now=NOW,
                                 workspace="vision", seen=shared)).diagnosis
        requests = list(emu.requests)
        assert d.contract()["queue_position"]["cluster_queue"] == "cluster-queue"
        assert {r.round for r in requests if "/clusterqueues/" in r.path} == {2}, rounds_of(requests)
        assert emu.rounds() <= 2, rounds_of(requests)
        assert all(r.header_values("Impersonate-User") == [ALICE.user] for r in requests)
    shared.close()


async def test_a_hostile_cluster_queue_hint_is_ignored_counted_and_the_status_still_answers(
        tmp_path: Path, redis_url: str) -> None:
    """SPEC §11: the hint is read back from Redis. One that is not a ClusterQueue's name (bytes
    that are not UTF-8, a path, a huge string) is ignored and counted: the status learns the
    ClusterQueue from the user's own LocalQueue read, and no request names the hint."""
    from redis import Redis

    from workers.collect.kueue import CLUSTER_QUEUE_NAMES, shared_key
    from workers.plumbing.metrics import UNTRUSTED_DROPPED

    shared = Redis.from_url(redis_url)
    job = k8s.job("llama-ft-7b", suspend=True)
    objects = [*workspace_objects(), job, k8s.workload(job, state="pending")]
    for hostile in (b"\xff\xfe not utf-8", b"../../../api/v1/namespaces/kube-system/secrets", b"a" * 100_000):
        async with KubeEmulator(objects, latency=LATENCY) as emu:
            write_descriptor(tmp_path, emu.base_url)
            [ws] = [d.descriptor for d in load_descriptors(tmp_path).descriptors]
            [lq] = [o for o in objects if o["kind"] == "LocalQueue"]
            shared.set(shared_key(ws.cluster_target().model_dump_json(), ws.spec.namespace,
                                  lq["metadata"]["name"]), hostile)
            CLUSTER_QUEUE_NAMES._names.clear()  # a process that never read the LocalQueue
            before = UNTRUSTED_DROPPED.labels("cluster_queue_hint")._value.get()
            d = (await diagnose_live(load_descriptors(tmp_path), run="llama-ft-7b", identity=ALICE, now=NOW,
                                     workspace="vision", seen=shared)).diagnosis
            assert d.contract()["queue_position"]["cluster_queue"] == "cluster-queue"
            assert UNTRUSTED_DROPPED.labels("cluster_queue_hint")._value.get() == before + 1
            assert not any("secrets" in r.path or "aaaa" in r.path for r in emu.requests)
            assert all(r.header_values("Impersonate-User") == [ALICE.user] for r in emu.requests)
    shared.close()
