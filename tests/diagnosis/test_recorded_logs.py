"""Runtime progress and recovery on logs recorded from real runs of real frameworks (issue 25).

The logs are tests/fixtures/logs/real/*.log — transformers 5.24, Lightning 2.6,
tqdm and torchrun 2.13 really run on CPU and stored as the kubelet stores a
container log (that directory's README says how each was made). Each is read
the way `taubot diagnose --logs` reads a file and judged against a running Job
(`l7-job-running-healthy`) or a succeeded one (`l7-job-succeeded`), `now` a
fixed time after the log's last line.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from tests.diagnosis.test_progress import example
from workers.collect.logs.model import last_lines
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import Diagnosis, LogEvidence
from workers.diagnosis.timeutil import parse_time

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "real"
RUNNING = ("l7-job-running-healthy", "resnet-sweep-3")
SUCCEEDED = ("l7-job-succeeded", "clip-eval-2")


def judge(name: str, *, minutes_after: float, run: tuple[str, str] = RUNNING) -> Diagnosis:
    text = (REAL / f"{name}.log").read_bytes().decode("utf-8", errors="replace")
    lines, _ = last_lines(text, 1_000_000, timestamps=True)
    last = max(parse_time(line.time) for line in lines if line.time)
    assert last is not None
    return evaluate(example(run[0]), run[1], last + timedelta(minutes=minutes_after),
                    logs=LogEvidence(lines=[(line.time, line.text) for line in lines], source="test"))


def test_a_progressing_transformers_5_run_is_active_with_its_step_and_loss() -> None:
    check = judge("hf-progressing", minutes_after=1).phase("Runtime progress")
    assert check.state.value == "active" and "step 1,660" in check.summary and "loss 4.705" in check.summary
    assert any(e.startswith("last checkpoint: /workspace/run/checkpoint-1660 at ") for e in check.evidence)


def test_a_transformers_5_run_hung_after_a_checkpoint_resumes_from_the_newest() -> None:
    d = judge("hf-hung-after-checkpoint", minutes_after=30)
    check = d.phase("Runtime progress")
    assert check.state.value == "warning" and check.summary.startswith("no progress since 2026-12-01 20:23:43")
    assert d.recovery is not None and d.recovery.action == "resume-from-checkpoint"
    assert "/workspace/run/checkpoint-40" in d.recovery.summary


def test_a_finished_transformers_5_run_is_done() -> None:
    d = judge("hf-finished", minutes_after=5, run=SUCCEEDED)
    assert d.phase("Runtime progress").state.value == "done" and "step 30" in d.phase("Runtime progress").summary
    assert d.recovery is not None and d.recovery.action == "none"


@pytest.mark.parametrize(("log", "exception"), [
    ("lightning-crash-rich", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    ("lightning-crash-tqdm", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    ("tqdm-glued-traceback", "ValueError: batch 120: expected input of shape [8, 512], got [8, 0]"),
    ("torchrun-rank-traceback", "RuntimeError: CUDA error: an illegal memory access was encountered"),
])
def test_crashes_name_the_exception(log: str, exception: str) -> None:
    d = judge(log, minutes_after=2)
    check = d.phase("Runtime progress")
    assert check.state.value == "warning" and f"the process crashed: {exception}" in check.summary, check
    assert d.first_incomplete == "Runtime progress" and d.owner == "researcher"
    assert d.recovery is not None and d.recovery.action == "fix-then-resubmit"  # no checkpoint in these


def test_the_torchrun_crash_is_the_root_cause_ranks_and_keeps_its_prefix_for_display() -> None:
    check = judge("torchrun-rank-traceback", minutes_after=2).phase("Runtime progress")
    # Ranks 0 and 2 fail too, on gloo's closed connection: the launcher's Root Cause names rank 3.
    assert "Connection closed by peer" not in check.summary
    assert "traceback: [rank3]: RuntimeError: CUDA error: an illegal memory access was encountered" in check.evidence


def test_a_dataloader_workers_death_is_a_crash() -> None:
    check = judge("dataloader-worker-killed", minutes_after=2).phase("Runtime progress")
    assert check.state.value == "warning" and "DataLoader worker was killed" in check.summary


def test_a_home_made_loop_hung_after_its_checkpoint_resumes_from_it() -> None:
    d = judge("home-made-checkpoint-hung", minutes_after=25)
    assert d.phase("Runtime progress").state.value == "warning"
    assert "step 250" in d.phase("Runtime progress").summary
    assert d.recovery is not None and d.recovery.action == "resume-from-checkpoint"
    assert "/workspace/run/ckpt_step200.pt" in d.recovery.summary


def test_a_finished_lightning_run_is_done_at_its_last_step() -> None:
    check = judge("lightning-finished", minutes_after=5, run=SUCCEEDED).phase("Runtime progress")
    assert check.state.value == "done" and "step 48" in check.summary


def test_output_held_in_pythons_buffer_is_silence_then_a_stall() -> None:
    early = judge("buffered-silence", minutes_after=5).phase("Runtime progress")
    assert early.state.value == "active" and early.summary == "progress unknown: no step/epoch/loss lines"
    late = judge("buffered-silence", minutes_after=25).phase("Runtime progress")
    assert late.state.value == "warning" and late.summary.startswith("no new log line since")
