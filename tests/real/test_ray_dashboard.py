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
from workers.kube.client import Identity
from workers.workspaces import load_descriptors

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


@pytest.mark.parametrize(("run", "summary"), [
    ("bars", "step 50"),  # tqdm's last state, Ray turned each `\r` redraw into a line
    ("steps", "step 500"),
    ("many-lines", "step 200,000"),
])
async def test_finished_jobs_report_their_last_step(cluster: KubeEmulator, tmp_path: Path, run: str,
                                                   summary: str) -> None:
    check = (await status(cluster, tmp_path, run)).phase("Runtime progress")
    assert check.state.value == "done" and summary in check.summary, check


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
