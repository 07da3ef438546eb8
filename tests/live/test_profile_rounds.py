"""`--run-profile` within a status's own rounds (issue 36, Build item 2; SPEC §6's bounds kept).

As in test_rounds_every_case.py, the emulator answers every request after `LATENCY`, so a
request's round is 1 + the deepest round answered before it arrived (`RecordedRequest.round`).
The profile's reads: the exporter discovery LIST with round 2 (it depends on nothing of the run
but its being live), the metrics reads in round 3 beside the nodes and the log (they need the
run's pods and the exporters). TauGrid's label is listed only when the official one covers no run
node: on a cluster's first such status that is a fourth round, after which the cluster is
remembered and both LISTs go together with round 2.

Shapes: dcgm-exporter pods and scrapes as shared/reference/dcgm-exporter.md (tests/fixtures/dcgm.py);
the XID gauge with dcgm-exporter's `err_code`/`err_msg` labels (internal/pkg/collector/gpu_collector.go);
KubeRay's RayJob, submitter and Ray pods and Ray 2.60's dashboard as in test_submitter_log.py;
Hugging Face Trainer dicts (transformers 4.46) with kubelet timestamps.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from redis import Redis

from tests.fakes.kube_api import KubeEmulator, RecordedRequest
from tests.fixtures import k8s
from tests.fixtures.dcgm import Gpu, exporter_pod, scrape, taugrid_monitor_pod
from tests.fixtures.ray_dashboard import serve_driver_log
from tests.live.test_submitter_log import driver_lines, healthy_node, ray_run, submitter_log
from workers.collect.investigate import diagnose_live, investigate
from workers.collect.plan import ReadMemory, tick_plan
from workers.collect.report import RunReport
from workers.config.settings import Settings
from workers.config.workspaces import load_descriptors
from workers.contracts.commands import StatusCommand
from workers.diagnosis.profile import Stat
from workers.kube.client import Identity, KubeClients
from workers.plumbing.metrics import UNTRUSTED_DROPPED
from workers.records import keys

from .conftest import own, rounds, workspace_objects, write_descriptor
from .test_profile import DCGM_SELECTOR, TAUGRID_SELECTOR, discovery, metrics

NOW = k8s.T0 + timedelta(minutes=60)
ALICE = Identity(user="alice@example.com", groups=("team-vision",))
LATENCY = 0.1  # as test_rounds_every_case.py: a round's requests leave well within one answer time
RAY = "ray-pretrain-13b"
JOB = "llama-ft-7b"


def register(emu: KubeEmulator, exporter: dict, body: str) -> None:
    m = exporter["metadata"]
    emu.register_proxy("pods", m["namespace"], m["name"], 9400, "metrics", body,
                       content_type="text/plain; version=0.0.4")


def gpu_of(pod: dict, index: int, util: float, fb_used: float, node: str) -> Gpu:
    return Gpu(index, pod=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"],
               container=pod["spec"]["containers"][0]["name"], util=util, fb_used=fb_used, node=node)


def with_xid(body: str, gpu: Gpu, node: str, xid: int, err_msg: str) -> str:
    """dcgm-exporter's XID gauge for one GPU (default-counters.csv; `err_code`/`err_msg` labels)."""
    labels = (f'gpu="{gpu.index}",UUID="{gpu.uuid}",Hostname="{node}",container="{gpu.container}",'
              f'namespace="{gpu.namespace}",pod="{gpu.pod}",err_code="{xid}",err_msg="{err_msg}"')
    return (body + "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n"
            "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n" + f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {xid}\n")


async def status(emu: KubeEmulator, tmp_path: Path, run: str, *, profile: bool, seen: Redis | None = None,
                 now: datetime = NOW) -> tuple[RunReport, list[RecordedRequest]]:
    write_descriptor(tmp_path, emu.base_url)
    emu.clear_requests()
    report = await diagnose_live(load_descriptors(tmp_path), run=run, identity=ALICE, now=now,
                                 workspace="vision", profile=profile, seen=seen)
    requests = list(emu.requests)
    assert all(r.header_values("Impersonate-User") == [ALICE.user] for r in requests)
    assert report.requests == len(requests)
    return report, own(requests)


def progressing_job(nodes: tuple[str, ...]) -> tuple[list[dict], list[dict]]:
    """A running 2-rank Job, a rank per GPU node, both logging Trainer dicts; healthy Nodes."""
    j = k8s.job(JOB, suspend=False, active=len(nodes), parallelism=len(nodes))
    pods = [k8s.job_pod(j, index=i, node=name, phase="Running", containers=[k8s.running()])
            for i, name in enumerate(nodes)]
    return [*workspace_objects(), j, k8s.workload(j, state="admitted"), *pods,
            *(healthy_node(n) for n in nodes)], pods


def trainer_log(emu: KubeEmulator, pods: list[dict]) -> None:
    for pod in pods:  # kubelet-timestamped Trainer dicts, the last a minute before NOW
        emu.pod_logs[(k8s.NS, pod["metadata"]["name"], "trainer")] = "".join(
            f"{(NOW - timedelta(minutes=5 - i)).strftime('%Y-%m-%dT%H:%M:%S.000000000Z')} "
            f"{{'loss': {2 - i / 10:.4f}, 'learning_rate': 4e-05, 'epoch': {i / 10:.2f}}}\n" for i in range(5))


async def test_a_running_rayjobs_profile_is_read_within_its_three_rounds(tmp_path: Path) -> None:
    """Discovery with round 2 (the cluster's labelled exporters: no node is known yet), the one GPU
    node's metrics with round 3 beside the nodes and the driver's log; the head's CPU node is not
    read. The same status without `--run-profile` costs two requests less, in the same 3 rounds."""
    objects, sub_pod, service, job_id = ray_run()
    worker = next(o for o in objects if o["kind"] == "Pod" and "worker" in o["metadata"]["name"])
    exporters = [exporter_pod("gpu-node-1"), exporter_pod("aks-system-0"), exporter_pod("gpu-node-9")]
    async with KubeEmulator([*objects, *exporters], latency=LATENCY) as emu:
        lines = driver_lines(10)
        emu.pod_logs[(k8s.NS, sub_pod["metadata"]["name"], "ray-job-submitter")] = submitter_log(job_id, lines, 1)
        serve_driver_log(emu, k8s.NS, service, job_id, "".join(f"{line}\n" for line in lines))
        register(emu, exporters[0], scrape([gpu_of(worker, 0, 88, 40960, "gpu-node-1")], hostname="gpu-node-1"))
        base, base_requests = await status(emu, tmp_path, RAY, profile=False)
        report, requests = await status(emu, tmp_path, RAY, profile=True)
    assert max(r.round for r in base_requests) == 3 and len(base_requests) == 11, rounds(base_requests)
    assert max(r.round for r in requests) == 3 and len(requests) == 11 + 2, rounds(requests)
    [listed] = discovery(requests)
    assert listed.round == 2 and listed.query["labelSelector"] == DCGM_SELECTOR
    assert "fieldSelector" not in listed.query
    [scraped] = metrics(requests)
    assert scraped.round == 3 and f"/pods/{exporters[0]['metadata']['name']}:9400/" in scraped.path
    assert {r.round for r in requests if r.path.endswith("/log") or r.path == "/api/v1/nodes"} == {3}
    profile = report.profile
    assert profile is not None and profile.requests == 2 and profile.nodes == ["gpu-node-1"]
    assert profile.gpu_utilization == Stat(avg=88, max=88, unit="%", gpus=1, of_gpus=1)
    assert report.diagnosis.contract() == base.diagnosis.contract()
    assert report.diagnosis.phase("Runtime progress").state.value == "active"


async def test_a_jobs_profile_on_two_nodes_and_the_fault_it_finds_take_three_rounds(tmp_path: Path) -> None:
    """One discovery, one metrics read per node, all by round 3 — and an XID 79 on one node's
    scrape is the GPU/node health answer (the profile's DCGM health takes part in the diagnosis),
    though the Node objects look healthy."""
    objects, pods = progressing_job(("gpu-node-1", "gpu-node-2"))
    exporters = [exporter_pod("gpu-node-1"), exporter_pod("gpu-node-2")]
    gpus = [gpu_of(pods[0], 0, 91, 61440, "gpu-node-1"), gpu_of(pods[1], 0, 93, 62000, "gpu-node-2")]
    async with KubeEmulator([*objects, *exporters], latency=LATENCY) as emu:
        trainer_log(emu, pods)
        register(emu, exporters[0], scrape([gpus[0]], hostname="gpu-node-1"))
        register(emu, exporters[1], with_xid(scrape([gpus[1]], hostname="gpu-node-2"), gpus[1], "gpu-node-2",
                                             79, "GPU has fallen off the bus"))
        base, base_requests = await status(emu, tmp_path, JOB, profile=False)
        report, requests = await status(emu, tmp_path, JOB, profile=True)
    assert base.diagnosis.phase("GPU/node health").state.value == "done"
    assert max(r.round for r in requests) == 3 and len(requests) == len(base_requests) + 3, rounds(requests)
    assert [r.round for r in discovery(requests)] == [2]
    assert sorted(r.round for r in metrics(requests)) == [3, 3]
    check = report.diagnosis.phase("GPU/node health")
    assert check.state.value == "warning" and "XID 79" in check.summary, check
    assert report.profile is not None and report.profile.gpu_health == {
        "gpu-node-2": ["GPU 0: XID 79 GPU has fallen off the bus"]}


async def test_a_cluster_whose_exporters_carry_only_taugrids_label_takes_four_rounds_once(
        tmp_path: Path, seen: Redis) -> None:
    """The official label covers none of the run's nodes (its exporter runs elsewhere): TauGrid's
    LIST follows it (round 3, filtered to the run's one node) and the metrics take a fourth round.
    The cluster is remembered, so the next status sends both LISTs with round 2 (3 rounds, still
    two discovery requests). When an official exporter comes to the node it wins again, and the
    hint is dropped: the status after sends the official LIST alone."""
    objects, pods = progressing_job(("gpu-node-1",))
    elsewhere, monitor = exporter_pod("gpu-node-7"), taugrid_monitor_pod("gpu-node-1")
    body = scrape([gpu_of(pods[0], 0, 64, 2048, "gpu-node-1")], hostname="gpu-node-1")
    async with KubeEmulator([*objects, elsewhere, monitor], latency=LATENCY) as emu:
        trainer_log(emu, pods)
        register(emu, monitor, body)
        report, requests = await status(emu, tmp_path, JOB, profile=True, seen=seen)
        assert max(r.round for r in requests) == 4, rounds(requests)
        first, second = discovery(requests)
        assert (first.round, first.query["labelSelector"]) == (2, DCGM_SELECTOR)
        assert (second.round, second.query["labelSelector"]) == (3, TAUGRID_SELECTOR)
        assert second.query["fieldSelector"] == "spec.nodeName=gpu-node-1"  # the node known by then
        assert [r.round for r in metrics(requests)] == [4]
        assert report.profile is not None and report.profile.requests == 3

        report, requests = await status(emu, tmp_path, JOB, profile=True, seen=seen)
        assert max(r.round for r in requests) == 3, rounds(requests)
        assert sorted((r.round, r.query["labelSelector"]) for r in discovery(requests)) == [
            (2, DCGM_SELECTOR), (2, TAUGRID_SELECTOR)]
        [scraped] = metrics(requests)
        assert scraped.round == 3 and "/namespaces/taugrid-system/" in scraped.path
        assert report.profile is not None and report.profile.gpu_utilization == Stat(
            avg=64, max=64, unit="%", gpus=1, of_gpus=1)

        official = exporter_pod("gpu-node-1")
        emu.upsert(official)
        register(emu, official, body)
        _report, requests = await status(emu, tmp_path, JOB, profile=True, seen=seen)
        assert len(discovery(requests)) == 2 and max(r.round for r in requests) == 3
        [scraped] = metrics(requests)
        assert "/namespaces/gpu-operator/" in scraped.path  # the official label's answer wins
        _report, requests = await status(emu, tmp_path, JOB, profile=True, seen=seen)
        assert [r.query["labelSelector"] for r in discovery(requests)] == [DCGM_SELECTOR]


async def test_a_hostile_exporter_hint_is_ignored_counted_and_sends_nothing_early(
        tmp_path: Path, seen: Redis) -> None:
    """SPEC §11: the hint is read back from Redis; anything but the one value written is none."""
    objects, pods = progressing_job(("gpu-node-1",))
    exporter = exporter_pod("gpu-node-1")
    async with KubeEmulator([*objects, exporter], latency=LATENCY) as emu:
        trainer_log(emu, pods)
        register(emu, exporter, scrape([gpu_of(pods[0], 0, 50, 1024, "gpu-node-1")], hostname="gpu-node-1"))
        write_descriptor(tmp_path, emu.base_url)
        cluster = load_descriptors(tmp_path).descriptors[0].descriptor.cluster_target().model_dump_json()
        seen.set(keys.exporter_labels_key(cluster), "both\n; taugrid.io/gpu-monitoring=true,x")
        before = UNTRUSTED_DROPPED.labels("exporter_hint")._value.get()
        report, requests = await status(emu, tmp_path, JOB, profile=True, seen=seen)
    assert UNTRUSTED_DROPPED.labels("exporter_hint")._value.get() == before + 1
    assert [r.query["labelSelector"] for r in discovery(requests)] == [DCGM_SELECTOR]
    assert max(r.round for r in requests) == 3
    assert report.profile is not None and report.profile.gpu_utilization.status == "observed"


async def test_a_suspended_run_lists_no_exporter(tmp_path: Path) -> None:
    """Kueue holds the Job suspended: it has no pods, so nothing is discovered — still 2 rounds."""
    job = k8s.job(JOB, suspend=True)
    objects = [*workspace_objects(), job, k8s.workload(job, state="pending"), exporter_pod("gpu-node-1")]
    async with KubeEmulator(objects, latency=LATENCY) as emu:
        report, requests = await status(emu, tmp_path, JOB, profile=True)
    assert report.diagnosis.first_incomplete == "Kueue admission"
    assert not discovery(requests) and max(r.round for r in requests) == 2, rounds(requests)
    assert report.profile is not None and report.profile.requests == 0
    assert report.profile.gpu_utilization.status == "unavailable"


async def test_a_watch_ticks_full_read_with_the_profile_takes_three_rounds(tmp_path: Path, seen: Redis) -> None:
    """`--watch --run-profile`: the telemetry is new each tick, so no probe stands in for a tick
    (`ReadMemory.after_full_read`); each tick is a full read with the profile, in 3 rounds."""
    objects, pods = progressing_job(("gpu-node-1", "gpu-node-2"))
    exporters = [exporter_pod("gpu-node-1"), exporter_pod("gpu-node-2")]
    command = StatusCommand(run=JOB, workspace="vision", watch=True, run_profile=True)
    settings = Settings()
    memory = ReadMemory()
    async with KubeEmulator([*objects, *exporters], latency=LATENCY) as emu:
        trainer_log(emu, pods)
        for exporter, pod in zip(exporters, pods, strict=True):
            node = pod["spec"]["nodeName"]
            register(emu, exporter, scrape([gpu_of(pod, 0, 70, 4096, node)], hostname=node))
        write_descriptor(tmp_path, emu.base_url)
        resolution = load_descriptors(tmp_path).resolve(workspace="vision")
        for tick in (1, 2):
            plan = tick_plan(settings, command, memory, tick=tick, now=NOW, deadline=NOW + timedelta(hours=1))
            assert plan.probe is None and plan.full.profile
            emu.clear_requests()
            live = await investigate(resolution, kube=KubeClients(), identity=ALICE, now=NOW, plan=plan.full,
                                     seen=seen)
            requests = own(list(emu.requests))
            assert max(r.round for r in requests) == 3, rounds(requests)
            assert [r.round for r in discovery(requests)] == [2]
            assert sorted(r.round for r in metrics(requests)) == [3, 3]
            assert live.profile is not None and live.profile.gpu_utilization.status == "observed"
            memory.after_full_read(tick, live, run_profile=True)
