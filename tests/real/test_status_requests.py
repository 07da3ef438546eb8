"""Requests per live status with layers 6–8, on a RayJob whose Ray job really runs (issue 25 figure).

The Ray side is real: `ray-workers-hang` is a job really submitted to the session's Ray head
(tests/real/jobs/train.py), silent after its last progress line; its head service forwards to the
real dashboard. The experiment record comes from a real MLflow 3.17 server. The RayJob, its
RayCluster, pods (bound to nodes) and Nodes are KubeRay's and AKS's shapes (tests/fixtures/k8s.py,
tests/diagnosis/test_node_health.py). Without a submitter pod (HTTPMode, or its pod gone), the
driver log is read from the dashboard: the most expensive path a status takes.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import yaml

from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from tests.live.conftest import workspace_objects, write_descriptor
from tests.live.test_submitter_log import healthy_node
from workers.collect.investigate import diagnose_live
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity

from .conftest import NOW, MlflowServer, RayHead, ago, ms

ALICE = Identity(user="alice@example.com", groups=("team-vision",))
RUN = "ray-workers-hang"
EXPERIMENT = "vision/ray-requests"


async def _record(server: MlflowServer) -> None:
    """An experiment named for the descriptor and one run tagged with the RayJob, through MLflow's REST API."""
    async with aiohttp.ClientSession() as s:
        async def call(method: str, body: dict) -> dict:
            async with s.post(f"{server.url}/api/2.0/mlflow/{method}", json=body) as r:
                got = await r.json()
                assert r.status == 200, got
                return got
        experiment = (await call("experiments/create", {"name": EXPERIMENT}))["experiment_id"]
        run = await call("runs/create", {"experiment_id": experiment, "start_time": ms(ago(30)),
                                         "tags": [{"key": "taugrid.io/run", "value": RUN}]})
        await call("runs/log-batch", {"run_id": run["run"]["info"]["run_id"], "metrics": [
            {"key": "loss", "value": 2.2, "timestamp": ms(ago(2)), "step": 30}]})


async def test_a_live_rayjob_status_with_layers_6_to_8_makes_at_most_12_requests(
        ray_head: RayHead, ray_jobs: dict[str, dict], mlflow_servers: tuple[MlflowServer, MlflowServer],
        tmp_path: Path) -> None:
    plain, _ = mlflow_servers
    await _record(plain)
    rj = k8s.rayjob(RUN)
    rj["status"]["jobId"] = ray_jobs[RUN]["submission_id"]
    rc = k8s.raycluster(rayjob=rj, state="ready")
    pods = [k8s.ray_pod(rc, "head", node="aks-system-0", phase="Running", containers=[k8s.running("ray-head")]),
            k8s.ray_pod(rc, "worker", node="gpu-node-1", phase="Running", containers=[k8s.running("ray-worker")])]
    service = f"{rj['status']['rayClusterName']}-head-svc"
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": service, "namespace": k8s.NS},
           "spec": {"ports": [{"name": "dashboard", "port": 8265}]}}
    objects = [*workspace_objects(), rj, rc, *pods, svc, k8s.workload(rj, state="admitted"),
               healthy_node("aks-system-0"), healthy_node("gpu-node-1")]
    async with KubeEmulator(objects) as emu:
        emu.forward_proxy("Service", k8s.NS, service, "dashboard", ray_head.url)
        path = write_descriptor(tmp_path, emu.base_url)
        doc = yaml.safe_load(path.read_text())
        doc["spec"]["experiments"] = {"mlflow": {"uri": plain.url, "experiment": EXPERIMENT}}
        path.write_text(yaml.safe_dump(doc))
        report = await diagnose_live(load_descriptors(tmp_path), run=RUN, identity=ALICE, now=NOW,
                                     workspace="vision", timeout=30)
        d = report.diagnosis
        assert [c.name for c in d.checks] == ["GPU/node health", "Runtime progress", "Durable evidence"]
        assert d.phase("GPU/node health").state.value == "done"
        assert "loss 2.2" in d.phase("Runtime progress").summary
        assert d.phase("Durable evidence").state.value == "active", d.phase("Durable evidence")
        assert d.recovery is not None
        print(f"requests per status, layers 6-8, live RayJob (real Ray dashboard, real MLflow): {report.requests}")
        assert report.requests == len(emu.requests) <= 12, [r.path for r in emu.requests]
