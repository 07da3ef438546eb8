"""How long `evaluate()` takes as a run grows: 10 / 100 / 1,000 / 5,000 pods.

Snapshots come from `bench.synth.synthetic_snapshot` (fixture shapes, a RayJob with one
OOMKilled, crash-looping worker and ~10 % unrelated objects). Each size is timed several times
with `time.perf_counter`; the table shows the median. Target: <= 50 ms at 1,000 pods, growing
linearly (ms per pod roughly flat).

    .venv/bin/python -m bench.bench_evaluate [--profile N]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from datetime import timedelta

from bench.synth import RUN_NAME, synthetic_snapshot
from tests.fixtures import k8s
from workers.diagnosis.evaluate import evaluate

SIZES = (10, 100, 1_000, 5_000)
NOW = k8s.T0 + timedelta(minutes=30)
TARGET_MS_AT_1000 = 50.0


def runs_for(n: int) -> int:
    return 25 if n <= 100 else 9 if n <= 1_000 else 5


def time_one(n: int) -> tuple[int, float, str]:
    snap = synthetic_snapshot(n, "RayJob", failing_pod_index=n // 2)
    d = evaluate(snap, RUN_NAME, NOW)  # warm-up, and a sanity check of the verdict
    verdict = f"{d.first_incomplete}: {d.phase(d.first_incomplete).state.value}" if d.first_incomplete \
        else "all done"
    samples = []
    for _ in range(runs_for(n)):
        t = time.perf_counter()
        evaluate(snap, RUN_NAME, NOW)
        samples.append((time.perf_counter() - t) * 1000)
    return len(snap["items"]), statistics.median(samples), verdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=int, metavar="PODS", help="cProfile one evaluate() at this size")
    args = ap.parse_args()
    if args.profile:
        snap = synthetic_snapshot(args.profile, "RayJob", failing_pod_index=args.profile // 2)
        prof = cProfile.Profile()
        prof.enable()
        evaluate(snap, RUN_NAME, NOW)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        return
    print(f"{'pods':>6} {'objects':>8} {'median ms':>10} {'ms/pod':>8}  verdict")
    rows = []
    for n in SIZES:
        objects, ms, verdict = time_one(n)
        rows.append((n, ms))
        print(f"{n:>6} {objects:>8} {ms:>10.2f} {ms / n:>8.4f}  {verdict}")
    at_1000 = dict(rows)[1_000]
    growth = (dict(rows)[5_000] / at_1000) if at_1000 else float("nan")
    print(f"1,000 pods: {at_1000:.1f} ms (target <= {TARGET_MS_AT_1000:.0f} ms: "
          f"{'met' if at_1000 <= TARGET_MS_AT_1000 else 'MISSED'}); 5,000/1,000 = {growth:.2f}x "
          "(linear: ~5x)")


if __name__ == "__main__":
    main()
