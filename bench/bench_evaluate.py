"""How much CPU `evaluate()` takes as a run grows: 10 / 100 / 1,000 / 5,000 / 20,000 pods.

Snapshots come from `bench.synth.synthetic_snapshot` (fixture shapes, a RayJob with one
OOMKilled, crash-looping worker and ~10 % unrelated objects). Each size is timed several times
with `time.process_time` (CPU time, as issue 16 asks), under the worker's garbage-collector
setting (`workers.plumbing.gc_tuning.tune_gc`, which every worker and the monitor run):

- *cold*: the engine's per-object caches are dropped before each call, as for a live status or
  a watch tick, whose objects are new every time;
- *warm*: the same objects judged again, as the stall monitor does each sweep.

Goals (issue 16): cold <= 20 ms at 1,000 pods, <= 100 ms at 5,000, linear beyond.

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
from workers.diagnosis import podfacts, shapes
from workers.diagnosis.evaluate import evaluate
from workers.plumbing.gc_tuning import tune_gc

SIZES = (10, 100, 1_000, 5_000, 20_000)
NOW = k8s.T0 + timedelta(minutes=30)
GOALS_MS = {1_000: 20.0, 5_000: 100.0}


def runs_for(n: int) -> int:
    return 25 if n <= 100 else 9 if n <= 1_000 else 5


def _drop_caches() -> None:
    shapes.clear_cache()
    podfacts.clear_cache()


def time_one(n: int) -> tuple[int, float, float, str]:
    snap = synthetic_snapshot(n, "RayJob", failing_pod_index=n // 2)
    tune_gc()  # as a worker does at start: the snapshot is built, the heap frozen
    d = evaluate(snap, RUN_NAME, NOW)  # a sanity check of the verdict
    verdict = f"{d.first_incomplete}: {d.phase(d.first_incomplete).state.value}" if d.first_incomplete \
        else "all done"
    cold, warm = [], []
    for _ in range(runs_for(n)):
        _drop_caches()
        t = time.process_time()
        evaluate(snap, RUN_NAME, NOW)
        cold.append((time.process_time() - t) * 1000)
        t = time.process_time()
        evaluate(snap, RUN_NAME, NOW)
        warm.append((time.process_time() - t) * 1000)
    _drop_caches()
    return len(snap["items"]), statistics.median(cold), statistics.median(warm), verdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=int, metavar="PODS", help="cProfile one cold evaluate() at this size")
    args = ap.parse_args()
    if args.profile:
        snap = synthetic_snapshot(args.profile, "RayJob", failing_pod_index=args.profile // 2)
        tune_gc()
        prof = cProfile.Profile()
        prof.enable()
        evaluate(snap, RUN_NAME, NOW)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return
    print(f"{'pods':>6} {'objects':>8} {'cold ms':>8} {'µs/pod':>7} {'warm ms':>8}  verdict")
    cold_at: dict[int, float] = {}
    for n in SIZES:
        objects, cold, warm, verdict = time_one(n)
        cold_at[n] = cold
        print(f"{n:>6} {objects:>8} {cold:>8.1f} {cold / n * 1000:>7.1f} {warm:>8.1f}  {verdict}")
    for n, goal in GOALS_MS.items():
        print(f"{n:,} pods cold: {cold_at[n]:.1f} ms CPU (goal <= {goal:.0f} ms: "
              f"{'met' if cold_at[n] <= goal else 'MISSED'})")
    print(f"20,000 / 5,000 = {cold_at[20_000] / cold_at[5_000]:.2f}x (linear: 4x)")


if __name__ == "__main__":
    main()
