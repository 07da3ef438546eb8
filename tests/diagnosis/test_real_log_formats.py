"""Runtime progress on logs as real frameworks and the kubelet write them (SPEC §11 "Logs"; issue 25).

Lines are shaped as `kubectl logs --timestamps` prints them (one RFC 3339
timestamp, then the line, `\\r` redraws inside it) from formats measured in
shared/reference/training-logs.md §2.4–2.7: transformers 5.24 Trainer dicts
with string values and its `… saved in …/checkpoint-N/…` lines, Ray's `(Name pid=N)` prefix
in ANSI colour, DeepSpeed's launcher line, HF's logging prefix. Each test
fails on the parser before issue 25 (except the ones that guard against
claiming too much: a traceback or error line after which training went on).
Logs recorded from real runs are tested in test_recorded_logs.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.diagnosis.test_progress import EXAMPLES, NOW, at, diagnose
from workers.collect.logs.model import last_lines
from workers.diagnosis.progress import parse_progress

JOB = ("l7-job-running-healthy", "resnet-sweep-3")  # a Job whose pod runs: a stall can be a stall
ESC = "\x1b"


def kubelet(lines: list[tuple[str, str]]) -> list[tuple[str | None, str]]:
    """(time, text) of a `kubectl logs --timestamps` text, read as taubot reads it."""
    text = "".join(f"{t} {line}\n" for t, line in lines)
    return [(line.time, line.text) for line in last_lines(text, 100_000, timestamps=True)[0]]


def lightning_bar(n: int, total: int = 1000, loss: float = 1.0) -> str:  # lightning tqdm_progress.py BAR_FORMAT
    return f"Epoch 3:  {n * 100 // total}%|████▌     | {n}/{total} [01:02<01:10,  7.21it/s, loss={loss:.3g}, v_num=3]"


def redraws(start: int, stop: int) -> str:
    """One kubelet line of tqdm redraws: tqdm writes `\\r` + state, never a newline (tqdm std.py)."""
    return "".join("\r" + lightning_bar(n) for n in range(start, stop + 1, 10))


# --------------------------------------------------------------- kubelet `\r` lines keep their time


def test_redraws_on_one_kubelet_line_all_carry_its_timestamp_so_a_stop_is_a_stall() -> None:
    lines = kubelet([(at(55), redraws(10, 300)), (at(45), redraws(310, 450))])
    d = diagnose(*JOB, lines)
    check = d.phase("Runtime progress")
    assert check.state.value == "warning", check
    assert "no progress since 2026-11-30 09:45:00Z" in check.summary and "step 450" in check.summary


def test_cli_logs_file_reads_the_timestamp_before_splitting_redraws(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text(f"{at(50)} {redraws(10, 200)}\n{at(40)} {redraws(210, 450)}\n")
    done = subprocess.run([sys.executable, "-m", "workers.cli", "diagnose", "resnet-sweep-3", "--from-file",
                           str(EXAMPLES / "l7-job-running-healthy.json"), "--logs", str(log), "--now",
                           "2026-11-30T10:30:00Z", "--format", "json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [check] = json.loads(done.stdout)["checks"]
    assert check["state"] == "warning" and "no progress since 2026-11-30 09:50:00Z" in check["summary"]


def test_segments_of_a_raw_kubelet_line_handed_to_the_parser_keep_its_time() -> None:
    p = parse_progress([(at(30), redraws(10, 90))])
    assert p.last_step == 90 and p.last_progress_at == NOW - timedelta(minutes=30)


# --------------------------------------------------------------- transformers 5


HF5 = "{'loss': '5.391', 'grad_norm': '1.147', 'learning_rate': '0.0004993', 'epoch': '0.009766'}"


def test_transformers_5_dicts_with_string_values_are_progress() -> None:
    lines = [(at(3 - i / 10), HF5.replace("5.391", f"{5.391 - i / 10:.4g}")) for i in range(5)]
    check = diagnose(*JOB, lines).phase("Runtime progress")
    assert check.state.value == "active" and "loss 4.991 (falling)" in check.summary


def test_transformers_5_step_checkpoints_and_home_made_saves_are_checkpoints_newest_named() -> None:
    hf = [(at(50), HF5),
          (at(49), "Configuration saved in /mnt/blob/runs/resnet-sweep-3/checkpoint-500/config.json"),
          (at(49), "Model weights saved in /mnt/blob/runs/resnet-sweep-3/checkpoint-500/model.safetensors"),
          (at(46), "Configuration saved in /mnt/blob/runs/resnet-sweep-3/checkpoint-1000/config.json"),
          (at(46), "Model weights saved in /mnt/blob/runs/resnet-sweep-3/checkpoint-1000/model.safetensors"),
          (at(45), HF5)]
    d = diagnose(*JOB, hf)
    assert d.recovery is not None and d.recovery.action == "resume-from-checkpoint"
    assert "/mnt/blob/runs/resnet-sweep-3/checkpoint-1000" in d.recovery.summary
    assert "checkpoint-1000/config.json" not in d.recovery.summary
    home = [(at(50), "step=100 loss=2.31"), (at(48), "saved checkpoint /mnt/blob/ckpt/ckpt_step100.pt"),
            (at(46), "step=200 loss=2.02"), (at(45), "saved checkpoint /mnt/blob/ckpt/ckpt_step200.pt")]
    d = diagnose(*JOB, home)
    assert d.recovery is not None and d.recovery.action == "resume-from-checkpoint"
    assert "/mnt/blob/ckpt/ckpt_step200.pt" in d.recovery.summary
    tf = [(at(50), "step=100 loss=2.31"),
          (at(45), "INFO:tensorflow:Saving checkpoints for 100 into /mnt/blob/tf/model.ckpt.")]
    assert "/mnt/blob/tf/model.ckpt" in (diagnose(*JOB, tf).recovery.summary or "")  # type: ignore[union-attr]


# --------------------------------------------------------------- tracebacks
# Lightning's ~75-line traceback, one glued to a bar, CUDA's hint lines after the exception and a
# rank's traceback under torchrun are recorded logs: tests/diagnosis/test_recorded_logs.py.


def test_a_traceback_after_which_training_went_on_is_not_the_crash() -> None:
    lines = [(at(5), "Traceback (most recent call last):"), (at(5), '  File "hub.py", line 3, in get'),
             (at(5), "ConnectionError: retrying the download"),
             *[(at(4 - i / 10), lightning_bar(100 + 10 * i)) for i in range(5)]]
    check = diagnose(*JOB, lines).phase("Runtime progress")
    assert check.state.value == "active" and "step 140" in check.summary


# --------------------------------------------------------------- prefixes


def test_hf_dicts_printed_by_ray_workers_in_ansi_colour_are_progress() -> None:
    # Ray 2.60 driver log (measured, reference §2.6): `ESC[36m(RayTrainWorker pid=13730)ESC[0m {...}`
    lines = [(at(3 - i / 10), f"{ESC}[36m(RayTrainWorker pid=13730, ip=10.244.1.7){ESC}[0m "
              f"{{'loss': {1.5 - i / 10:.4g}, 'grad_norm': 0.9, 'learning_rate': 4e-05, 'epoch': {i / 10}}}")
             for i in range(4)]
    check = diagnose(*JOB, lines).phase("Runtime progress")
    assert check.state.value == "active" and "loss 1.2" in check.summary


def test_hf_logging_prefix_is_stripped_before_matching() -> None:
    lines = [(at(45), "[INFO|trainer.py:3705] 2026-07-09 02:32:34,568 >> Saving model checkpoint to "
                      "/mnt/blob/runs/resnet-sweep-3/checkpoint-300"),
             (at(45), "[INFO|trainer.py:2584] 2026-07-09 02:32:35,001 >> " + HF5)]
    d = diagnose(*JOB, lines)
    check = d.phase("Runtime progress")
    assert check.state.value == "warning" and "loss 5.391" in check.summary  # recognised, then 45 min of nothing
    assert "checkpoint-300" in (d.recovery.summary if d.recovery else "")


# --------------------------------------------------------------- a final error line without traceback


@pytest.mark.parametrize("line", [
    "[ERROR] 2026-12-01 20:21:04,117 train: step 4312 failed: RuntimeError: CUDA error: unspecified launch failure",
    "[2026-12-01 20:21:04,117] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py'] "
    "exits with return code = -9",  # DeepSpeed launcher (reference §2.5)
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
])
def test_a_final_error_line_without_traceback_is_the_crash(line: str) -> None:
    lines = [(at(10 - i), lightning_bar(100 + 10 * i)) for i in range(4)] + [(at(5), line)]
    check = diagnose(*JOB, lines).phase("Runtime progress")
    assert check.state.value == "warning" and check.finding.owner == "researcher", check


def test_an_error_line_followed_by_progress_is_not_the_crash() -> None:
    lines = [(at(5), "[ERROR] 2026-12-01 20:21:04,117 loader: shard 7: OSError: retrying in 5 s"),
             *[(at(4 - i / 10), lightning_bar(100 + 10 * i)) for i in range(4)]]
    assert diagnose(*JOB, lines).phase("Runtime progress").state.value == "active"


def test_a_million_line_log_keeps_only_a_bounded_tail_for_the_crash_analysis() -> None:
    start = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    p = parse_progress(((start + timedelta(milliseconds=i)).isoformat(), f"step={i} loss=1.0")
                       for i in range(300_000))
    assert p.last_step == 299_999 and p.found is None
