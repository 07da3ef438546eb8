"""Layer 7 in a live status: the log read once the main process started, and the MLflow record.

Through the emulator (pods/log, the Ray dashboard through services/proxy),
the fake MLflow server (REST 2.0 JSON shapes) and the real collection code.
Log lines are Hugging Face Trainer dicts (transformers 4.46
`trainer_callback.py`) with the kubelet's `--timestamps` prefix.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import yaml

from tests.fakes.kube_api import KubeEmulator
from tests.fakes.mlflow_api import running_fake_mlflow
from tests.fixtures import k8s
from tests.fixtures.ray_dashboard import serve_driver_log
from workers.collect.investigate import diagnose_live
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity

from .conftest import workspace_objects, write_descriptor

NOW = k8s.T0 + timedelta(minutes=30)
ALICE = Identity(user="alice@example.com", groups=("team-vision",))


def trainer_log(minutes_ago_last: int, n: int = 8) -> str:
    return "".join(
        (NOW - timedelta(minutes=minutes_ago_last + n - i)).strftime("%Y-%m-%dT%H:%M:%S.000000000Z ")
        + f"{{'loss': {2 - i / 10:.4f}, 'grad_norm': 1.1, 'learning_rate': 4e-05, 'epoch': {i / 10:.2f}}}\n"
        for i in range(n))


def running_job() -> tuple[list[dict], dict]:
    j = k8s.job("llama-ft-7b", suspend=False, active=1)
    pod = k8s.job_pod(j, node="gpu-node-1", phase="Running", containers=[k8s.running()])
    return [j, k8s.workload(j, state="admitted"), pod], pod


async def live(emu: KubeEmulator, tmp_path: Path, run: str, **extra: object):  # noqa: ANN201
    write_descriptor(tmp_path, emu.base_url)
    return await diagnose_live(load_descriptors(tmp_path), run=run, identity=ALICE, now=NOW, workspace="vision",
                               **extra)  # type: ignore[arg-type]


async def test_running_job_with_a_progressing_log_is_active_within_the_request_budget(tmp_path: Path) -> None:
    objects, pod = running_job()
    async with KubeEmulator([*workspace_objects(), *objects]) as emu:
        container = pod["spec"]["containers"][0]["name"]
        emu.pod_logs[(k8s.NS, pod["metadata"]["name"], container)] = trainer_log(2)
        result = await live(emu, tmp_path, "llama-ft-7b")
        d = result.diagnosis
        assert d.first_incomplete == "Runtime progress" and d.phase("Runtime progress").state.value == "active"
        assert [r for r in emu.requests if r.path.endswith("/log")][0].query["timestamps"] == "true"
        assert len(emu.requests) <= 10
        assert all(r.header_values("Impersonate-User") == ["alice@example.com"] for r in emu.requests)


async def test_running_job_whose_log_stopped_an_hour_ago_is_a_stall(tmp_path: Path) -> None:
    objects, pod = running_job()
    async with KubeEmulator([*workspace_objects(), *objects]) as emu:
        emu.pod_logs[(k8s.NS, pod["metadata"]["name"], pod["spec"]["containers"][0]["name"])] = trainer_log(60)
        d = (await live(emu, tmp_path, "llama-ft-7b")).diagnosis
        assert d.phase("Runtime progress").state.value == "warning"
        assert d.first_incomplete == "Runtime progress" and d.owner == "researcher"


async def test_running_rayjob_reads_the_driver_log_within_the_budget(tmp_path: Path) -> None:
    rj = k8s.rayjob("ray-pretrain-13b")
    rc = k8s.raycluster(rayjob=rj, state="ready")
    pods = [k8s.ray_pod(rc, "head", phase="Running", containers=[k8s.running("ray-head")]),
            k8s.ray_pod(rc, "worker", phase="Running", containers=[k8s.running("ray-worker")])]
    status = rj["status"]
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": f"{status['rayClusterName']}-head-svc", "namespace": k8s.NS}}
    async with KubeEmulator([*workspace_objects(), rj, rc, *pods, service,
                             k8s.workload(rj, state="admitted")]) as emu:
        log = "\n".join(line.split(" ", 1)[1] for line in trainer_log(1).splitlines())
        serve_driver_log(emu, k8s.NS, f"{status['rayClusterName']}-head-svc", status["jobId"], log)
        d = (await live(emu, tmp_path, "ray-pretrain-13b")).diagnosis
        check = d.phase("Runtime progress")
        # Dashboard lines carry no timestamp: progress without a time is never called a stall.
        assert check.state.value == "active" and "loss 1.3" in check.summary
        assert any("/proxy/api/jobs/" in r.path for r in emu.requests)
        # The driver log is read only after Alice's `get pods/log` review (issue 26.6): one more.
        [review] = [r for r in emu.requests if r.path.endswith("/selfsubjectaccessreviews")
                    and (r.body["spec"]["resourceAttributes"].get("subresource") == "log")]
        assert review.header_values("Impersonate-User") == ["alice@example.com"]
        # issue 25: the job's details, then a bounded tail of its log; +1 the LocalQueue a process that
        # knows no ClusterQueue for it reads in round 1 (issue 35)
        assert len(emu.requests) <= 13


async def test_durable_evidence_from_mlflow_after_the_users_access_review(tmp_path: Path) -> None:
    objects, pod = running_job()
    with running_fake_mlflow() as mlflow:
        stale_ms = int((NOW - timedelta(hours=3)).timestamp() * 1000)
        mlflow.add_run("a1b2c3", {"taugrid.io/run": "llama-ft-7b"},
                       [{"key": "loss", "value": 2.4, "timestamp": stale_ms, "step": 400}])
        async with KubeEmulator([*workspace_objects(), *objects]) as emu:
            emu.pod_logs[(k8s.NS, pod["metadata"]["name"], pod["spec"]["containers"][0]["name"])] = trainer_log(2)
            path = write_descriptor(tmp_path, emu.base_url)
            doc = yaml.safe_load(path.read_text())
            doc["spec"]["experiments"] = {"mlflow": {"uri": mlflow.base_url}}
            path.write_text(yaml.safe_dump(doc))
            result = await diagnose_live(load_descriptors(tmp_path), run="llama-ft-7b", identity=ALICE, now=NOW,
                                         workspace="vision", mlflow_token="mlflow-secret")
            check = result.diagnosis.phase("Durable evidence")
            assert check.state.value == "warning" and check.finding.owner == "taugrid-owner"
            assert "record a1b2c3 stale: step 400" in check.summary
            reviews = [r.body["spec"]["resourceAttributes"] for r in emu.requests
                       if r.path.endswith("/selfsubjectaccessreviews")]
            assert {"verb": "get", "resource": "jobs", "group": "batch", "namespace": k8s.NS,
                    "name": "llama-ft-7b"} in reviews
            assert [m for _, m, _ in mlflow.requests] == ["experiments/search", "runs/search", "runs/get"]
            assert mlflow.requests[0][2]["Authorization"] == "Bearer mlflow-secret"

            emu.forbid("get", "jobs", user="alice@example.com")
            mlflow.requests.clear()
            denied = await diagnose_live(load_descriptors(tmp_path), run="llama-ft-7b", identity=ALICE, now=NOW,
                                         workspace="vision", mlflow_token="mlflow-secret")
            assert mlflow.requests == []  # no read with the bot's token for a user who may not read the run
            assert "permission denied" in denied.diagnosis.phase("Submitted").summary



async def test_a_secret_in_the_crash_line_never_reaches_the_evidence(tmp_path: Path) -> None:
    """The collector redacts log lines before the engine quotes the crash line as evidence (cards,
    Details and handoffs show it). The traceback's last line is SQLAlchemy's OperationalError
    wording quoting psycopg2's DSN, as a failed connection prints it."""
    objects, pod = running_job()
    stamp = (NOW - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S.000000000Z ")
    crash = [trainer_log(3, 3), stamp + "Traceback (most recent call last):\n",
             stamp + '  File "/app/train.py", line 88, in <module>\n',
             stamp + "sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection to server "
             "failed for postgresql://trainer:hunter2s3cret@db.internal:5432/runs\n"]
    async with KubeEmulator([*workspace_objects(), *objects]) as emu:
        emu.pod_logs[(k8s.NS, pod["metadata"]["name"], pod["spec"]["containers"][0]["name"])] = "".join(crash)
        d = (await live(emu, tmp_path, "llama-ft-7b")).diagnosis
    progress = d.phase("Runtime progress")
    assert progress.reason == "progress.crashed"
    told = " ".join([progress.summary, *progress.evidence, *d.evidence])
    assert "OperationalError" in told and "hunter2s3cret" not in told
