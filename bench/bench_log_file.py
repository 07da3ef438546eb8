"""Reading a 1,000,000-line real-format log with `taubot diagnose --logs FILE` (issue 25): the
command's wall time and its peak RSS, as its own process.

The log is the recorded transformers 5 run (tests/fixtures/logs/real/hf-progressing.log: real
Trainer output stored as the kubelet stores it, one timestamp then `\\r` redraws per line) repeated
until it is 1,000,000 lines, each copy stamped after the one before. Goal: peak RSS < 300 MB and
a few seconds (before: 1.85 GB, when every line became a model). The same command without
`--logs` is measured too: the interpreter and imports alone.

    .venv/bin/python -m bench.bench_log_file [--lines N] [--repo DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "tests" / "fixtures" / "logs" / "real" / "hf-progressing.log"
DUMP = ROOT / "workers" / "examples" / "l7-job-running-healthy.json"
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})\d*Z ")
NOW = "2026-12-01T23:00:00Z"


def write_log(path: Path, lines: int) -> int:
    """The recorded log repeated up to ``lines`` lines; returns the size in bytes."""
    recorded = [line + "\n" for line in RECORDED.read_bytes().decode().split("\n") if line]  # not on `\r`
    parsed = []
    for line in recorded:
        match = STAMP.match(line)
        assert match, line[:80]
        parsed.append((datetime.fromisoformat(match.group(1)), line[match.end():]))
    start, span = parsed[0][0], parsed[-1][0] - parsed[0][0] + timedelta(seconds=1)
    size = 0
    with path.open("w", encoding="utf-8", newline="") as out:
        for i in range(lines):
            at, text = parsed[i % len(parsed)]
            shifted = at + span * (i // len(parsed)) - span * (lines // len(parsed) + 1)
            stamp = (shifted - start + datetime(2026, 12, 1, 22, 30)).strftime("%Y-%m-%dT%H:%M:%S.%f000Z ")
            size += out.write(stamp + text)
    return size


def run(args: list[str], cwd: Path, python: str) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB, the kernel's figure for that one process) and stdout of
    ``python -m workers.cli ARGS``."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen([python, "-m", "workers.cli", *args], cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"failed ({proc.returncode}): {err.read()[-2000:]}")
        return seconds, usage.ru_maxrss / 1024, out.read()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout to run (default: this one)")
    args = parser.parse_args()
    python = str(args.repo / ".venv" / "bin" / "python") if args.repo != ROOT else sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.log"
        size = write_log(log, args.lines)
        base = ["diagnose", "resnet-sweep-3", "--from-file", str(DUMP), "--now", NOW, "--format", "json"]
        bare_seconds, bare_rss, _ = run(base, args.repo, python)
        seconds, rss, out = run([*base, "--logs", str(log)], args.repo, python)
    summary = re.search(r'"name": "Runtime progress".*?"summary": "([^"]*)"', out, re.S)
    print(f"log: {args.lines:,} lines, {size / 1e6:.0f} MB ({RECORDED.name} repeated)")
    print(f"without --logs: {bare_seconds:.2f} s, peak RSS {bare_rss:.0f} MB")
    print(f"diagnose --logs FILE: {seconds:.2f} s, peak RSS {rss:.0f} MB")
    print(f"runtime progress: {summary.group(1) if summary else '?'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
