"""taubot against a real Ray 2.60 head: real jobs, their real driver logs, read through `services/proxy`.

The RayJob, its RayCluster and pods are KubeRay's shapes (tests/fixtures/k8s.py);
the Ray side is real: each RayJob's `status.jobId` is a submission id of a job
really submitted to the session's Ray head (tests/real/jobs/train.py), and the
emulator's `services/<cluster>-head-svc:dashboard/proxy/…` forwards to the
real dashboard, as the API server forwards to the head service.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from tests.live.conftest import workspace_objects, write_descriptor
from workers.collect.investigate import diagnose_live
from workers.collect.logs.sources import logs_live
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity

from .conftest import CASES, RayHead

NOW = k8s.T0 + timedelta(minutes=30)
ALICE = Identity(user="alice@example.com", groups=("team-vision",))
KUBERAY = {"SUCCEEDED": ("Complete", None), "FAILED": ("Failed", "AppFailed"), None: ("Running", None)}


def ray_objects(run: str, *, service: bool = True) -> list[dict]:
    """What the cluster holds for a RayJob whose Ray job is `CASES[run]` in its current state."""
    case = CASES[run]
    deployment, reason = KUBERAY[case.final]
    rj = k8s.rayjob(run, deployment_status=deployment, job_status=case.final or "RUNNING", reason=reason)
    rc = k8s.raycluster(rayjob=rj, state="ready")
    pods = [k8s.ray_pod(rc, "head", phase="Running", containers=[k8s.running("ray-head")]),
            k8s.ray_pod(rc, "worker", phase="Running", containers=[k8s.running("ray-worker")])]
    objects = [*workspace_objects(), rj, rc, *pods, k8s.workload(rj, state="admitted")]
    if service:
        objects.append({"apiVersion": "v1", "kind": "Service",
                        "metadata": {"name": f"{rj['status']['rayClusterName']}-head-svc", "namespace": k8s.NS},
                        "spec": {"ports": [{"name": "dashboard", "port": 8265}]}})
    return objects


@pytest.fixture
async def cluster(ray_head: RayHead, ray_jobs: dict[str, dict], tmp_path: Path) -> AsyncIterator[KubeEmulator]:
    """The emulator holding every case's RayJob, its head service forwarding to the real dashboard."""
    objects: dict[tuple[str, str], dict] = {}
    for run in CASES:
        for obj in ray_objects(run):
            objects[(obj["kind"], obj["metadata"]["name"])] = obj
    async with KubeEmulator(list(objects.values())) as emu:
        for run in CASES:
            cluster_name = k8s.raycluster_name_for(run)
            emu.forward_proxy("Service", k8s.NS, f"{cluster_name}-head-svc", "dashboard", ray_head.url)
        write_descriptor(tmp_path, emu.base_url)
        yield emu


async def status(emu: KubeEmulator, tmp_path: Path, run: str):  # noqa: ANN201
    return (await diagnose_live(load_descriptors(tmp_path), run=run, identity=ALICE, now=NOW,
                                workspace="vision")).diagnosis


async def logs(tmp_path: Path, run: str, tail: int = 200):  # noqa: ANN201
    return await logs_live(load_descriptors(tmp_path), run=run, identity=ALICE, now=NOW, workspace="vision",
                           tail=tail)


async def test_hugging_face_driver_log_of_a_finished_job_is_its_progress(cluster: KubeEmulator,
                                                                        tmp_path: Path) -> None:
    got = await logs(tmp_path, "hf-driver")
    assert got.source == "ray-dashboard" and got.unavailable == []
    texts = [line.text for line in got.lines]
    # transformers 5 prints string values; Ray's Jobs API gives no per-line time.
    assert "{'loss': '2.3', 'grad_norm': '1.147', 'learning_rate': '0.0004993', 'epoch': '0.2'}" in texts
    assert all(line.time is None for line in got.lines)
    check = (await status(cluster, tmp_path, "hf-driver")).phase("Runtime progress")
    assert check.state.value == "done" and "loss 2.3" in check.summary
    assert "last checkpoint: /tmp/out/checkpoint-20" in " ".join(check.evidence)
    assert all(r.header_values("Impersonate-User") == ["alice@example.com"] for r in cluster.requests)


async def test_progress_printed_by_ray_workers_then_silence_is_progress_of_unknown_time(
        cluster: KubeEmulator, tmp_path: Path) -> None:
    got = await logs(tmp_path, "ray-workers-hang")
    worker_lines = [line.text for line in got.lines if "RayTrainWorker pid=" in line.text]
    assert len(worker_lines) == 30
    assert not any("\x1b" in line.text for line in got.lines)  # Ray's ANSI colour never reaches a card
    d = await status(cluster, tmp_path, "ray-workers-hang")
    check = d.phase("Runtime progress")
    assert check.state.value == "active" and "loss 2.2" in check.summary
    # One untimed read cannot say when progress last moved (SPEC §11), nor that it is recent.
    assert "time of the last progress line unknown" in check.summary


@pytest.mark.parametrize(("run", "summary"), [
    ("bars", "step 50"),  # tqdm's last state, Ray turned each `\r` redraw into a line
    ("steps", "step 500"),
    ("many-lines", "step 200,000"),
])
async def test_finished_jobs_report_their_last_step(cluster: KubeEmulator, tmp_path: Path, run: str,
                                                   summary: str) -> None:
    check = (await status(cluster, tmp_path, run)).phase("Runtime progress")
    assert check.state.value == "done" and summary in check.summary, check


async def test_a_200000_line_log_is_read_as_a_bounded_tail(cluster: KubeEmulator, tmp_path: Path) -> None:
    cluster.clear_requests()
    got = await logs(tmp_path, "many-lines", tail=200)
    assert [line.text for line in got.lines][-1] == "step=200000 loss=2.00000 lr=3.0e-04"
    assert got.truncated is True and len(got.lines) == 200
    proxied = [r for r in cluster.requests if "/proxy/" in r.path]
    # Ray's log API takes `lines=N`; the Jobs API's /logs answers the whole 6 MB log every time.
    assert proxied and not any(r.path.endswith("/logs") for r in proxied), [r.path for r in proxied]
    assert any(r.query.get("lines") for r in proxied)


@pytest.mark.parametrize(("run", "signature"), [
    ("hang-dump", "faulthandler dumped the stacks of a hung process"),
    ("crash", "ValueError: invalid literal for int() with base 10: 'three'"),
    ("oom", "CUDA out of memory"),
])
async def test_failed_jobs_name_their_failure(cluster: KubeEmulator, tmp_path: Path, run: str,
                                              signature: str) -> None:
    d = await status(cluster, tmp_path, run)
    check = d.phase("Runtime progress")
    assert check.state.value == "warning" and signature in check.summary, check
    assert check.finding.owner == "researcher"


async def test_a_log_with_a_byte_that_is_not_utf8_is_still_read(cluster: KubeEmulator, tmp_path: Path) -> None:
    # Ray's Jobs API answers 500 for it (reference §2.6); its log API serves the file.
    got = await logs(tmp_path, "bad-byte")
    assert got.source == "ray-dashboard", got.unavailable
    assert [line.text for line in got.lines][-1] == "step=150 loss=2.7000"
    assert any("\ufffd" in line.text for line in got.lines)  # the byte shows as a replacement character


async def test_rays_own_404_is_not_a_missing_head_service(ray_head: RayHead, tmp_path: Path) -> None:
    objects = ray_objects("steps")
    rj = next(o for o in objects if o["kind"] == "RayJob")
    rj["status"]["jobId"] = "steps-gone1"  # a submission id the head never saw (a re-created head)
    async with KubeEmulator(objects) as emu:
        emu.forward_proxy("Service", k8s.NS, f"{rj['status']['rayClusterName']}-head-svc", "dashboard",
                          ray_head.url)
        write_descriptor(tmp_path, emu.base_url)
        got = await logs(tmp_path, "steps")
    assert got.source != "ray-dashboard"
    assert any("Ray job steps-gone1 does not exist" in why for why in got.unavailable), got.unavailable
    assert not any("head service gone" in why for why in got.unavailable)


async def test_a_missing_head_service_is_said_so(ray_head: RayHead, tmp_path: Path) -> None:
    async with KubeEmulator(ray_objects("steps", service=False)) as emu:
        write_descriptor(tmp_path, emu.base_url)
        got = await logs(tmp_path, "steps")
    # The API server's own 404 (a JSON Status): the service is gone, not the job.
    assert "head service gone" in got.unavailable and not any("Ray job" in why for why in got.unavailable)


async def test_a_status_reads_the_driver_log_in_one_request_from_the_head_pods_ip(
        ray_head: RayHead, ray_jobs: dict[str, dict], tmp_path: Path) -> None:
    """Issue 28: a status knows the head pod's IP from its pods, so Ray's log API is asked with it
    (`node_ip`) and the submission id, and Ray finds the driver's node itself — the job's details
    are not read first. The IP is the pod's as KubeRay reports it, not the real head's address:
    Ray needs a node only to accept the query."""
    objects = ray_objects("steps")
    for obj in objects:
        if obj.get("kind") == "Pod" and obj["metadata"]["labels"].get("ray.io/node-type") == "head":
            obj["status"]["podIP"] = "10.244.1.12"
    async with KubeEmulator(objects) as emu:
        emu.forward_proxy("Service", k8s.NS, f"{k8s.raycluster_name_for('steps')}-head-svc", "dashboard",
                          ray_head.url)
        write_descriptor(tmp_path, emu.base_url)
        d = await status(emu, tmp_path, "steps")
        check = d.phase("Runtime progress")
        assert check.state.value == "done", check
        [read] = [r for r in emu.requests if "/proxy/" in r.path]
        assert read.path.endswith("/proxy/api/v0/logs/file")
        assert read.query["node_ip"] == "10.244.1.12" and read.query["submission_id"] == CASES["steps"].submission_id
