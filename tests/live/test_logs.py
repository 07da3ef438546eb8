"""`taubot logs` and `/tau logs` through the emulator, the fake Kusto and the fake Slack (SPEC §7a).

Log lines are real formats (shared/reference/training-logs.md): Hugging Face
Trainer dicts (transformers 4.46 `trainer_callback.py`), the Ray submitter's
`Job '…' submitted successfully` (ray-project/ray#51601) and the PyTorch
NCCL watchdog line (hiyouga/LlamaFactory#7396).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.fakes.kube_api import KubeEmulator, running_emulator
from tests.fakes.kusto_api import FakeKusto, running_fake_kusto
from tests.fixtures import k8s
from tests.fixtures.ray_dashboard import DRIVER_NODE, serve_driver_log
from tests.live.conftest import workspace_objects

REPO = Path(__file__).resolve().parents[2]
CLUSTER_ID = ("/subscriptions/0000/resourceGroups/rg-east/providers/Microsoft.ContainerService/"
              "managedClusters/aks-east-prod")  # an AKS ARM id, as ContainerLogV2._ResourceId holds it
RAY_RUN = "ray-pretrain-13b"
JOB_RUN = "llama-ft-7b"
# Ray driver output: the submitter's lines (ray#51601) and HF Trainer dicts (transformers 4.46).
DRIVER_LOG = "\n".join([
    "Job 'ray-pretrain-13b-4k2xq' submitted successfully",
    "***** Running training *****",
    "  Num examples = 1,200,000",
    *[f"{{'loss': {2.5 - i / 10:.4f}, 'grad_norm': 1.9, 'learning_rate': 4.5e-05, 'epoch': {i / 10:.2f}}}"
      for i in range(1, 8)],
]) + "\n"
NCCL = ("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
        "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.")


@dataclass
class Env:
    emu: KubeEmulator
    kusto: FakeKusto
    workspaces: Path


def descriptor(directory: Path, server: str, kusto: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / "vision.yaml").write_text(yaml.safe_dump({
        "apiVersion": "taugrid.io/v1alpha1", "kind": "WorkspaceConnection", "metadata": {"name": "vision"},
        "spec": {"cluster": {"server": server}, "namespace": k8s.NS, "workspace": "vision",
                 "localQueue": "team-a", "slack": {"channels": ["C012VISION"]},
                 "logs": {"kusto": {"cluster": "aks-east-prod", "endpoint": kusto, "database": "logs"}}},
    }))


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with running_emulator(workspace_objects()) as emu, running_fake_kusto() as kusto:
        descriptor(tmp_path / "workspaces", emu.base_url, kusto.base_url)
        yield Env(emu, kusto, tmp_path / "workspaces")


def taubot_logs(env: Env, run: str, *extra: str) -> tuple[int, dict, str]:
    done = subprocess.run(
        [sys.executable, "-m", "workers.cli", "logs", run, "--workspace", "vision", "--workspaces-dir",
         str(env.workspaces), "--as", "alice@example.com", "--as-group", "team-vision", "--as-group",
         "gpu-users", "--format", "json", *extra], capture_output=True, text=True, cwd=REPO, timeout=60)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout  # exactly one JSON object
    return done.returncode, json.loads(lines[0]), done.stderr


def ray_run_with_head(env: Env) -> None:
    rj = k8s.rayjob(RAY_RUN)
    status = rj["status"]
    env.emu.upsert(rj)
    env.emu.upsert({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": f"{status['rayClusterName']}-head-svc", "namespace": k8s.NS},
                    "spec": {"ports": [{"name": "dashboard", "port": 8265}]}})
    serve_driver_log(env.emu, k8s.NS, f"{status['rayClusterName']}-head-svc", status["jobId"], DRIVER_LOG)


def test_rayjob_with_a_head_reads_the_driver_log_from_the_dashboard(env: Env) -> None:
    ray_run_with_head(env)
    code, out, _ = taubot_logs(env, RAY_RUN, "--tail", "5")
    assert code == 0
    assert set(out) == {"source", "pod", "container", "lines", "truncated", "unavailable"}
    assert out["source"] == "ray-dashboard" and out["unavailable"] == []
    assert [line["text"] for line in out["lines"]] == DRIVER_LOG.splitlines()[-5:]
    assert out["truncated"] is True
    assert env.kusto.queries == []  # the dashboard answered: no ADX query
    details, tail = [r for r in env.emu.requests if "/proxy/" in r.path]
    job_id = k8s.rayjob(RAY_RUN)["status"]["jobId"]
    assert details.path.endswith(f"-head-svc:dashboard/proxy/api/jobs/{job_id}")
    # Ray's log API, a bounded tail of the driver's node's file (never the Jobs API's whole log)
    assert tail.path.endswith("-head-svc:dashboard/proxy/api/v0/logs/file")
    assert dict(tail.query) == {"node_id": DRIVER_NODE, "submission_id": job_id, "lines": "6"}
    assert all(r.header_values("Impersonate-User") == ["alice@example.com"] for r in env.emu.requests)


def finished_ray_run_in_kusto(env: Env) -> None:
    """Failed and cleaned up: KubeRay deleted the head (shutdownAfterJobFinishes), its log is in ADX."""
    env.emu.upsert(k8s.rayjob(RAY_RUN, deployment_status="Failed", job_status="FAILED", reason="AppFailed"))
    for i, text in enumerate(["Job 'ray-pretrain-13b-4k2xq' submitted successfully", "  leading spaces kept",
                              NCCL]):
        env.kusto.add_row(time=f"2026-11-30T10:2{i}:00Z", pod=f"{RAY_RUN}-x7k2p",
                          container="ray-job-submitter", message=text, namespace=k8s.NS,
                          cluster_resource_id=CLUSTER_ID)
    env.kusto.add_row(time="2026-11-30T10:25:00Z", pod="other-run-x1", container="main", message="not ours",
                      namespace=k8s.NS, cluster_resource_id=CLUSTER_ID)
    # Another RayJob whose name starts with this one's: its submitter pod shares the prefix.
    env.kusto.add_row(time="2026-11-30T10:26:00Z", pod=f"{RAY_RUN}-eval-b2c4d", container="ray-job-submitter",
                      message="not ours either", namespace=k8s.NS, cluster_resource_id=CLUSTER_ID)


def test_rayjob_after_the_head_was_deleted_reads_kusto_after_an_access_review(env: Env) -> None:
    finished_ray_run_in_kusto(env)
    code, out, _ = taubot_logs(env, RAY_RUN)
    assert code == 0
    assert out["source"] == "kusto" and out["pod"] == f"{RAY_RUN}-x7k2p"
    cluster = k8s.rayjob(RAY_RUN)["status"]["rayClusterName"]
    assert out["unavailable"] == ["head service gone", f"no head pod of {cluster} (deleted with its RayCluster?)"]
    assert [line["text"] for line in out["lines"]] == [
        "Job 'ray-pretrain-13b-4k2xq' submitted successfully", "  leading spaces kept", NCCL]
    assert out["lines"][0]["time"] == "2026-11-30T10:20:00Z" and out["truncated"] is False
    [review] = [r for r in env.emu.requests if r.path.endswith("/selfsubjectaccessreviews")]
    assert review.body["spec"]["resourceAttributes"] == {
        "verb": "get", "resource": "pods", "group": "", "namespace": k8s.NS, "subresource": "log"}
    assert review.header_values("Impersonate-User") == ["alice@example.com"]
    assert review.header_values("Impersonate-Group") == ["team-vision", "gpu-users"]
    [query] = env.kusto.queries
    assert query.database == "logs"
    assert "declare query_parameters" in query.csl and "ContainerLogV2" in query.csl and "take n" in query.csl
    assert "TimeGenerated between" in query.csl
    for value in (k8s.NS, RAY_RUN, "aks-east-prod"):
        assert value not in query.csl  # values travel only as parameters
    assert query.parameters["ns"] == k8s.NS and query.parameters["pods"] == "dynamic([])"
    cluster = k8s.rayjob(RAY_RUN)["status"]["rayClusterName"]
    assert query.parameters["podPattern"] == (  # the submitter Job's pods and the head: never a prefix
        f"^(?:ray-pretrain-13b-[bcdfghjklmnpqrstvwxz2456789]{{5}}"
        f"|{cluster}-head(?:-[bcdfghjklmnpqrstvwxz2456789]{{5}})?)$")
    assert query.parameters["cluster"] == "aks-east-prod"
    assert "Authorization" not in query.headers  # loopback endpoint: no Azure AD


def test_a_user_denied_pod_logs_gets_permission_denied_and_no_query(env: Env) -> None:
    finished_ray_run_in_kusto(env)
    env.emu.forbid("get", "pods", subresource="log", user="alice@example.com")
    code, out, err = taubot_logs(env, RAY_RUN)
    assert code == 1
    assert out["source"] is None and out["lines"] == []
    assert "permission denied (get pods/log)" in out["unavailable"]
    assert "permission denied" in err
    assert env.kusto.queries == []


def test_crash_looping_job_with_previous_reads_the_previous_container(env: Env) -> None:
    j = k8s.job(JOB_RUN, suspend=False, active=1)
    pod = k8s.job_pod(j, node="gpu-node-1", phase="Running",
                      containers=[k8s.crash_loop(exit_code=1, reason="Error")])
    env.emu.upsert(j)
    env.emu.upsert(pod)
    name = pod["metadata"]["name"]
    container = pod["spec"]["containers"][0]["name"]
    env.emu.pod_logs[(k8s.NS, name, container)] = "2026-11-30T10:29:00.000000001Z starting again\n"
    env.emu.previous_logs[(k8s.NS, name, container)] = (
        "2026-11-30T10:20:00.123456789Z Traceback (most recent call last):\n"
        "2026-11-30T10:20:00.223456789Z   File \"/app/train.py\", line 3, in <module>\n"
        "2026-11-30T10:20:00.323456789Z ModuleNotFoundError: No module named 'flash_attn'\n")
    code, out, _ = taubot_logs(env, JOB_RUN, "--previous")
    assert code == 0
    assert out["source"] == "pod" and out["pod"] == name and out["container"] == container
    assert out["lines"][-1] == {"time": "2026-11-30T10:20:00.323456789Z",
                                "text": "ModuleNotFoundError: No module named 'flash_attn'"}
    assert out["lines"][1]["text"].startswith("  File")  # leading spaces kept
    [read] = [r for r in env.emu.requests if r.path.endswith("/log")]
    assert read.query["previous"] == "true" and read.query["timestamps"] == "true"
    assert read.query["tailLines"] == "201" and read.query["container"] == container
    assert env.kusto.queries == []


def test_requests_per_logs_are_bounded_whatever_the_run_size(env: Env) -> None:
    j = k8s.job(JOB_RUN, suspend=False, active=1)
    env.emu.upsert(j)
    for i in range(200):  # 200 more pods of the run, all gone from the node: no log anywhere
        env.emu.upsert(k8s.job_pod(j, index=i, phase="Failed",
                                   containers=[k8s.terminated(exit_code=1, reason="Error")]))
    code, out, _ = taubot_logs(env, JOB_RUN)
    assert out["source"] == "pod"  # the emulator answers an empty log for a pod it holds no log of
    assert len(env.emu.requests) <= 6
    env.emu.clear_requests()
    finished_ray_run_in_kusto(env)
    taubot_logs(env, RAY_RUN)
    assert len(env.emu.requests) <= 6


def test_no_kusto_configured_and_no_run_says_so_and_exits_1(env: Env, tmp_path: Path) -> None:
    doc = yaml.safe_load((env.workspaces / "vision.yaml").read_text())
    del doc["spec"]["logs"]
    (env.workspaces / "vision.yaml").write_text(yaml.safe_dump(doc))
    code, out, err = taubot_logs(env, "gone-run")
    assert code == 1 and out["source"] is None
    assert out["unavailable"] == ["run gone-run not found in team-vision (deleted after it finished?)"]
    assert "Traceback" not in err


def test_a_run_that_does_not_exist_queries_no_log_store(env: Env) -> None:
    """Issue 26.4: `/tau logs llama` for a run that does not exist read ADX by the prefix `llama-`
    and showed `llama-ft-7b`'s log."""
    env.kusto.add_row(time="2026-11-30T10:20:00Z", pod=f"{JOB_RUN}-x7k2p", container="main",
                      message="llama-ft-7b's line", namespace=k8s.NS, cluster_resource_id=CLUSTER_ID)
    code, out, _ = taubot_logs(env, "llama")
    assert code == 1 and out["source"] is None and out["lines"] == []
    assert out["unavailable"] == ["run llama not found in team-vision (deleted after it finished?)"]
    assert env.kusto.queries == []
    assert not [r for r in env.emu.requests if r.path.endswith("/selfsubjectaccessreviews")]


def test_a_job_whose_pods_are_gone_reads_only_its_own_pods_from_kusto(env: Env) -> None:
    """The Job `llama` exists, its pods were garbage-collected; ADX holds its pod's lines and
    those of `llama-ft-7b` (a name that starts with `llama-`): only its own are read."""
    env.emu.upsert(k8s.job("llama", suspend=False))
    for pod, text in ((f"{JOB_RUN}-x7k2p", "llama-ft-7b's line"), ("llama-b2c4d", "llama's own line")):
        env.kusto.add_row(time="2026-11-30T10:20:00Z", pod=pod, container="main", message=text,
                          namespace=k8s.NS, cluster_resource_id=CLUSTER_ID)
    code, out, _ = taubot_logs(env, "llama")
    assert code == 0 and out["source"] == "kusto" and out["pod"] == "llama-b2c4d"
    assert [line["text"] for line in out["lines"]] == ["llama's own line"]
    [query] = env.kusto.queries
    assert query.parameters["podPattern"] == "^(?:llama-[bcdfghjklmnpqrstvwxz2456789]{5})$"


def test_the_dashboard_is_read_only_after_a_pods_log_review(env: Env) -> None:
    """Issue 26.6: the driver log is a pod's log; `services/proxy` alone does not open it."""
    ray_run_with_head(env)
    env.emu.forbid("get", "pods", subresource="log", user="alice@example.com")
    code, out, _ = taubot_logs(env, RAY_RUN)
    assert code == 1 and out["source"] is None
    assert out["unavailable"] == ["permission denied (get pods/log)"]
    assert not [r for r in env.emu.requests if "/proxy/" in r.path]
    assert not [r for r in env.emu.requests if r.path.endswith(("/pods", "/log"))]  # nor the head's log
    assert len([r for r in env.emu.requests if r.path.endswith("/selfsubjectaccessreviews")]) == 1
    assert env.kusto.queries == []


# A Ray head whose container crash-loops (workers/examples/l5-rayjob-head-crashloop.json: `ray-head`
# exits 1, its termination message "ModuleNotFoundError: No module named 'flash_attn'"): the image's
# entrypoint imports the model code before `ray start`, and CPython prints the traceback (its own
# format) to the container's stdout, which the kubelet stamps (`kubectl logs --timestamps`).
HEAD_CRASH = (
    "2026-11-30T10:24:58.118324513Z Traceback (most recent call last):\n"
    "2026-11-30T10:24:58.118401207Z   File \"/home/ray/preload.py\", line 4, in <module>\n"
    "2026-11-30T10:24:58.118409911Z     import flash_attn\n"
    "2026-11-30T10:24:58.118417332Z ModuleNotFoundError: No module named 'flash_attn'\n")


def crash_looping_ray_head(env: Env) -> dict:
    """The RayJob of the crash-loop example: Initializing, its head pod in CrashLoopBackOff, the head
    Service present but its dashboard unreachable (the API server's 503), and the head's log."""
    rj = k8s.rayjob(RAY_RUN, deployment_status="Initializing", job_status="")
    rc = k8s.raycluster(rayjob=rj)
    head = k8s.ray_pod(rc, "head", node="aks-cpu-0", phase="Running",
                       containers=[k8s.crash_loop("ray-head", image=k8s.RAY_IMAGE, restart_count=7)])
    worker = k8s.ray_pod(rc, "worker", phase="Pending", containers=[k8s.waiting("ray-worker", k8s.RAY_IMAGE)])
    for obj in (rj, rc, head, worker, {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{rj['status']['rayClusterName']}-head-svc", "namespace": k8s.NS},
            "spec": {"ports": [{"name": "dashboard", "port": 8265}]}}):
        env.emu.upsert(obj)
    key = (k8s.NS, head["metadata"]["name"], "ray-head")
    env.emu.pod_logs[key] = HEAD_CRASH  # the kubelet serves a crash-looping container's last instance
    env.emu.previous_logs[key] = HEAD_CRASH
    return head


@pytest.mark.parametrize("previous", [True, False], ids=["--previous", "current"])
def test_a_crash_looping_ray_head_answers_with_the_heads_container_log(env: Env, previous: bool) -> None:
    """Issue 38.2: the crash card says `/tau logs <run> --previous`; with no dashboard to read the
    driver log from, the head pod's own container log is the answer, said as such."""
    head = crash_looping_ray_head(env)
    code, out, _ = taubot_logs(env, RAY_RUN, *(["--previous"] if previous else []))
    assert code == 0
    assert (out["source"], out["pod"], out["container"]) == ("pod", head["metadata"]["name"], "ray-head")
    assert out["lines"][-1] == {"time": "2026-11-30T10:24:58.118417332Z",
                                "text": "ModuleNotFoundError: No module named 'flash_attn'"}
    assert out["lines"][1]["text"] == '  File "/home/ray/preload.py", line 4, in <module>'
    [why] = out["unavailable"]  # the dashboard's own reason, first
    assert why.startswith("ray dashboard: unavailable (HTTP 503)") and "connection refused" in why
    assert env.kusto.queries == []
    requests = list(env.emu.requests)
    [listed] = [r for r in requests if r.path == f"/api/v1/namespaces/{k8s.NS}/pods"]
    assert listed.query["labelSelector"] == f"ray.io/cluster={head['metadata']['labels']['ray.io/cluster']}," \
                                            "ray.io/node-type=head"
    [read] = [r for r in requests if r.path.endswith("/log")]
    assert read.path.endswith(f"/pods/{head['metadata']['name']}/log")
    assert read.query["container"] == "ray-head" and read.query["timestamps"] == "true"
    assert read.query.get("previous") == ("true" if previous else None)
    assert all(r.header_values("Impersonate-User") == ["alice@example.com"] for r in requests)
    # the run (2 GETs), the review, the dashboard (its 503), the head's LIST, its log
    assert len(requests) == 6, [r.path for r in requests]


def test_a_head_whose_dashboard_the_user_may_not_proxy_still_gives_its_container_log(env: Env) -> None:
    """`services/proxy` and `pods/log` are different permissions: denied the first, the user still
    reads what `kubectl logs` would show them."""
    head = crash_looping_ray_head(env)
    env.emu.forbid("get", "services", subresource="proxy", user="alice@example.com")
    code, out, _ = taubot_logs(env, RAY_RUN, "--previous")
    assert code == 0 and out["pod"] == head["metadata"]["name"]
    assert out["unavailable"] == ["permission denied (get services/proxy)"]


def test_a_head_pod_that_is_gone_is_said_and_kusto_is_asked(env: Env) -> None:
    """The dashboard unreachable and no head pod left: both said, then ADX, which kept the head
    container's lines (ContainerLogV2 rows of the head pod)."""
    head = crash_looping_ray_head(env)
    env.emu.delete("Pod", k8s.NS, head["metadata"]["name"])
    env.kusto.add_row(time="2026-11-30T10:24:58Z", pod=head["metadata"]["name"], container="ray-head",
                      message="ModuleNotFoundError: No module named 'flash_attn'", namespace=k8s.NS,
                      cluster_resource_id=CLUSTER_ID)
    code, out, _ = taubot_logs(env, RAY_RUN, "--previous")
    assert code == 0 and (out["source"], out["pod"]) == ("kusto", head["metadata"]["name"])
    cluster = head["metadata"]["labels"]["ray.io/cluster"]
    assert out["unavailable"][1:] == [f"no head pod of {cluster} (deleted with its RayCluster?)"]
    assert [line["text"] for line in out["lines"]] == ["ModuleNotFoundError: No module named 'flash_attn'"]
    assert len(env.kusto.queries) == 1


def test_the_demo_crash_cards_own_command_shows_the_heads_crash() -> None:
    """Issue 38.2, through the demo shell (in process, as a person types): the crash card of
    `ray-pretrain-crash` says `/tau logs ray-pretrain-crash --previous`; typing it answers with the
    crashed head container's last lines, the pod and container named, the dashboard's reason kept."""
    from tests.fixtures.demo_shell import demo_shell

    with demo_shell() as shell:
        card = shell.answer("/tau status ray-pretrain-crash")
        [advised] = set(re.findall(r"`(/tau logs ray-pretrain-crash[^`]*)`", card))
        assert advised == "/tau logs ray-pretrain-crash --previous", card
        log = shell.answer(advised)
    assert "No source answered" not in log, log
    assert "Source: pod log" in log and "`ray-pretrain-crash-wknj7-head-llbxm` `ray-head`" in log, log
    assert "ModuleNotFoundError: No module named 'flash_attn'" in log.split("Tried first")[0], log
    assert "ray dashboard: unavailable (HTTP 503)" in log.split("Tried first")[1], log


def spoofed_head(env: Env, head: dict, name: str = "a-ray-head-lookalike") -> dict:
    """A pod anyone who may create pods in the namespace can make: KubeRay's head labels copied from
    the real head, no ownerReference (KubeRay did not make it), its `ray-head` container crashed more
    recently than the real one's — so it sorts first — with a log of the spoofer's choosing."""
    spoof = k8s.pod(name, k8s.NS, node="aks-cpu-0", phase="Running", labels=dict(head["metadata"]["labels"]),
                    restart_policy="Always", gpus=0,
                    containers=[k8s.crash_loop("ray-head", image=k8s.RAY_IMAGE, restart_count=9)])
    spoof["status"]["containerStatuses"][0]["lastState"]["terminated"]["finishedAt"] = "2026-11-30T10:29:59Z"
    env.emu.upsert(spoof)
    key = (k8s.NS, name, "ray-head")
    env.emu.pod_logs[key] = env.emu.previous_logs[key] = (
        "2026-11-30T10:29:58.000000001Z RuntimeError: the head needs a reset: run `kubectl delete ns team-vision`\n")
    return spoof


def test_a_pod_labelled_as_the_head_that_its_raycluster_does_not_own_is_never_read(env: Env) -> None:
    """`ray.io/cluster` and `ray.io/node-type=head` are labels any pod creator can set: only the pod
    the RayCluster controls (KubeRay's ownerReference) is its head. A look-alike that sorts first
    — by name in the LIST, by its newer crash in the read order — is neither read nor shown."""
    head = crash_looping_ray_head(env)
    assert head["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"
    spoof = spoofed_head(env, head)
    code, out, _ = taubot_logs(env, RAY_RUN, "--previous")
    assert code == 0 and (out["source"], out["pod"]) == ("pod", head["metadata"]["name"])
    assert out["lines"][-1]["text"] == "ModuleNotFoundError: No module named 'flash_attn'"
    assert not [r for r in env.emu.requests if r.path.endswith(f"/pods/{spoof['metadata']['name']}/log")]
    # The real head gone, only the look-alike left: said, not read, and ADX is asked next.
    env.emu.delete("Pod", k8s.NS, head["metadata"]["name"])
    env.emu.clear_requests()
    code, out, _ = taubot_logs(env, RAY_RUN, "--previous")
    cluster = head["metadata"]["labels"]["ray.io/cluster"]
    assert f"no head pod of {cluster}: 1 pod labelled as its head not owned by RayCluster {cluster} (not read)" \
        in out["unavailable"]
    assert "kubectl delete" not in json.dumps(out)
    assert not [r for r in env.emu.requests if r.path.endswith("/log")]
    assert len(env.kusto.queries) == 1


def test_no_planted_secret_or_control_character_of_the_heads_log_reaches_the_json(env: Env) -> None:
    """Every secret shape of tests/fixtures/secrets.py, the private keys across lines and the control
    characters, in the crash-looping head's container log: none in `taubot logs --format json`."""
    from tests.fixtures.secrets import CONTROL_LINES, CORPUS, FORBIDDEN, PEM_BLOCKS, found_anywhere

    head = crash_looping_ray_head(env)
    planted = [p.line for p in CORPUS] + [line for p in PEM_BLOCKS for line in p.line.split("\n")]
    planted += list(CONTROL_LINES)
    key = (k8s.NS, head["metadata"]["name"], "ray-head")
    env.emu.previous_logs[key] = "".join(f"2026-11-30T10:24:{i % 60:02d}.{i:09d}Z {line}\n"
                                         for i, line in enumerate(planted))
    code, out, _ = taubot_logs(env, RAY_RUN, "--previous", "--tail", "500")
    assert code == 0 and out["pod"] == head["metadata"]["name"] and len(out["lines"]) >= len(planted)
    printed = json.dumps(out, ensure_ascii=False)
    assert found_anywhere(printed) == []
    assert not [c for c in FORBIDDEN if c in printed]


def test_a_user_denied_pod_logs_gets_nothing_of_a_crash_looping_heads_log(env: Env) -> None:
    """The head's container log is a pod's log: denied `get pods/log`, the user reads none of it —
    no log request is sent, the answer says permission denied, and ADX is not asked."""
    crash_looping_ray_head(env)
    env.emu.forbid("get", "pods", subresource="log", user="alice@example.com")
    code, out, _ = taubot_logs(env, RAY_RUN, "--previous")
    assert code == 1 and out["source"] is None and out["lines"] == []
    assert "permission denied (get pods/log)" in out["unavailable"]
    assert "flash_attn" not in json.dumps(out)
    assert not [r for r in env.emu.requests if r.path.endswith("/log")]
    assert env.kusto.queries == []
