"""A RayJob's progress is timed by its KubeRay submitter pod's log (issue 25, SPEC §11).

Ray's Jobs API gives no per-line time; the submitter pod (`<rayjob>-<5>`, container
`ray-job-submitter`, running `ray job submit --no-wait …; ray job logs --follow`: KubeRay
common/job.go, shared/reference/training-logs.md §2.1) mirrors the driver's log, and its kubelet
log read with `timestamps=true` stamps each line as it arrived. Through the emulator (`pods/log`
with the kubelet's RFC 3339 prefix, as `kubectl logs --timestamps` prints it; the dashboard behind
`services/proxy` as Ray 2.60 answers, tests/fixtures/ray_dashboard.py) and the real collection code.

The submitter's first lines are `ray job submit`'s own output (the shape quoted in
ray-project/ray#51601); the driver's are Hugging Face Trainer dicts (transformers 4.46
`trainer_callback.py`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from tests.diagnosis.test_node_health import node
from tests.fakes.kube_api import KubeEmulator
from tests.fakes.mlflow_api import running_fake_mlflow
from tests.fixtures import k8s
from tests.fixtures.ray_dashboard import serve_driver_log
from workers.collect.investigate import diagnose_live
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity

from .conftest import own, workspace_objects, write_descriptor

NOW = k8s.T0 + timedelta(minutes=60)
ALICE = Identity(user="alice@example.com", groups=("team-vision",))
RUN = "ray-pretrain-13b"


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%f000Z ")


def driver_lines(n: int) -> list[str]:
    return [f"{{'loss': {2 - i / 20:.4f}, 'grad_norm': 1.1, 'learning_rate': 4e-05, 'epoch': {i / 20:.2f}}}"
            for i in range(n)]


def submitter_log(job_id: str, lines: list[str], last_minutes_ago: float) -> str:
    """`kubectl logs --timestamps` of the submitter: submit's output, then the mirrored driver lines,
    one a minute, the last ``last_minutes_ago`` before NOW."""
    submitted = NOW - timedelta(minutes=last_minutes_ago + len(lines) + 1)
    header = ["-------------------------------------------------------",
              f"Job '{job_id}' submitted successfully",
              "-------------------------------------------------------", "", "Next steps",
              "  Query the logs of the job:", f"    ray job logs {job_id}"]
    out = [_stamp(submitted) + h for h in header]
    out += [_stamp(NOW - timedelta(minutes=last_minutes_ago + len(lines) - 1 - i)) + text
            for i, text in enumerate(lines)]
    return "".join(line + "\n" for line in out)


def healthy_node(name: str) -> dict:
    """A healthy AKS node as `kubectl get node -o json` prints it (tests/diagnosis/test_node_health.py)."""
    obj = node()
    obj["metadata"]["name"] = obj["metadata"]["labels"]["kubernetes.io/hostname"] = name
    return obj


def ray_run() -> tuple[list[dict], dict, str, str]:
    rj = k8s.rayjob(RUN)
    rc = k8s.raycluster(rayjob=rj, state="ready")
    pods = [k8s.ray_pod(rc, "head", node="aks-system-0", phase="Running", containers=[k8s.running("ray-head")]),
            k8s.ray_pod(rc, "worker", node="gpu-node-1", phase="Running", containers=[k8s.running("ray-worker")])]
    sub = k8s.submitter_job(rj)
    sub_pod = k8s.submitter_pod(sub, node="aks-system-0", phase="Running")
    service = f"{rj['status']['rayClusterName']}-head-svc"
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": service, "namespace": k8s.NS},
           "spec": {"ports": [{"name": "dashboard", "port": 8265}]}}
    objects = [*workspace_objects(), rj, rc, *pods, sub, sub_pod, svc, k8s.workload(rj, state="admitted"),
               healthy_node("aks-system-0"), healthy_node("gpu-node-1")]
    return objects, sub_pod, service, rj["status"]["jobId"]


async def status(emu: KubeEmulator, tmp_path: Path):  # noqa: ANN201
    write_descriptor(tmp_path, emu.base_url)
    return await diagnose_live(load_descriptors(tmp_path), run=RUN, identity=ALICE, now=NOW, workspace="vision")


def _proxied(emu: KubeEmulator) -> list[str]:
    return [r.path for r in emu.requests if "/proxy/" in r.path]


async def test_a_rayjob_whose_submitter_log_stopped_30_minutes_ago_is_a_stall_on_the_first_read(
        tmp_path: Path) -> None:
    objects, sub_pod, service, job_id = ray_run()
    lines = driver_lines(10)
    async with KubeEmulator(objects) as emu:
        emu.pod_logs[(k8s.NS, sub_pod["metadata"]["name"], "ray-job-submitter")] = submitter_log(job_id, lines, 30)
        serve_driver_log(emu, k8s.NS, service, job_id, "".join(line + "\n" for line in lines))
        report = await status(emu, tmp_path)
        check = report.diagnosis.phase("Runtime progress")
        assert (check.state.value, check.reason) == ("warning", "progress.stalled"), check
        assert "no progress since 2026-11-30 10:30:00Z" in check.summary and "loss 1.55" in check.summary
        assert report.diagnosis.first_incomplete == "Runtime progress" and report.diagnosis.owner == "researcher"
        [read] = [r for r in emu.requests if r.path.endswith("/log")]
        assert read.path.endswith(f"/pods/{sub_pod['metadata']['name']}/log")
        assert read.query["timestamps"] == "true" and read.query["container"] == "ray-job-submitter"
        assert read.header_values("Impersonate-User") == ["alice@example.com"]
        # Quiet for longer than the threshold: the driver log was checked, and it ends where the mirror does.
        assert any(p.endswith("/api/v0/logs/file") for p in _proxied(emu))
        # layers 6–8: nodes, the submitter log, the driver log's check; a stall adds the driver's
        # stack (SPEC §5c: the proxy's access review, the job's details, py-spy's traceback); +1 the
        # LocalQueue a process that knows no ClusterQueue for it reads in round 1 (issue 35)
        assert len(emu.requests) <= 16


async def test_a_progressing_submitter_log_is_progress_at_its_own_time_without_the_dashboard(
        tmp_path: Path) -> None:
    objects, sub_pod, service, job_id = ray_run()
    async with KubeEmulator(objects) as emu:
        emu.pod_logs[(k8s.NS, sub_pod["metadata"]["name"], "ray-job-submitter")] = submitter_log(
            job_id, driver_lines(10), 1)
        serve_driver_log(emu, k8s.NS, service, job_id, "".join(line + "\n" for line in driver_lines(12)))
        report = await status(emu, tmp_path)
        check = report.diagnosis.phase("Runtime progress")
        # The mirror is fresh: its timed lines are the answer, though the driver log read beside it
        # (nothing proved the mirror fresh before it was read) holds more lines.
        assert check.state.value == "active" and "at 2026-11-30 10:59:00Z" in check.summary, check
        assert "unknown" not in check.summary and "loss 1.55" in check.summary
        assert "log (submitter pod " in " ".join(check.evidence)
        # The status, one node LIST, the mirror's read and the driver log's beside it (round 3), and
        # the `get pods/log` review a status sends with its pods' round; the queue-position reads
        # (issue 35) aside. With the record of an earlier read the driver log is not read
        # (tests/live/test_rounds_every_case.py).
        assert len(own(list(emu.requests))) == 11


async def test_a_submitter_that_stopped_following_is_not_taken_for_a_hung_driver(tmp_path: Path) -> None:
    """`ray job logs -f` sporadically stops following (ray-project/ray#51601): the mirror ends 30
    minutes ago but the driver log has gone on, so the driver log is the answer (untimed)."""
    objects, sub_pod, service, job_id = ray_run()
    lines = driver_lines(14)
    async with KubeEmulator(objects) as emu:
        emu.pod_logs[(k8s.NS, sub_pod["metadata"]["name"], "ray-job-submitter")] = submitter_log(
            job_id, lines[:10], 30)
        serve_driver_log(emu, k8s.NS, service, job_id, "".join(line + "\n" for line in lines))
        check = (await status(emu, tmp_path)).diagnosis.phase("Runtime progress")
        assert check.state.value == "active" and "time of the last progress line unknown" in check.summary
        assert "loss 1.35" in check.summary  # the driver's own last line, past the mirror's


async def test_without_get_pods_log_neither_the_submitter_nor_the_dashboard_is_read(tmp_path: Path) -> None:
    objects, sub_pod, service, job_id = ray_run()
    async with KubeEmulator(objects) as emu:
        emu.pod_logs[(k8s.NS, sub_pod["metadata"]["name"], "ray-job-submitter")] = submitter_log(
            job_id, driver_lines(10), 1)
        serve_driver_log(emu, k8s.NS, service, job_id, "".join(line + "\n" for line in driver_lines(10)))
        emu.forbid("get", "pods", user="alice@example.com", subresource="log")
        check = (await status(emu, tmp_path)).diagnosis.phase("Runtime progress")
        assert check.state.value == "skipped" and "permission denied (get pods/log)" in check.summary, check
        assert _proxied(emu) == []


@pytest.mark.parametrize(("quiet_minutes", "expected", "later"), [(1, 12, 11), (30, 15, 15)],
                         ids=["progressing", "quiet mirror"])
async def test_requests_per_status_with_layers_6_to_8_stay_within_12(tmp_path: Path, redis_url: str,
                                                                     quiet_minutes: int, expected: int,
                                                                     later: int) -> None:
    """Issue 25's figure: a live RayJob status with node health (6), the submitter log and the MLflow
    record (7) and a recovery (8) — the run, its objects, one node LIST, one log read, the log's and
    the record's access reviews: 11. With no record of an earlier read, nothing proves the mirror
    fresh, so the driver log's read goes beside it (issue 36.2: never a fourth round for a quiet or
    empty mirror): 12. A quiet mirror's stall adds the driver's stack (issue 40, SPEC §5c): the
    head proxy's access review, the job's details and the dashboard's py-spy traceback — 15; the
    next status sends them with the log, in the same count. The queue-position reads (issue 35)
    are not counted here."""
    from redis import Redis

    seen = Redis.from_url(redis_url)
    objects, sub_pod, service, job_id = ray_run()
    lines = driver_lines(10)
    with running_fake_mlflow() as mlflow:
        fresh_ms = int((NOW - timedelta(minutes=quiet_minutes)).timestamp() * 1000)
        mlflow.add_run("c3d4e5", {"taugrid.io/run": RUN}, [{"key": "loss", "value": 1.55, "timestamp": fresh_ms,
                                                            "step": 90}])
        async with KubeEmulator(objects) as emu:
            emu.pod_logs[(k8s.NS, sub_pod["metadata"]["name"], "ray-job-submitter")] = submitter_log(
                job_id, lines, quiet_minutes)
            serve_driver_log(emu, k8s.NS, service, job_id, "".join(line + "\n" for line in lines))
            path = write_descriptor(tmp_path, emu.base_url)
            doc = yaml.safe_load(path.read_text())
            doc["spec"]["experiments"] = {"mlflow": {"uri": mlflow.base_url}}
            path.write_text(yaml.safe_dump(doc))
            for figure, now in ((expected, NOW), (later, NOW + timedelta(minutes=1))):
                emu.clear_requests()
                report = await diagnose_live(load_descriptors(tmp_path), run=RUN, identity=ALICE, now=now,
                                             workspace="vision", seen=seen)
                d = report.diagnosis
                assert [c.name for c in d.checks] == ["GPU/node health", "Runtime progress", "Durable evidence"]
                assert d.recovery is not None
                assert report.requests == len(emu.requests), [r.path for r in emu.requests]
                assert len(own(list(emu.requests))) == figure, [r.path for r in emu.requests]
                print(f"requests per status, layers 6-8, RayJob ({quiet_minutes} min quiet): {report.requests}")
    seen.close()
