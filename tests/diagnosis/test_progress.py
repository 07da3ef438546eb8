"""Runtime progress, Durable evidence and recovery (SPEC §5a), from real log formats.

Each log line's shape is cited (shared/reference/training-logs.md quotes them):
HF = transformers 4.46 `trainer_callback.py` ProgressCallback.on_log and
`trainer.py` "Saving model checkpoint to"; LIGHTNING = lightning 2.4
`callbacks/progress/tqdm_progress.py` BAR_FORMAT; TQDM = tqdm 4.x `std.py`
r_bar; MEGATRON = epfLLM/Megatron-LLM#11; NCCL = PyTorch c10d
ProcessGroupNCCL.cpp as in hiyouga/LlamaFactory#7396; the traceback is
CPython's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from workers.collect.dumps import load_snapshot_file
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import ExperimentEvidence, LogEvidence
from workers.diagnosis.progress import parse_progress, sparkline

EXAMPLES = Path(__file__).resolve().parents[2] / "workers" / "examples"
NOW = datetime(2026, 11, 30, 10, 30, tzinfo=UTC)


def at(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def hf(loss: float, epoch: float) -> str:  # HF Trainer dict (transformers 4.46)
    return f"{{'loss': {loss}, 'grad_norm': 1.21, 'learning_rate': 4.5e-05, 'epoch': {epoch}}}"


LIGHTNING = "Epoch 3:  45%|████▌     | {n}/1000 [01:02<01:10,  7.21it/s, loss={loss}, v_num=3]"
TQDM = "{p}%|█████████▊| {n}/2120 [26:01<00:22,  1.49it/s]"
MEGATRON = (" iteration      {n}/  250000 | consumed samples:       124928 | elapsed time per iteration (ms): "
            "86545.2 | learning rate: 9.150E-06 | global batch size:  1024 | lm loss: {loss} | loss scale: 1.0 |")
NCCL = ("[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
        "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.")
CHECKPOINT = "Saving model checkpoint to /mnt/blob/runs/resnet-sweep-3/checkpoint-48000"  # HF trainer.py


def example(name: str) -> list[dict]:
    return load_snapshot_file(EXAMPLES / f"{name}.json")


def diagnose(name: str, run: str, lines: list[tuple[str | None, str]], **kw):  # noqa: ANN003, ANN201
    return evaluate(example(name), run, NOW, logs=LogEvidence(lines=lines, source="test"), **kw)


ADVANCING = {
    "hf": [(at(10 - i), hf(2.5 - i / 10, i / 10)) for i in range(6)],
    "lightning": [(at(10 - i), LIGHTNING.format(n=100 * i, loss=2.0 - i / 10)) for i in range(1, 7)],
    "tqdm": [(at(10 - i), TQDM.format(p=i * 10, n=200 * i)) for i in range(1, 7)],
    "megatron": [(at(10 - i), MEGATRON.format(n=100 + i, loss=f"{2.6 - i / 50:.6E}")) for i in range(6)],
}


@pytest.mark.parametrize("fmt", sorted(ADVANCING))
def test_advancing_logs_are_active_progress_and_the_answer(fmt: str) -> None:
    d = diagnose("l7-job-running-healthy", "resnet-sweep-3", ADVANCING[fmt])
    check = d.phase("Runtime progress")
    assert check.state.value == "active" and check.layer == 7
    assert d.first_incomplete == "Runtime progress" and d.layer == 7
    assert d.recovery is not None and d.recovery.action == "none"
    assert "step" in check.summary or "loss" in check.summary


def test_a_stop_45_minutes_ago_while_pods_run_is_a_stall_with_the_checkpoint() -> None:
    lines = [(at(60 - i), hf(2.0 - i / 100, 1 + i / 100)) for i in range(10)]
    lines.insert(5, (at(56), CHECKPOINT))
    lines[-1] = (at(45), hf(1.92, 1.09))
    d = diagnose("l7-job-running-healthy", "resnet-sweep-3", lines)
    check = d.phase("Runtime progress")
    assert check.state.value == "warning" and check.finding.owner == "researcher"
    assert check.summary.startswith("no progress since 2026-11-30 09:45:00Z") and "loss 1.92" in check.summary
    assert d.first_incomplete == "Runtime progress" and d.owner == "researcher" and d.transient is False
    assert d.recovery is not None and d.recovery.action == "resume-from-checkpoint"
    assert "/mnt/blob/runs/resnet-sweep-3/checkpoint-48000" in d.recovery.summary


def test_the_same_log_within_the_threshold_is_still_active() -> None:
    lines = [(at(15 - i), hf(2.0 - i / 100, 1 + i / 100)) for i in range(3)]
    assert diagnose("l7-job-running-healthy", "resnet-sweep-3", lines).phase("Runtime progress").state.value == \
        "active"


def test_nccl_watchdog_timeout_is_a_hang_ahead_of_rayjob_running() -> None:
    lines = [(at(40), hf(1.95, 2.0)), (at(2), NCCL)]
    d = diagnose("l7-rayjob-running", "ray-pretrain-13b", lines)
    check = d.phase("Runtime progress")
    assert check.state.value == "warning" and "NCCL watchdog timeout" in check.summary
    assert d.first_incomplete == "Runtime progress"  # wins over RayJob status: RUNNING
    assert d.phase("RayJob status").state.value == "active"


def test_traceback_after_a_failed_rayjob_is_the_answer_ahead_of_rayjob_status() -> None:
    lines = [(at(9), hf(2.1, 0.4)), (at(8), "Traceback (most recent call last):"),
             (at(8), '  File "/home/ray/train.py", line 88, in <module>'),
             (at(8), "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a "
                     "total capacity of 23.65 GiB of which 11.06 MiB is free.")]
    d = diagnose("l7-rayjob-failed-submission", "ray-data-prep", lines)
    check = d.phase("Runtime progress")
    assert check.state.value == "warning" and "CUDA out of memory" in check.summary
    assert d.first_incomplete == "Runtime progress"
    assert d.phase("RayJob status").state.value == "warning"
    assert d.recovery is not None and d.recovery.action == "fix-then-resubmit"  # no checkpoint known


def test_no_recognisable_line_is_progress_unknown_never_a_claim() -> None:
    lines = [(at(5 - i), f"INFO data: shard {i} loaded from /mnt/blob/data") for i in range(5)]
    check = diagnose("l7-job-running-healthy", "resnet-sweep-3", lines).phase("Runtime progress")
    assert check.state.value == "active" and check.summary == "progress unknown: no step/epoch/loss lines"


def test_no_line_at_all_for_longer_than_the_threshold_is_a_stall() -> None:
    lines = [(at(50 - i), f"INFO data: shard {i} loaded") for i in range(3)]
    check = diagnose("l7-job-running-healthy", "resnet-sweep-3", lines).phase("Runtime progress")
    assert check.state.value == "warning" and check.summary.startswith("no new log line since")


def test_succeeded_run_is_done_and_unreadable_logs_are_unavailable() -> None:
    d = diagnose("l7-job-succeeded", "clip-eval-2", ADVANCING["hf"])
    assert d.phase("Runtime progress").state.value == "done" and d.first_incomplete is None
    assert d.recovery is not None and d.recovery.action == "none"
    unread = evaluate(example("l7-job-running-healthy"), "resnet-sweep-3", NOW,
                      logs=LogEvidence(unavailable="permission denied (get pods/log)"))
    check = unread.phase("Runtime progress")
    assert check.state.value == "skipped" and check.summary == "unavailable: permission denied (get pods/log)"


def test_not_started_runs_have_no_runtime_check() -> None:
    d = diagnose("l4-job-waiting-for-quota", "llama-ft-7b", ADVANCING["hf"])
    assert [c.name for c in d.checks] == [] and d.first_incomplete == "Kueue admission"
    assert d.recovery is not None and d.recovery.action == "wait"


@pytest.mark.parametrize(("record", "state", "owner"), [
    (ExperimentEvidence(found=False), "warning", "taugrid-owner"),
    (ExperimentEvidence(found=True, run_id="a1b2", last_step=400, last_metric_at=NOW - timedelta(hours=2)),
     "warning", "taugrid-owner"),
    (ExperimentEvidence(found=True, run_id="a1b2", last_step=500, last_metric_at=NOW - timedelta(minutes=3)),
     "active", "researcher"),
    (ExperimentEvidence(unavailable="permission denied (get jobs)"), "skipped", "researcher"),
])
def test_durable_evidence_against_the_logs_progress(record: ExperimentEvidence, state: str, owner: str) -> None:
    d = diagnose("l7-job-running-healthy", "resnet-sweep-3", ADVANCING["hf"], experiment=record)
    check = d.phase("Durable evidence")
    assert check.state.value == state and check.finding.owner == owner
    assert [c.name for c in d.checks] == ["Runtime progress", "Durable evidence"]


def test_sparkline_needs_five_points_and_follows_the_loss() -> None:
    assert sparkline([2.0, 1.0, 0.5, 0.4]) == ""
    assert sparkline([2.0, 1.5, 1.0, 0.5, 0.1]) == "█▆▄▂▁"


def test_parsing_200k_lines_keeps_the_last_step() -> None:
    p = parse_progress((None, TQDM.format(p=i % 100, n=i)) for i in range(200_000))
    assert p.last_step == 199_999 and p.recognised == 200_000


def test_cli_logs_file_adds_checks_and_recovery_to_the_json(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("".join(f"{t} {text}\n" for t, text in [(at(60), CHECKPOINT), (at(45), hf(1.92, 1.1))]))
    done = subprocess.run([sys.executable, "-m", "workers.cli", "diagnose", "resnet-sweep-3", "--from-file",
                           str(EXAMPLES / "l7-job-running-healthy.json"), "--logs", str(log), "--now",
                           "2026-11-30T10:30:00Z", "--format", "json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["first_incomplete"] == "Runtime progress" and doc["layer"] == 7
    assert doc["checks"] == [{"name": "Runtime progress", "layer": 7, "state": "warning",
                              "summary": doc["checks"][0]["summary"], "owner": "researcher",
                              "reason": "progress.stalled", "culprit": None}]
    assert doc["recovery"]["action"] == "resume-from-checkpoint"
    assert "checkpoint-48000" in doc["recovery"]["summary"]
