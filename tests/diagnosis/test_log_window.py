"""A long log is read bounded: streamed line by line, only its last window of segments kept (plus
the newest checkpoint save before it), models built only for what is kept (issue 25).

Why: a real 1,000,000-line log read by `taubot diagnose --logs FILE` peaked at 1.85 GB RSS when
every line became an object (bench/bench_log_file.py prints the figures now). These tests assert
what is kept, never a time. The log is the recorded home-made loop
(tests/fixtures/logs/real/home-made-checkpoint-hung.log: `step=N loss=X`, `saved checkpoint …`,
kubelet timestamps) continued in its own format for tens of thousands of lines, then silent.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.diagnosis.test_progress import EXAMPLES, example
from workers.collect.logs.files import read_log, read_log_file
from workers.collect.logs.model import Window, last_lines
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import LogEvidence

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "real"
RUNNING = ("l7-job-running-healthy", "resnet-sweep-3")


def long_log(steps: int) -> tuple[bytes, datetime]:
    """The recorded loop up to its second checkpoint, then ``steps`` more `step=` lines ~2 ms apart."""
    recorded = (REAL / "home-made-checkpoint-hung.log").read_text().splitlines(keepends=True)[:10]
    start = datetime.fromisoformat(recorded[-1].split(" ", 1)[0][:26]).replace(tzinfo=UTC)
    out = list(recorded)
    at = start
    for i in range(steps):
        at = start + timedelta(milliseconds=2 * (i + 1))
        out.append(at.strftime("%Y-%m-%dT%H:%M:%S.%f000Z ") + f"step={225 + 25 * i} loss=0.0000\n")
    return "".join(out).encode(), at


def _verdict(logs: LogEvidence, now: datetime) -> tuple[str, str, str]:
    d = evaluate(example(RUNNING[0]), RUNNING[1], now, logs=logs)
    check = d.phase("Runtime progress")
    assert d.recovery is not None
    return check.state.value, check.summary, d.recovery.summary


@pytest.mark.parametrize("seekable", [True, False], ids=["file read from its end", "standard input streamed"])
def test_a_long_log_keeps_only_its_window_and_its_newest_checkpoint_and_judges_as_read_whole(
        seekable: bool) -> None:
    data, last = long_log(30_000)
    if seekable:
        logs = read_log_file(io.BytesIO(data), name="run.log", window=5_000)
        assert logs.source == "file run.log, its last 5,000 lines (of 2 MB)"
    else:
        logs = read_log(io.BytesIO(data).readlines(), name="run.log", window=5_000)
        assert logs.source == "file run.log, its last 5,000 of 30,010 lines"
    assert len(logs.lines) == 5_001  # the window and one pinned checkpoint line, not 30,010 lines
    assert "ckpt_step200.pt" in logs.lines[0][1] and logs.lines[-1][1].startswith(f"step={225 + 25 * 29_999}")
    assert logs.lines[0][0] == "2026-12-01T20:20:42.936749824Z"  # the save's own time
    whole, _ = last_lines(data.decode(), 1_000_000, timestamps=True)
    everything = LogEvidence(lines=[(line.time, line.text) for line in whole], source="file run.log")
    now = last + timedelta(minutes=25)
    state, summary, recovery = _verdict(logs, now)
    assert state == "warning" and "/workspace/run/ckpt_step200.pt" in recovery
    assert (state, recovery) == _verdict(everything, now)[::2]
    assert summary.split("(")[0] == _verdict(everything, now)[1].split("(")[0]


def test_a_window_holds_at_most_its_size_of_segments_and_no_models() -> None:
    """`\\r` redraws on one kubelet line (tqdm) count as segments: a 300 KB bar-only line cannot
    overflow the window, and every kept segment keeps its line's timestamp."""
    window = Window(100, timestamps=True)
    bar = "".join(f"\r 45%|████▌     | {n}/1000 [00:10<00:12, 44.1it/s]" for n in range(5_000))  # tqdm std.py
    window.add("2026-12-01T20:23:19.466395136Z " + bar)
    window.add("2026-12-01T20:23:20.000000000Z done")
    assert len(window.kept) == 100 and window.seen == 5_002 and window.truncated
    assert all(isinstance(pair, tuple) for pair in window.kept)
    assert {t for t, _ in list(window.kept)[:-1]} == {"2026-12-01T20:23:19.466395136Z"}
    lines, truncated = last_lines("a\nb\r\nc\rd\n", 2, timestamps=False)
    assert [x.text for x in lines] == ["c", "d"] and truncated


def test_cli_logs_file_reads_a_long_file_as_its_window(tmp_path: Path) -> None:
    data, _ = long_log(25_000)
    log = tmp_path / "run.log"
    log.write_bytes(data)
    done = subprocess.run([sys.executable, "-m", "workers.cli", "diagnose", RUNNING[1], "--from-file",
                           str(EXAMPLES / f"{RUNNING[0]}.json"), "--logs", str(log), "--now",
                           "2026-12-01T21:00:00Z", "--format", "json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["checks"][0]["state"] == "warning" and "step 625,200" in doc["checks"][0]["summary"]
    assert doc["recovery"]["action"] == "resume-from-checkpoint"
    assert "ckpt_step200.pt" in doc["recovery"]["summary"]
