"""Rounds and requests of a live status in every case with layers 6–8 (issue 36, Build item 2).

The emulator answers every request after `LATENCY`, so the requests a status sends together
arrive together: a request's round is 1 + the deepest round answered before it arrived
(`RecordedRequest.round`), how many round trips the status waited for before sending it.

The rounds: 1 the run; 2 its objects and the `pods/log` review; 3 the nodes and the log, with the
log's dependent reads sent beside it when round 2's objects or the record of the run's last read
(Redis, `workers/collect/logs/memory.py`) call for them (`workers/collect/logs/ahead.py`).
Two cases take more on a run's first read, said below with why: a hung multi-rank Job (4: its
ranks are read once its log shows the hang — reading every rank on every status would be a
request storm) and a stalled RayJob's driver stack (5: the stack needs the driver's pid, which
only Ray's job details give, readable only after round 2's review, and py-spy is not run on a
driver no read has seen waiting). Their next read — a watch's tick, a later status — takes 3.

Requests are counted without the queue-position reads (issue 35's, counted by its own tests):
they belong to waiting runs and are not layers 6–8.

Shapes: KubeRay's submitter pod and its log (`ray job submit …; ray job logs --follow`,
shared/reference/training-logs.md §2.1; the banner as ray-project/ray#51601 quotes it), Ray
2.60's dashboard answers (tests/fixtures/ray_dashboard.py), Hugging Face Trainer dicts
(transformers 4.46), LlamaFactory#7396's NCCL watchdog pair (tests/diagnosis/test_ranks.py), py-spy
0.4's dump (docs/reference/training-logs-ranks.md §6.1).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from redis import Redis

from tests.diagnosis.test_ranks import indexed_job, lagging
from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from tests.fixtures.ray_dashboard import job_details, serve_driver_log
from tests.live.test_rank_logs import cluster, served
from tests.live.test_submitter_log import driver_lines, ray_run, submitter_log
from workers.collect.investigate import diagnose_live
from workers.collect.logs.memory import recall
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity

from .conftest import own, proxied, rounds, workspace_objects, write_descriptor

NOW = k8s.T0 + timedelta(minutes=60)
ALICE = Identity(user="alice@example.com", groups=("team-vision",))
LATENCY = 0.1  # every request a round sends leaves well within one answer time, even on a busy runner
RANKS_LATENCY = 0.2  # 32 concurrent reads in one round (as tests/live/test_rank_logs.py)
RAY = "ray-pretrain-13b"
# py-spy 0.4.3's dump as Ray's /worker/traceback answers it (training-logs-ranks.md §6.1)
DUMP = ('Thread 13860 (idle): "MainThread"\n'
        "    wait (threading.py:327)\n"
        "    get (ray/_private/worker.py:2771)\n"
        "    train_loop (train.py:88)\n")


async def status(emu: KubeEmulator, tmp_path: Path, run: str, seen: Redis | None, now: datetime = NOW):  # noqa: ANN201
    write_descriptor(tmp_path, emu.base_url)
    emu.clear_requests()
    report = await diagnose_live(load_descriptors(tmp_path), run=run, identity=ALICE, now=now, workspace="vision",
                                 seen=seen)
    assert all(r.header_values("Impersonate-User") == [ALICE.user] for r in emu.requests)
    return report.diagnosis, own(list(emu.requests))


def mirrored(emu: KubeEmulator, sub_pod: dict, job_id: str, lines: list[str], minutes_ago: float,
             driver: list[str] | None = None) -> None:
    """The submitter's mirror of ``lines`` (its last ``minutes_ago`` before NOW) and the driver's log."""
    emu.pod_logs[(k8s.NS, sub_pod["metadata"]["name"], "ray-job-submitter")] = submitter_log(job_id, lines,
                                                                                            minutes_ago)
    service = f"{k8s.rayjob(RAY)['status']['rayClusterName']}-head-svc"
    serve_driver_log(emu, k8s.NS, service, job_id, "".join(f"{line}\n" for line in driver or lines))


async def test_a_progressing_mirror_takes_three_rounds_and_a_later_status_reads_no_dashboard(
        tmp_path: Path, seen: Redis) -> None:
    """With no record of an earlier read nothing proves the mirror fresh, so the driver log's read
    goes beside it (11 requests, 3 rounds); the record this read leaves proves it for the next
    status, which reads the mirror alone (10 requests, 3 rounds)."""
    objects, sub_pod, _service, job_id = ray_run()
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        mirrored(emu, sub_pod, job_id, driver_lines(10), 1)
        d, first = await status(emu, tmp_path, RAY, seen)
        check = d.phase("Runtime progress")
        assert check.state.value == "active" and "at 2026-11-30 10:59:00Z" in check.summary, check
        assert max(r.round for r in first) == 3 and len(first) == 11, rounds(first)
        [mirror] = [r for r in first if r.path.endswith("/log")]
        [dashboard] = proxied(first, "/api/v0/logs/file")
        assert mirror.round == dashboard.round == 3
        d, later = await status(emu, tmp_path, RAY, seen, NOW + timedelta(minutes=2))
        assert d.phase("Runtime progress").state.value == "active"
        assert max(r.round for r in later) == 3 and len(later) == 10, rounds(later)
        assert proxied(later, "") == []


async def test_a_mirror_that_stopped_following_is_read_with_the_driver_log_in_three_rounds(
        tmp_path: Path, seen: Redis) -> None:
    """ray-project/ray#51601: the mirror stopped 30 minutes ago, the driver went on. The driver log
    is read beside the mirror (round 3), and it wins because it moved past the mirror."""
    objects, sub_pod, _service, job_id = ray_run()
    lines = driver_lines(14)
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        mirrored(emu, sub_pod, job_id, lines[:10], 30, driver=lines)
        d, requests = await status(emu, tmp_path, RAY, seen)
        check = d.phase("Runtime progress")
        assert check.state.value == "active" and "loss 1.35" in check.summary, check
        assert max(r.round for r in requests) == 3 and len(requests) == 11, rounds(requests)
        assert {r.round for r in proxied(requests, "/api/v0/logs/file")} == {3}
        assert recall(seen, k8s.rayjob(RAY)["metadata"]["uid"], NOW).waiting is False  # type: ignore[union-attr]


async def test_an_empty_mirror_is_read_with_the_driver_log_in_three_rounds(tmp_path: Path, seen: Redis) -> None:
    """A submitter that has printed nothing yet (a retried one goes straight to `ray job logs
    --follow`): the driver log, read beside it, is the answer — untimed, so never called recent."""
    objects, sub_pod, _service, job_id = ray_run()
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        mirrored(emu, sub_pod, job_id, [], 0, driver=driver_lines(8))
        emu.pod_logs[(k8s.NS, sub_pod["metadata"]["name"], "ray-job-submitter")] = ""
        d, requests = await status(emu, tmp_path, RAY, seen)
        check = d.phase("Runtime progress")
        assert check.state.value == "active" and "time of the last progress line unknown" in check.summary
        assert max(r.round for r in requests) == 3 and len(requests) == 11, rounds(requests)
        # no timed line to remember: the next status sends the driver log's read with the mirror's again
        assert recall(seen, k8s.rayjob(RAY)["metadata"]["uid"], NOW).mirror_pod is None  # type: ignore[union-attr]


async def test_a_rayjob_without_a_submitter_pod_reads_the_driver_log_in_round_three(
        tmp_path: Path, seen: Redis) -> None:
    objects, sub_pod, _service, job_id = ray_run()
    objects = [o for o in objects if o is not sub_pod]
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        mirrored(emu, sub_pod, job_id, [], 0, driver=driver_lines(8))
        d, requests = await status(emu, tmp_path, RAY, seen)
        assert d.phase("Runtime progress").state.value == "active"
        assert max(r.round for r in requests) == 3 and len(requests) == 10, rounds(requests)
        assert not [r for r in requests if r.path.endswith("/log")]


async def test_a_waiting_job_is_decided_in_two_rounds_and_reads_no_node_or_log(tmp_path: Path, seen: Redis) -> None:
    """Layer 4: the run, then its Workloads and pods — nothing of layers 6–8 is read."""
    job = k8s.job("llama-ft-7b", suspend=True)
    async with KubeEmulator([*workspace_objects(), job, k8s.workload(job, state="pending")], latency=LATENCY) as emu:
        d, requests = await status(emu, tmp_path, "llama-ft-7b", seen)
        assert d.first_incomplete == "Kueue admission"
        assert max(r.round for r in requests) == 2 and len(requests) == 5, rounds(requests)
        assert not [r for r in requests if r.path.endswith(("/log", "/nodes", "/selfsubjectaccessreviews"))]


async def test_a_crash_looping_ray_head_takes_three_rounds_for_its_nodes(tmp_path: Path, seen: Redis) -> None:
    """Layer 5, yet three rounds: a fault of the node a run's pods are bound to wins over what the
    pods show (SPEC §5a), and those nodes are named by the pods of round 2. No log is read: the
    driver never started (KubeRay: `Initializing`, no job status)."""
    rj = k8s.rayjob(RAY, deployment_status="Initializing", job_status="")
    rc = k8s.raycluster(rayjob=rj)
    head = k8s.ray_pod(rc, "head", node="aks-cpu-0", phase="Running",
                       containers=[k8s.crash_loop("ray-head", image=k8s.RAY_IMAGE, restart_count=7)])
    from tests.live.test_submitter_log import healthy_node
    objects = [*workspace_objects(), rj, rc, head, k8s.workload(rj, state="admitted"), healthy_node("aks-cpu-0")]
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        d, requests = await status(emu, tmp_path, RAY, seen)
        assert d.first_incomplete == "RayCluster" and "CrashLoopBackOff" in d.phase("RayCluster").summary
        assert max(r.round for r in requests) == 3 and len(requests) == 8, rounds(requests)
        assert [r.round for r in requests if r.path == "/api/v1/nodes"] == [3]
        assert not [r for r in requests if r.path.endswith(("/log", "/selfsubjectaccessreviews"))]


async def test_a_hung_32_rank_job_takes_four_rounds_first_and_three_once_its_hang_is_known(
        tmp_path: Path, seen: Redis) -> None:
    """The first status reads every rank only after the run's log showed the hang (round 4); the
    record of that read sends the ranks with the log on the next status (round 3), once the user's
    `pods/log` review, sent with round 2, allowed them (one request more). Each time the pod whose
    log is the run's own is not read twice: 32 log reads in all, not 33."""
    objs = indexed_job(32)
    async with KubeEmulator(cluster(objs), latency=RANKS_LATENCY) as emu:
        served(emu, objs, lagging(32, 17))
        for rounds_expected, requests_expected, now in ((4, 38, NOW), (3, 39, NOW + timedelta(minutes=1))):
            d, requests = await status(emu, tmp_path, "llama-ft-7b", seen, now)
            culprit = d.phase("Runtime progress").culprit
            assert culprit is not None and culprit.rank == 17 and culprit.node == "gpu-a17"
            logs = [r for r in requests if r.path.endswith("/log")]
            assert len(logs) == len({r.path for r in logs}) == 32
            assert max(r.round for r in requests) == rounds_expected, rounds(requests)
            assert len(requests) == requests_expected, rounds(requests)


async def test_a_healthy_32_rank_job_reads_no_rank_log(tmp_path: Path, seen: Redis) -> None:
    objs = indexed_job(32)
    async with KubeEmulator(cluster(objs), latency=RANKS_LATENCY) as emu:
        served(emu, objs, {})  # every rank's last step at 10:40
        for now in (NOW - timedelta(minutes=10), NOW - timedelta(minutes=9)):
            d, requests = await status(emu, tmp_path, "llama-ft-7b", seen, now)
            assert d.phase("Runtime progress").state.value == "active"
            assert len([r for r in requests if r.path.endswith("/log")]) == 1
            assert max(r.round for r in requests) == 3 and len(requests) == 7, rounds(requests)


async def test_a_failed_distributed_job_reads_its_ranks_with_its_log(tmp_path: Path, seen: Redis) -> None:
    """A Job that failed: its log always calls for the culprit, so the ranks go with it (round 3),
    after the user's `pods/log` review went with round 2."""
    objs = indexed_job(4, failed=True)
    async with KubeEmulator(cluster(objs), latency=LATENCY) as emu:
        served(emu, objs, lagging(4, 2))
        d, requests = await status(emu, tmp_path, "llama-ft-7b", seen)
        assert d.phase("Runtime progress").state.value == "warning"
        logs = [r for r in requests if r.path.endswith("/log")]
        assert len(logs) == 4 and {r.round for r in logs} == {3}, rounds(requests)
        [review] = [r for r in requests if r.path.endswith("/selfsubjectaccessreviews")]
        assert review.round == 2 and review.body["spec"]["resourceAttributes"]["subresource"] == "log"
        assert max(r.round for r in requests) == 3


async def test_a_user_denied_pod_logs_sends_no_rank_read_on_a_record_that_found_the_job_hung(
        tmp_path: Path, seen: Redis) -> None:
    """The record of another's read (a status, the monitor's) says the 32-rank Job hangs; a user who
    may not read pods/log sends no rank read on it — their review, with round 2, refused them —
    so their status costs what it would without the record."""
    objs = indexed_job(32)
    async with KubeEmulator(cluster(objs), latency=RANKS_LATENCY) as emu:
        served(emu, objs, lagging(32, 17))
        await status(emu, tmp_path, "llama-ft-7b", seen)
        assert recall(seen, objs[0]["metadata"]["uid"], NOW).waiting is True  # type: ignore[union-attr]
        emu.forbid("get", "pods", subresource="log", user=ALICE.user)
        d, requests = await status(emu, tmp_path, "llama-ft-7b", seen, NOW + timedelta(minutes=1))
        assert "permission denied (get pods/log)" in d.phase("Runtime progress").summary
        assert d.phase("Runtime progress").culprit is None
        logs = [r for r in requests if r.path.endswith("/log")]
        assert len(logs) <= 2, rounds(requests)  # the run's own log (and its fallback pod), refused
        assert max(r.round for r in requests) <= 4, rounds(requests)  # as without the record


def stalled_ray_run(emu: KubeEmulator) -> str:
    """The mirror and the driver log both stop 30 minutes before NOW; the job's details name the
    driver on the head pod's IP (K8sJobMode runs the driver on the head); py-spy's dump is served.
    The head's IP."""
    objects, sub_pod, service, job_id = ray_run()
    for obj in objects:
        emu.upsert(obj)
    mirrored(emu, sub_pod, job_id, driver_lines(10), 30)
    head_ip = next(o["status"]["podIP"] for o in objects if o["kind"] == "Pod"
                   and o["metadata"]["labels"].get("ray.io/node-type") == "head")
    details = job_details(job_id)
    details["driver_info"]["node_ip_address"] = head_ip
    emu.register_proxy("Service", k8s.NS, service, "dashboard", f"api/jobs/{job_id}", json.dumps(details),
                       content_type="application/json")
    emu.register_proxy("Service", k8s.NS, service, "dashboard", "worker/traceback", DUMP)
    return head_ip


async def test_a_stalled_rayjobs_driver_stack_takes_five_rounds_first_and_three_once_its_stall_is_known(
        tmp_path: Path, seen: Redis) -> None:
    """First sighting: round 3 the mirror and the driver log (quiet, unmoved: a stall), round 4 the
    proxy's review with the job's details (the driver's pid), round 5 py-spy's dump — 14 requests.
    The record of that read (the driver waiting, its process) sends the proxy's review with round 2
    and the details and the dump with the log: 3 rounds, 14 requests; the dump is kept because
    this read's details name the same process and its log still shows the stall."""
    async with KubeEmulator(workspace_objects(), latency=LATENCY) as emu:
        head_ip = stalled_ray_run(emu)
        for rounds_expected, now in ((5, NOW), (3, NOW + timedelta(minutes=1))):
            d, requests = await status(emu, tmp_path, RAY, seen, now)
            check = d.phase("Runtime progress")
            assert check.reason == "progress.stalled" and check.driver_stack[0] == "wait (threading.py:327)"
            [dump] = proxied(requests, "/worker/traceback")
            assert (dump.query["pid"], dump.query["ip"]) == ("13860", head_ip)
            [review] = [r for r in requests if r.path.endswith("/selfsubjectaccessreviews")
                        and r.body["spec"]["resourceAttributes"].get("subresource") == "proxy"]
            assert review.round < dump.round  # the dump only after the proxy's review answered
            assert max(r.round for r in requests) == rounds_expected and len(requests) == 14, rounds(requests)


async def test_a_driver_that_resumed_is_shown_no_stack_though_the_last_read_found_it_waiting(
        tmp_path: Path, seen: Redis) -> None:
    """The record only chooses what goes early: the driver moved on since, so the dump sent with
    the log is dropped and the answer is progress; the record now says it is not waiting."""
    async with KubeEmulator(workspace_objects(), latency=LATENCY) as emu:
        stalled_ray_run(emu)
        await status(emu, tmp_path, RAY, seen)
        objects, sub_pod, _service, job_id = ray_run()
        later = NOW + timedelta(minutes=5)
        mirrored(emu, sub_pod, job_id, driver_lines(12), -5)  # two more lines, the last at `later`
        d, requests = await status(emu, tmp_path, RAY, seen, later)
        check = d.phase("Runtime progress")
        assert check.state.value == "active" and check.driver_stack == [], check
        assert max(r.round for r in requests) == 3
        assert recall(seen, k8s.rayjob(RAY)["metadata"]["uid"], later).waiting is False  # type: ignore[union-attr]


async def test_a_hostile_record_of_the_last_read_is_ignored_counted_and_costs_no_round(
        tmp_path: Path, seen: Redis) -> None:
    """SPEC §11: the record is read back from Redis. One that names another process on a node that
    is none of the run's, or that does not validate, sends nothing early that it names."""
    from workers.plumbing.metrics import UNTRUSTED_DROPPED
    from workers.records import keys

    uid = k8s.rayjob(RAY)["metadata"]["uid"]
    forged = ('{"at": "2026-11-30T10:59:00Z", "waiting": true, '
              '"driver": {"job": "ray-pretrain-13b-vhwzz", "pid": 1, "ip": "10.0.0.99"}}')
    async with KubeEmulator(workspace_objects(), latency=LATENCY) as emu:
        head_ip = stalled_ray_run(emu)
        seen.set(keys.last_read_key(uid), forged)
        d, requests = await status(emu, tmp_path, RAY, seen)
        assert d.phase("Runtime progress").driver_stack
        assert [r.query["pid"] for r in proxied(requests, "/worker/traceback")] == ["13860"]  # never pid 1
        # A process of the run's own head named with a pid of its choosing: its dump may go out with
        # the log (as the user, after both reviews), but it is shown only for the process this
        # read's details name, dumped after them.
        seen.set(keys.last_read_key(uid), forged.replace("10.0.0.99", head_ip))
        d, requests = await status(emu, tmp_path, RAY, seen)
        dumps = proxied(requests, "/worker/traceback")
        assert [(r.query["pid"], r.round) for r in dumps] == [("1", 3), ("13860", 4)], rounds(requests)
        assert d.phase("Runtime progress").driver_stack
        before = UNTRUSTED_DROPPED.labels("log_seen")._value.get()
        seen.set(keys.last_read_key(uid), b"\xff not json")
        _d, requests = await status(emu, tmp_path, RAY, seen)
        assert UNTRUSTED_DROPPED.labels("log_seen")._value.get() == before + 1
        assert max(r.round for r in requests) == 5  # as a first sighting


async def test_a_node_whose_name_is_no_label_value_is_read_beside_the_list_in_round_three(
        tmp_path: Path, seen: Redis) -> None:
    """A Node name may be a 253-character DNS subdomain, a label value at most 63: such a node cannot
    be named in the hostname LIST's selector, so its GET goes beside the LIST (round 3), not after
    it. A node the LIST did not return (its hostname label is not its name, or it was deleted)
    still takes a GET after the LIST: the one case where the nodes take a fourth round."""
    from tests.diagnosis.test_node_health import node

    long_name = "gpu-node-0.rack-12.row-3.hall-b.datacenter-east.training.example.internal"  # 73 chars
    j = k8s.job("llama-ft-7b", suspend=False, active=2, parallelism=2)
    pods = [k8s.job_pod(j, index=i, node=name, phase="Running", containers=[k8s.running()])
            for i, name in enumerate(("gpu-node-1", long_name))]
    nodes = [node(**{"metadata.name": "gpu-node-1"}), node(**{"metadata.name": long_name})]
    nodes[1]["metadata"]["labels"]["kubernetes.io/hostname"] = "gpu-node-0"  # the kubelet's short hostname
    async with KubeEmulator([*workspace_objects(), j, k8s.workload(j, state="admitted"), *pods, *nodes],
                            latency=LATENCY) as emu:
        for pod in pods:  # both ranks progressing (Hugging Face Trainer dicts, kubelet timestamps)
            emu.pod_logs[(k8s.NS, pod["metadata"]["name"], "trainer")] = "".join(
                f"{(NOW - timedelta(minutes=5 - i)).strftime('%Y-%m-%dT%H:%M:%S.000000000Z')} "
                f"{{'loss': {2 - i / 10:.4f}, 'learning_rate': 4e-05, 'epoch': {i / 10:.2f}}}\n" for i in range(5))
        d, requests = await status(emu, tmp_path, "llama-ft-7b", seen)
        assert d.phase("Runtime progress").state.value == "active"
        assert d.phase("GPU/node health").state.value == "done", d.phase("GPU/node health").summary
        [listed] = [r for r in requests if r.path == "/api/v1/nodes"]
        [got] = [r for r in requests if r.path.startswith("/api/v1/nodes/")]
        assert listed.query["labelSelector"] == "kubernetes.io/hostname in (gpu-node-1)"
        assert got.path.endswith(f"/nodes/{long_name}") and listed.round == got.round == 3
        assert max(r.round for r in requests) == 3 and len(requests) == 8, rounds(requests)


async def test_a_job_with_a_pod_just_created_beside_a_running_one_reads_the_running_ones_log(
        tmp_path: Path, seen: Redis) -> None:
    """The newest pod is still being created (its container waits: the kubelet would refuse its log,
    "is waiting to start"): the running pod's log is read first, one request in round 3 — not a
    refused read, then the running pod's in a fourth round."""
    j = k8s.job("llama-ft-7b", suspend=False, active=2, parallelism=2)
    running = k8s.job_pod(j, index=0, node="gpu-node-1", phase="Running", containers=[k8s.running()], created=10)
    creating = k8s.job_pod(j, index=1, node="gpu-node-1", phase="Pending", created=3000,
                           containers=[k8s.waiting("trainer", reason="ContainerCreating")])
    from tests.live.test_submitter_log import healthy_node
    objects = [*workspace_objects(), j, k8s.workload(j, state="admitted"), running, creating,
               healthy_node("gpu-node-1")]
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        emu.kubelet_log_states = True  # the kubelet's refusal of a container that never started
        emu.pod_logs[(k8s.NS, running["metadata"]["name"], "trainer")] = "".join(
            f"{(NOW - timedelta(minutes=5 - i)).strftime('%Y-%m-%dT%H:%M:%S.000000000Z')} "
            f"{{'loss': {2 - i / 10:.4f}, 'learning_rate': 4e-05, 'epoch': {i / 10:.2f}}}\n" for i in range(5))
        d, requests = await status(emu, tmp_path, "llama-ft-7b", seen)
        assert d.phase("Runtime progress").state.value == "active", d.phase("Runtime progress").summary
        [log] = [r for r in requests if r.path.endswith("/log")]
        assert log.path.endswith(f"/pods/{running['metadata']['name']}/log") and log.round == 3
        assert max(r.round for r in requests) == 3, rounds(requests)
