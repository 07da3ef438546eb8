"""taubot's experiment record (SPEC §10, §11 "Experiment store") from real MLflow 3.17 tracking servers.

Seeded through MLflow's own REST API: the team's long-lived experiment first, its
runs (several per `taugrid.io/run` tag, MLflow system metrics, a deleted run),
then 1,100 newer experiments, so that — experiments coming back most recently
updated first — the team's is on the second page, as on a busy real server.
A second server runs MLflow's own auth app (HTTP Basic).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from tests.live.conftest import workspace_objects, write_descriptor
from workers.collect.experiments import MlflowAuth, experiment_record
from workers.collect.investigate import diagnose_live
from workers.config.settings import load_settings
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity

from .conftest import NOW, MlflowServer, ago, ms

ALICE = Identity(user="alice@example.com", groups=("team-vision",))


def ms_stamp(moment) -> str:  # noqa: ANN001
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")

RUN = "llama-ft-7b"
TEAM = "vision/pretrain"
OTHER_EXPERIMENTS = 1100


@dataclass
class Seeded:
    plain: MlflowServer
    auth: MlflowServer
    current_run: str  # the run_id taubot must pick: the newest live run with the tag


async def _call(s: aiohttp.ClientSession, server: MlflowServer, method: str, body: dict) -> dict:
    headers = {"Authorization": aiohttp.encode_basic_auth(server.username, server.password or "")
               } if server.username else {}
    async with s.post(f"{server.url}/api/2.0/mlflow/{method}", json=body, headers=headers) as r:
        got = await r.json()
        assert r.status == 200, got
        return got


async def _run(s: aiohttp.ClientSession, server: MlflowServer, experiment: str, *, started: float,
               metrics: list[tuple[str, float, float, int]]) -> str:
    """A run tagged `taugrid.io/run=RUN` started `started` minutes ago; metrics (key, value,
    minutes ago, step)."""
    run = await _call(s, server, "runs/create", {
        "experiment_id": experiment, "start_time": ms(ago(started)), "run_name": f"{RUN}-attempt",
        "tags": [{"key": "taugrid.io/run", "value": RUN}]})
    run_id = run["run"]["info"]["run_id"]
    await _call(s, server, "runs/log-batch", {"run_id": run_id, "metrics": [
        {"key": k, "value": v, "timestamp": ms(ago(m)), "step": step} for k, v, m, step in metrics]})
    return run_id


async def _seed(plain: MlflowServer, auth: MlflowServer) -> str:
    async with aiohttp.ClientSession() as s:
        team = (await _call(s, plain, "experiments/create", {"name": TEAM}))["experiment_id"]
        # An earlier attempt of the same run: older, further behind.
        await _run(s, plain, team, started=300, metrics=[("loss", 2.9, 250, 120)])
        # The current attempt: training stopped 45 minutes ago at step 400, while MLflow's system
        # metrics (mlflow.enable_system_metrics_logging) go on at step 0 with fresh timestamps.
        current = await _run(s, plain, team, started=120, metrics=[
            ("loss", 2.4, 50, 380), ("loss", 2.39, 45, 400), ("learning_rate", 4e-5, 45, 400),
            ("system/cpu_utilization_percentage", 97.0, 1, 0), ("system/gpu_0_utilization_percentage", 0.0, 1, 0),
            ("system/system_memory_usage_megabytes", 61000.0, 1, 0)])
        # A newer attempt, deleted: never the record.
        deleted = await _run(s, plain, team, started=10, metrics=[("loss", 9.9, 5, 9999)])
        await _call(s, plain, "runs/delete", {"run_id": deleted})
        limit = asyncio.Semaphore(8)

        async def other(i: int) -> None:
            async with limit:
                await _call(s, plain, "experiments/create", {"name": f"sweeps/vit-{i:04d}"})
        await asyncio.gather(*(other(i) for i in range(OTHER_EXPERIMENTS)))

        secured = (await _call(s, auth, "experiments/create", {"name": TEAM}))["experiment_id"]
        await _run(s, auth, secured, started=30, metrics=[("loss", 1.7, 2, 800)])
    return current


@pytest.fixture(scope="session")
def seeded(mlflow_servers: tuple[MlflowServer, MlflowServer]) -> Iterator[Seeded]:
    plain, auth = mlflow_servers
    yield Seeded(plain, auth, asyncio.run(_seed(plain, auth)))


async def test_the_teams_experiment_beyond_the_first_page_is_found(seeded: Seeded) -> None:
    record = await experiment_record(seeded.plain.url, RUN, auth=MlflowAuth(), timeout=30)
    assert record.unavailable is None and record.found, record
    assert record.run_id == seeded.current_run  # newest live attempt; the deleted one is not a record


async def test_system_metrics_are_not_training_progress(seeded: Seeded) -> None:
    record = await experiment_record(seeded.plain.url, RUN, auth=MlflowAuth(), timeout=30)
    assert record.last_step == 400
    assert record.last_metric_at == ago(45)  # not the system metrics' fresh heartbeat


async def test_the_experiment_named_by_the_descriptor_is_looked_up_by_name(seeded: Seeded) -> None:
    record = await experiment_record(seeded.plain.url, RUN, auth=MlflowAuth(), timeout=30, experiment=TEAM)
    assert record.run_id == seeded.current_run and record.last_step == 400
    missing = await experiment_record(seeded.plain.url, RUN, auth=MlflowAuth(), timeout=30,
                                      experiment="vision/no-such-experiment")
    assert missing.unavailable is not None and "vision/no-such-experiment" in missing.unavailable


async def test_a_server_with_mlflows_basic_auth(seeded: Seeded) -> None:
    server = seeded.auth
    record = await experiment_record(server.url, RUN, timeout=30,
                                     auth=MlflowAuth(username=server.username, password=server.password))
    assert record.found and record.last_step == 800
    refused = await experiment_record(server.url, RUN, auth=MlflowAuth(), timeout=30)
    # 401 with an HTML body: unavailable and why, never "no record".
    assert not refused.found and refused.unavailable is not None and "401" in refused.unavailable
    wrong = await experiment_record(server.url, RUN, timeout=30,
                                    auth=MlflowAuth(username=server.username, password="not-the-password"))
    assert wrong.unavailable is not None and "401" in wrong.unavailable
    assert "not-the-password" not in wrong.unavailable


async def test_a_status_reads_the_named_experiment_with_basic_auth_from_settings(
        seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path: TAUBOT_MLFLOW_USERNAME and TAUBOT_MLFLOW_PASSWORD_FILE (a mounted Secret), the
    descriptor naming the store and its experiment, a live status of a running Job."""
    server = seeded.auth
    secret = tmp_path / "mlflow-password"
    secret.write_text(f"{server.password}\n")
    monkeypatch.setenv("TAUBOT_MLFLOW_USERNAME", server.username or "")
    monkeypatch.setenv("TAUBOT_MLFLOW_PASSWORD_FILE", str(secret))
    auth = MlflowAuth.from_settings(load_settings())
    job = k8s.job(RUN, suspend=False, active=1)
    pod = k8s.job_pod(job, node="gpu-node-1", phase="Running", containers=[k8s.running()])
    async with KubeEmulator([*workspace_objects(), job, k8s.workload(job, state="admitted"), pod]) as emu:
        emu.pod_logs[(k8s.NS, pod["metadata"]["name"], pod["spec"]["containers"][0]["name"])] = \
            f"{ms_stamp(ago(1))} step=800 loss=1.7000\n"  # kubelet --timestamps shape
        path = write_descriptor(tmp_path, emu.base_url)
        doc = yaml.safe_load(path.read_text())
        doc["spec"]["experiments"] = {"mlflow": {"uri": server.url, "experiment": TEAM}}
        path.write_text(yaml.safe_dump(doc))
        d = (await diagnose_live(load_descriptors(tmp_path), run=RUN, identity=ALICE, now=NOW,
                                 workspace="vision", mlflow_auth=auth)).diagnosis
    check = d.phase("Durable evidence")
    assert check.state.value == "active" and "step 800" in check.summary, check
