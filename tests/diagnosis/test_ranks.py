"""Every real crash signature, and the culprit of a distributed hang or crash (issue 40, SPEC §5c).

The lines are real text, each with where it comes from (docs/reference/training-logs-ranks.md has
the whole list with sources). Multi-rank fixtures are per-rank splits of real pastes: a paste of
several ranks' interleaved output is split by its `[rankN]:` prefixes into one log per pod, as
`kubectl logs` of each pod of an Indexed Job would show it. Where a fixture changes a value of a
real line (to make a rank lag), the comment says so; the format is left verbatim.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tests.fixtures import k8s
from tests.fixtures.blocks import card_text
from workers.diagnosis.culprit import find_culprit, read_ranks
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import LogEvidence, PodLog
from workers.diagnosis.progress import parse_progress

NOW = k8s.T0 + timedelta(minutes=60)
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "real"
STAMP = "2026-11-30T10:40:00.000000000Z"
INDEX = "batch.kubernetes.io/job-completion-index"


def stamped(lines: list[str], start: float = 0) -> list[tuple[str | None, str]]:
    return [(k8s.ts(k8s.T0, 2400 + start + i * 0.001).replace("Z", ".000000000Z"), line)
            for i, line in enumerate(lines)]


# --- 1. Every real crash signature, on a running pod as on a finished one --------------------------

CRASHES = [
    # torch >= 2.2 launcher line, recorded with torch 2.13 (tests/fixtures/logs/real/torchrun-rank-traceback.log)
    ("torchrun worker failed",
     ["step=40 loss=0.2992",
      "E1201 20:22:25.388000 27635 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
      "(exitcode: 1) local_rank: 3 (pid: 27711) of binary: /opt/conda/bin/python"]),
    # The ChildFailedError summary read without its header line (same recorded run, tail cut above it)
    ("torchrun root cause",
     ["step=40 loss=0.2992", "------------------------------------------------------------",
      "Root Cause (first observed failure):", "[0]:", "  time      : 2026-12-01_20:22:25",
      "  host      : localhost", "  rank      : 3 (local_rank: 3)", "  exitcode  : 1 (pid: 27711) ",
      "  error_file: <N/A>",
      "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
      "============================================================"]),
    # Ray's RayTaskError block with no Traceback line above it (LLMServe/DistServe#10)
    ("Ray task error",
     ["ray.exceptions.RayTaskError(RuntimeError): ray::ParaWorker.init_model() (pid=129376, ip=172.17.0.7, "
      "actor_id=27f5ee672314d5dfcee7384701000000, repr=<distserve.worker.ParaWorker object at 0x7efea016a110>)",
      '  File "/share/share/DistServe/distserve/worker.py", line 100, in init_model',
      "    self.model.load_weight(path)", "RuntimeError"]),
    # ActorDiedError block, no Traceback line (a verl run's log in the code index; ray 2.60 exceptions.py
    # ActorDiedError.BASE_ERROR_MSG and its `\tclass_name:` … `\tip:` lines)
    ("Ray actor died",
     ["ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
      "\tclass_name: TaskRunner", "\tactor_id: d4e261d6f007000a735ae14101000000", "\tpid: 480334",
      "\tnamespace: be704d3f-56cc-4f63-ad83-064fbed6fbf7", "\tip: 127.0.0.1",
      "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
      "detail: Worker exits unexpectedly. Worker exits with an exit code None. The worker may have exceeded "
      "K8s pod memory limits."]),
    # The raylet's dead-worker report (ray src/ray/raylet/node_manager.cc; LLMServe/DistServe#10 comments)
    ("Ray worker died",
     ["(raylet) A worker died or was killed while executing a task by an unexpected system error. To "
      "troubleshoot the problem, check the logs for the dead worker. RayTask ID: "
      "ffffffffffffffff4643ca20eddd0f767dfb6f8f07000000 Worker ID: 6536068ce8f7629c0e7caa88c83529a6f763a1246"
      "89fcb5e43d25636 Node ID: a1ac48022b082e341024d15358be110126114be06dc797078ce8c65c Worker IP address: "
      "33.137.92.88 Worker port: 10151 Worker PID: 18503 Worker exit type: SYSTEM_ERROR Worker exit detail: "
      "Worker unexpectedly exits with a connection error code 2. End of file."]),
    # PyTorch's NCCL error with NCCL's code name (vllm-project/vllm#1359; NVIDIA/nccl src/init.cc)
    ("NCCL error",
     ["torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:121, "
      "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
      "ncclUnhandledCudaError: Call to CUDA function failed.",
      "Last error:", "Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'"]),
    # `[rank0]: ncclUnhandledCudaError: …` as torchrun relays it (argonne-lcf Megatron-DeepSpeed script note)
    ("NCCL error", ["[rank0]: ncclUnhandledCudaError: Call to CUDA function failed."]),
    # The older code-number form (public training scripts' notes; NVIDIA/nccl ncclSystemError = 2)
    ("NCCL error", ["RuntimeError: NCCL Error 2: unhandled system error"]),
    # A rank's segfault from the absl/glibc handler (NVIDIA/nccl#2213)
    ("segmentation fault",
     ["Connected all rings, use ring PXN 0 GDR 0", "*** SIGSEGV received at time=1775734074 on cpu 19 ***",
      "PC: @     0xe1e2567f5014  (unknown)  ncclLocalOpAppend()"]),
]


@pytest.mark.parametrize(("signature", "lines"), CRASHES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CRASHES)])
def test_every_real_crash_signature_is_found(signature: str, lines: list[str]) -> None:
    found = parse_progress(stamped(lines)).found
    assert found is not None and found.kind == "crash" and found.signature == signature


def _one_pod_job(state: str) -> list[dict]:
    j = k8s.job("llama-ft-7b", suspend=False, active=1 if state == "running" else 0,
                failed=1 if state == "failed" else 0,
                conditions=k8s.job_failed() if state == "failed" else None)
    c = k8s.running() if state == "running" else k8s.terminated(exit_code=1)
    phase = "Running" if state == "running" else "Failed"
    return [j, k8s.workload(j, state="admitted"), k8s.job_pod(j, node="gpu-a1", phase=phase, containers=[c])]


@pytest.mark.parametrize("state", ["running", "failed"])
@pytest.mark.parametrize(("signature", "lines"), CRASHES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CRASHES)])
def test_a_crash_is_a_crash_on_a_running_pod_as_on_a_finished_one(state: str, signature: str,
                                                                    lines: list[str]) -> None:
    d = evaluate(_one_pod_job(state), "llama-ft-7b", NOW, logs=LogEvidence(lines=stamped(lines)))
    check = d.phase("Runtime progress")
    assert check.state.value == "warning" and check.reason == "progress.crashed", check.summary
    assert "show no error" not in check.summary


def test_a_failed_runs_summary_names_the_error_line_its_log_shows() -> None:
    # A launcher's last words that no signature names (DeepSpeed's, reference training-logs.md §2.5):
    # the summary quotes them instead of "its last lines show no error".
    lines = ["step=40 loss=0.2992", "[2026-11-30 10:40:00,001] [ERROR] [launch.py:321:sigkill_handler] "
             "['/usr/bin/python', '-u', 'train.py'] exits with return code = 1"]
    d = evaluate(_one_pod_job("failed"), "llama-ft-7b", NOW, logs=LogEvidence(lines=stamped(lines)))
    check = d.phase("Runtime progress")
    assert check.state.value == "warning" and "exits with return code = 1" in check.summary
    quiet = evaluate(_one_pod_job("failed"), "llama-ft-7b", NOW,
                     logs=LogEvidence(lines=stamped(["step=40 loss=0.2992", "saving tokenizer"])))
    assert "its last lines show no error" in quiet.phase("Runtime progress").summary


# --- 2. The culprit ----------------------------------------------------------------------------------

def indexed_job(n: int, *, nodes: list[str] | None = None, failed: bool = False) -> list[dict]:
    """An Indexed Job of n pods, one rank each (the completion index is the rank)."""
    j = k8s.job("llama-ft-7b", suspend=False, active=0 if failed else n, parallelism=n, completions=n,
                failed=n if failed else 0, conditions=k8s.job_failed() if failed else None)
    j["spec"]["completionMode"] = "Indexed"
    objs: list[dict] = [j, k8s.workload(j, state="admitted")]
    for i in range(n):
        node = (nodes or [f"gpu-a{i}" for i in range(n)])[i]
        c = k8s.terminated(exit_code=1) if failed else k8s.running()
        pod = k8s.job_pod(j, index=i, node=node, phase="Failed" if failed else "Running", containers=[c],
                          name=f"llama-ft-7b-{i}-{k8s.suffix5(str(i))}")
        pod["metadata"]["annotations"][INDEX] = str(i)
        pod["metadata"]["labels"][INDEX] = str(i)
        objs.append(pod)
    return objs


def pod_names(objs: list[dict]) -> list[str]:
    return [o["metadata"]["name"] for o in objs if o["kind"] == "Pod"]


def split_by_rank(paste: list[str]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for line in paste:
        rank = int(line[5:line.index("]")])
        out.setdefault(rank, []).append(line)
    return out


# ROCm/ROCm#4021 (axolotl on 8× MI300X): six ranks print the watchdog pair; ranks 0 and 5 print
# nothing (their GPUs hung). Verbatim lines.
ROCM_4021 = [
    f"[rank{r}]:[E1109 16:13:20.2{r}2288244 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=500045, OpType=_REDUCE_SCATTER_BASE, NumelIn=67108864, "
    "NumelOut=8388608, Timeout(ms)=600000) ran for 600038 milliseconds before timing out."
    for r in (2, 7, 3, 4, 6, 1)
] + [
    f"[rank{r}]:[E1109 16:13:20.2{r}2705810 ProcessGroupNCCL.cpp:1785] [PG ID 1 PG GUID 1 Rank {r}] Exception "
    f"(either an error or timeout) detected by watchdog at work: 500045, last enqueued NCCL work: {enq}, "
    "last completed NCCL work: 500044."
    for r, enq in ((2, 500047), (7, 500047), (3, 500045), (4, 500045), (6, 500045), (1, 500047))
]


def logs_for(objs: list[dict], per_rank: dict[int, list[str]], **kw: object) -> LogEvidence:
    names = pod_names(objs)
    return LogEvidence(ranks=[PodLog(pod=names[i], lines=stamped(per_rank.get(i, ["step=4500 loss=1.91"])))
                              for i in range(len(names))], source="pods/log", **kw)  # type: ignore[arg-type]


def test_two_silent_ranks_single_none_out() -> None:
    objs = indexed_job(8)
    ranks = split_by_rank(ROCM_4021)  # ranks 0 and 5 silent
    d = evaluate(objs, "llama-ft-7b", NOW, logs=logs_for(objs, ranks))
    check = d.phase("Runtime progress")
    assert check.state.value == "warning" and check.culprit is None
    assert "no culprit" in check.summary
    assert d.contract()["checks"][-1]["culprit"] is None


def test_the_one_silent_rank_is_the_culprit() -> None:
    objs = indexed_job(8)
    ranks = split_by_rank(ROCM_4021)
    # rank 5 prints what rank 6 printed (the rank number changed): rank 0 is then the only silent one
    ranks[5] = [line.replace("rank6]", "rank5]").replace("Rank 6]", "Rank 5]") for line in ranks[6]]
    d = evaluate(objs, "llama-ft-7b", NOW, logs=logs_for(objs, ranks))
    culprit = d.phase("Runtime progress").culprit
    assert culprit is not None and culprit.rank == 0 and culprit.seq == 500045
    assert culprit.node == "gpu-a0" and "never entered _REDUCE_SCATTER_BASE SeqNum 500045" in culprit.summary


def test_all_ranks_waiting_in_the_same_collective_is_no_culprit() -> None:
    objs = indexed_job(6)
    by_rank = split_by_rank(ROCM_4021)
    per_pod = dict(enumerate(by_rank[r] for r in sorted(by_rank)))
    d = evaluate(objs, "llama-ft-7b", NOW, logs=logs_for(objs, per_pod))
    assert d.phase("Runtime progress").culprit is None


def lagging(n: int, culprit: int, seq: int = 4512) -> dict[int, list[str]]:
    """LlamaFactory#7396's watchdog pair for each rank; every rank but ``culprit`` waits in
    SeqNum seq+1 (values changed from the paste's 1580; the format is verbatim), the culprit in seq."""
    out = {}
    for r in range(n):
        s = seq if r == culprit else seq + 1
        out[r] = [
            f"[rank{r}]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
            "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.",
            f"[rank{r}]:[E321 02:07:08.408567219 ProcessGroupNCCL.cpp:1664] [PG 1 Rank {r}] Exception (either an "
            f"error or timeout) detected by watchdog at work: {s}, last enqueued NCCL work: {s}, last completed "
            f"NCCL work: {s - 1}.",
        ]
    return out


def test_the_lagging_seqnum_names_rank_pod_and_node() -> None:
    objs = indexed_job(32)
    d = evaluate(objs, "llama-ft-7b", NOW, logs=logs_for(objs, lagging(32, 17)))
    check = d.phase("Runtime progress")
    culprit = check.culprit
    assert culprit is not None and (culprit.rank, culprit.seq, culprit.node) == (17, 4512, "gpu-a17")
    assert culprit.pod == pod_names(objs)[17]
    assert f"rank 17 (pod {culprit.pod} on node gpu-a17) never completed ALLREDUCE SeqNum 4512; " \
           "the 31 others wait on it" in check.summary
    assert check.finding.owner == "researcher"
    doc = d.contract()["checks"][-1]["culprit"]
    assert doc["rank"] == 17 and doc["operation"] == "never completed ALLREDUCE SeqNum 4512" and doc["evidence"]


def xid_node(name: str) -> dict:
    """An AKS node whose node-problem-detector reports XID 79 (tests/diagnosis/test_node_health.py shapes)."""
    from tests.diagnosis.test_node_health import HARDWARE_XID
    node = copy.deepcopy(HARDWARE_XID)
    node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = name
    for cond in node["status"]["conditions"]:
        if cond["type"] == "XIDErrors":
            cond["lastTransitionTime"] = "2026-11-30T10:02:00Z"
    return node


def test_the_culprits_node_with_xid_79_moves_the_owner_to_layer_6() -> None:
    objs = indexed_job(32)
    d = evaluate(objs + [xid_node("gpu-a17")], "llama-ft-7b", NOW, logs=logs_for(objs, lagging(32, 17)))
    check = d.phase("Runtime progress")
    assert check.culprit is not None and check.culprit.node_fault == "gpu-a17 logged Xid 79 at 10:02"
    assert check.summary.endswith("the 31 others wait on it; gpu-a17 logged Xid 79 at 10:02")
    assert check.finding.owner == "node-pool-owner"


def test_a_desync_report_names_its_rank() -> None:
    # NVIDIA/nccl#2213: rank 1 segfaults; rank 0's watchdog fires and the desync report names [1].
    objs = indexed_job(2)
    per_rank = {0: ["[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1155874, "
                    "OpType=ALLREDUCE, NumelIn=9445376, NumelOut=9445376, Timeout(ms)=1800000) ran for 1800002 "
                    "milliseconds before timing out.",
                    "[1] finished collective #1155873, but didn't join collective #1155874"],
                1: ["Connected all rings, use ring PXN 0 GDR 0",
                    "*** SIGSEGV received at time=1775734074 on cpu 19 ***",
                    "PC: @     0xe1e2567f5014  (unknown)  ncclLocalOpAppend()"]}
    culprit = evaluate(objs, "llama-ft-7b", NOW, logs=logs_for(objs, per_rank)).phase("Runtime progress").culprit
    assert culprit is not None and culprit.rank == 1 and culprit.seq == 1155874
    assert culprit.node == "gpu-a1"


def test_one_ranks_oom_while_the_others_time_out_is_the_culprit() -> None:
    objs = indexed_job(4)
    per_rank = lagging(4, -1)  # all wait in 4513
    # pytorch/pytorch#16417 (comment): the CUDA OOM line, in a rank's traceback
    per_rank[2] = ["[rank2]: Traceback (most recent call last):",
                   '[rank2]:   File "/workspace/run/train.py", line 16, in <module>',
                   "[rank2]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 "
                   "has a total capacity of 23.65 GiB of which 11.06 MiB is free."]
    culprit = evaluate(objs, "llama-ft-7b", NOW, logs=logs_for(objs, per_rank)).phase("Runtime progress").culprit
    assert culprit is not None and culprit.rank == 2 and "CUDA out of memory" in (culprit.operation or "")


def test_the_recorded_torchrun_run_names_the_rank_that_failed_first() -> None:
    # tests/fixtures/logs/real/torchrun-rank-traceback.log: 4 ranks in one pod; rank 3 raises, the
    # others fail on the closed connection; torchrun's root cause says rank 3, exitcode 1 vs -15.
    lines = [tuple(line.split(" ", 1)) for line in
             (REAL / "torchrun-rank-traceback.log").read_text().splitlines() if " " in line]
    j = k8s.job("llama-ft-7b", suspend=False, failed=1, conditions=k8s.job_failed())
    pod = k8s.job_pod(j, node="gpu-b2", phase="Failed", containers=[k8s.terminated(exit_code=1)])
    objs = [j, k8s.workload(j, state="admitted"), pod]
    report = read_ranks([PodLog(pod=pod["metadata"]["name"], lines=lines)], [pod])
    assert report.root is not None and (report.root.rank, report.root.exitcode) == (3, 1)
    culprit = find_culprit(report, [pod], {})
    assert culprit is not None and culprit.rank == 3 and culprit.node == "gpu-b2"
    d = evaluate(objs, "llama-ft-7b", NOW,
                 logs=LogEvidence(ranks=[PodLog(pod=pod["metadata"]["name"], lines=lines)]))
    assert d.phase("Runtime progress").culprit.rank == 3  # type: ignore[union-attr]


def _summary(codes: dict[int, int], root: int, when: dict[int, str]) -> list[str]:
    """torchrun's ChildFailedError summary (format verbatim from the recorded run; values set here)."""
    out = ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
           "============================================================", "train.py FAILED",
           "------------------------------------------------------------", "Failures:"]
    for k, r in enumerate(r for r in codes if r != root):
        out += [f"[{k + 1}]:", f"  time      : {when[r]}", "  host      : gpu-a0", f"  rank      : {r} (local_rank: {r})",
                f"  exitcode  : {codes[r]} (pid: {100 + r})", "  error_file: <N/A>"]
    out += ["------------------------------------------------------------", "Root Cause (first observed failure):",
            "[0]:", f"  time      : {when[root]}", "  host      : gpu-a0", f"  rank      : {root} (local_rank: {root})",
            f"  exitcode  : {codes[root]} (pid: {100 + root})", "  error_file: <N/A>",
            "============================================================"]
    return out


def test_every_rank_aborting_together_after_the_watchdog_is_no_culprit() -> None:
    same = "2026-11-30_10:40:00"
    lines = _summary({0: -6, 1: -6, 2: -6, 3: -6}, 0, dict.fromkeys(range(4), same))
    report = read_ranks([PodLog(pod="p", lines=stamped(lines))], [])
    assert report.root is not None and find_culprit(report, [], {}) is None


def test_a_root_cause_more_than_10_s_before_the_others_is_the_culprit() -> None:
    when = {0: "2026-11-30_10:40:30", 1: "2026-11-30_10:40:30", 2: "2026-11-30_10:40:00"}
    lines = _summary({0: -6, 1: -6, 2: -6}, 2, when)
    culprit = find_culprit(read_ranks([PodLog(pod="p", lines=stamped(lines))], []), [], {})
    assert culprit is not None and culprit.rank == 2


def test_a_worker_ip_without_a_rank_gives_the_node() -> None:
    objs = indexed_job(2)
    pods = [o for o in objs if o["kind"] == "Pod"]
    ip = pods[1]["status"]["podIP"]
    line = ("(raylet) A worker died or was killed while executing a task by an unexpected system error. "
            f"RayTask ID: ffff Worker ID: 8c48 Node ID: 2b45 Worker IP address: {ip} Worker port: 47591 "
            "Worker PID: 1075016 Worker exit type: SYSTEM_ERROR")  # verl run in the code index; IP set here
    report = read_ranks([PodLog(pod=pods[0]["metadata"]["name"], lines=stamped([line]))], pods)
    culprit = find_culprit(report, pods, {})
    assert culprit is not None and culprit.rank is None and culprit.node == "gpu-a1"


def test_more_pods_than_the_bound_are_sampled_and_said() -> None:
    objs = indexed_job(80)
    logs = logs_for(objs, lagging(80, 17))
    logs = logs.model_copy(update={"ranks": logs.ranks[:64], "ranks_sampled": "64 of 80 pods read (bound 64)"})
    check = evaluate(objs, "llama-ft-7b", NOW, logs=logs).phase("Runtime progress")
    assert check.culprit is not None and check.culprit.rank == 17
    assert "64 of 80 pods read (bound 64)" in check.summary


def test_node_health_is_judged_for_a_run_whose_pods_all_failed() -> None:
    objs = indexed_job(2, failed=True)
    d = evaluate(objs + [xid_node("gpu-a0"), xid_node("gpu-a1")], "llama-ft-7b", NOW)
    health = d.phase("GPU/node health")
    assert health.state.value == "warning" and "XIDErrors=True" in health.summary
    assert d.first_incomplete == "GPU/node health" and d.owner == "node-pool-owner"


# --- 3. Offline: --logs POD=FILE, repeatable ------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers.cli", "diagnose", "llama-ft-7b", *args],
                          capture_output=True, text=True, timeout=60)


def test_cli_logs_per_pod_names_the_culprit_in_the_json(tmp_path: Path) -> None:
    objs = indexed_job(4)
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(k8s.kube_list(objs)))
    flags: list[str] = []
    for i, (name, lines) in enumerate(zip(pod_names(objs), lagging(4, 2).values(), strict=True)):
        f = tmp_path / f"rank{i}.log"
        f.write_text("".join(f"{t} {text}\n" for t, text in stamped(lines)))
        flags += ["--logs", f"{name}={f}"]
    done = _cli("--from-file", str(dump), *flags, "--now", NOW.isoformat(), "--format", "json")
    assert done.returncode == 0, done.stderr
    check = next(c for c in json.loads(done.stdout)["checks"] if c["name"] == "Runtime progress")
    assert check["culprit"]["rank"] == 2 and check["culprit"]["seq"] == 4512
    assert check["culprit"]["pod"] == pod_names(objs)[2] and check["culprit"]["node"] == "gpu-a2"


def test_cli_refuses_mixing_the_two_logs_forms_in_one_line(tmp_path: Path) -> None:
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(k8s.kube_list(indexed_job(2))))
    (tmp_path / "a.log").write_text("x\n")
    done = _cli("--from-file", str(dump), "--logs", str(tmp_path / "a.log"), "--logs",
                f"llama-ft-7b-0-abcde={tmp_path / 'a.log'}")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "not both" in done.stderr and "Traceback" not in done.stderr
    missing = _cli("--from-file", str(dump), "--logs", f"llama-ft-7b-0-abcde={tmp_path / 'nope.log'}")
    assert missing.returncode == 2 and "cannot read --logs" in missing.stderr


# --- The card: one line ---------------------------------------------------------------------------



def test_the_card_shows_the_culprit_in_one_line_and_its_evidence_in_details() -> None:
    from tests.fakes.slack_api import block_errors
    from workers.render.cards import build_phase_card, render_details, render_phase_card

    objs = indexed_job(32)
    d = evaluate(objs + [xid_node("gpu-a17")], "llama-ft-7b", NOW, logs=logs_for(objs, lagging(32, 17)))
    context = build_phase_card(d, workspace="team-a", operator_hints_allowed=False)
    card = render_phase_card(context)
    assert block_errors(card.blocks) == []
    text = card_text(card.blocks)
    culprit_lines = [line for line in text.splitlines() if line.startswith("*Culprit:*")]
    assert len(culprit_lines) == 1 and "rank 17" in culprit_lines[0] and "Xid 79" in culprit_lines[0]
    details = render_details(context.details)  # type: ignore[arg-type]
    assert block_errors(details.blocks) == [] and "SeqNum=4512" in card_text(details.blocks)


# --- Several ranks in one log: torchrun's pod, a Ray driver's workers -------------------------------

def test_the_recorded_torchrun_pods_one_log_names_its_culprit_rank() -> None:
    lines = [tuple(line.split(" ", 1)) for line in
             (REAL / "torchrun-rank-traceback.log").read_text().splitlines() if " " in line]
    j = k8s.job("llama-ft-7b", suspend=False, failed=1, conditions=k8s.job_failed())
    pod = k8s.job_pod(j, node="gpu-b2", phase="Failed", containers=[k8s.terminated(exit_code=1)])
    d = evaluate([j, k8s.workload(j, state="admitted"), pod], "llama-ft-7b", NOW,
                 logs=LogEvidence(lines=lines, source="pod"))  # type: ignore[arg-type]
    culprit = d.phase("Runtime progress").culprit
    assert culprit is not None and culprit.rank == 3 and culprit.node == "gpu-b2"


def test_a_ray_drivers_workers_are_ranks_on_the_nodes_of_their_ips() -> None:
    # vLLM on Ray (code index): `(RayWorkerWrapper pid=270291, ip=10.175.94.190) [rank3]:[E219 …]
    # [PG ID 2 PG GUID 3 Rank 3] Timeout at NCCL work: 31, last enqueued NCCL work: 58, last completed
    # NCCL work: 30.` — here four workers, the IPs those of this cluster's pods, rank 2 lagging.
    rj = k8s.rayjob("ray-pretrain-13b")
    rc = k8s.raycluster(rayjob=rj, state="ready")
    pods = [k8s.ray_pod(rc, "worker", phase="Running", containers=[k8s.running("ray-worker")], node=f"gpu-r{i}",
                        index=i) for i in range(4)]
    lines = []
    for i, pod in enumerate(pods):
        seq = 30 if i == 2 else 31
        lines.append((None, f"(RayWorkerWrapper pid={270290 + i}, ip={pod['status']['podIP']}) [rank{i}]:[E219 "
                      f"08:58:32.606693321 ProcessGroupNCCL.cpp:1834] [PG ID 2 PG GUID 3 Rank {i}] Timeout at NCCL "
                      f"work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}."))
    culprit = find_culprit(read_ranks([PodLog(pod="driver", lines=lines)], pods), pods, {})
    assert culprit is not None and culprit.rank == 2 and culprit.node == "gpu-r2"
    assert culprit.pod == pods[2]["metadata"]["name"]
