"""Parsing a 200,000-line training log into progress (issue 12): time and peak memory.

The log mixes real formats (HF Trainer dicts, tqdm bars, Megatron iteration
lines, checkpoint saves) with kubelet timestamps, as `kubectl logs --timestamps`
prints it; the figures are the median of 3 runs.

    .venv/bin/python -m bench.bench_progress
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from datetime import UTC, datetime, timedelta

from workers.collect.logs.model import last_lines
from workers.diagnosis.progress import parse_progress

LINES = 200_000


def make_log(n: int) -> str:
    start = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
    out = []
    for i in range(n):
        stamp = (start + timedelta(milliseconds=50 * i)).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
        kind = i % 4
        if kind == 0:
            text = (f"{{'loss': {2.5 - i / n:.4f}, 'grad_norm': 1.2, 'learning_rate': 4e-05, "
                    f"'epoch': {i / n:.2f}}}")
        elif kind == 1:
            text = f"{i * 100 // n}%|█████████▊| {i}/{n} [26:01<00:22,  1.49it/s]"
        elif kind == 2:
            text = (f" iteration {i:>8}/  {n} | consumed samples: {i * 8} | lm loss: {2.5 - i / n:.6E} |")
        else:
            saved = f"Saving model checkpoint to /ckpt/checkpoint-{i}"
            text = saved if i % 1000 == 3 else "INFO data: shard loaded"
        out.append(f"{stamp} {text}\n")
    return "".join(out)


def main() -> int:
    text = make_log(LINES)
    times = []
    for _ in range(3):
        started = time.perf_counter()
        lines, _ = last_lines(text, LINES, timestamps=True)
        progress = parse_progress((line.time, line.text) for line in lines)
        times.append(time.perf_counter() - started)
    tracemalloc.start()
    lines, _ = last_lines(text, LINES, timestamps=True)
    parse_progress((line.time, line.text) for line in lines)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"log: {LINES:,} lines, {len(text) / 1e6:.1f} MB")
    median = statistics.median(times)
    print(f"split + parse: median {median:.2f} s (min {min(times):.2f}, max {max(times):.2f})")
    print(f"peak traced memory: {peak / 1e6:.0f} MB; last step {progress.last_step:,.0f}, "
          f"checkpoint {progress.last_checkpoint}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
