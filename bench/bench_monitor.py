"""The stall monitor's sweep over 5,000 runs (50,000 pods) in its cache (issue 13).

Figures: CPU seconds per sweep (goal ≤ 2 s), API requests per sweep after the
first (goal: 0 LISTs — the cache is kept by WATCH), and memory. The cache is
filled as a LIST would fill it; the surface is a terminal writing nowhere and
Redis is fakeredis, so only taubot's own work is measured. Most runs are
healthy; one in fifty waits for quota, one in a hundred crash-loops.

    .venv/bin/python -m bench.bench_monitor [--runs 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path
from tempfile import TemporaryDirectory

import fakeredis
import yaml

from tests.fixtures import k8s
from workers.clock import ManualClock
from workers.gc_tuning import tune_gc
from workers.monitor.cache import KINDS, Cache
from workers.monitor.run import SweepReport, sweep_workspace
from workers.queue import InlineQueue
from workers.services import Services
from workers.settings import Settings
from workers.surfaces.terminal import TerminalSurface
from workers.workspaces import load_descriptors

NOW = k8s.T0 + timedelta(minutes=60)


class NoReader:
    """A reader that must never be called: a sweep reads only its cache (logs aside)."""

    requests_made = 0


def objects(n_runs: int, pods_per_run: int) -> list[dict]:
    out: list[dict] = [k8s.local_queue("team-a")]
    for i in range(n_runs):
        name = f"run-{i:05d}"
        if i % 50 == 0:
            j = k8s.job(name, suspend=True)
            out += [j, k8s.workload(j, state="pending")]
            continue
        j = k8s.job(name, suspend=False, active=pods_per_run, parallelism=pods_per_run)
        out += [j, k8s.workload(j, state="admitted")]
        for p in range(pods_per_run):
            crashing = i % 100 == 1 and p == 0
            container = k8s.crash_loop(exit_code=1, reason="Error") if crashing else k8s.running()
            out.append(k8s.job_pod(j, p, node=f"gpu-node-{i % 600}", phase="Running", containers=[container]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10)
    args = parser.parse_args()
    items = objects(args.runs, args.pods)
    pods = sum(o["kind"] == "Pod" for o in items)
    with TemporaryDirectory() as tmp:
        (Path(tmp) / "vision.yaml").write_text(yaml.safe_dump({
            "apiVersion": "taugrid.io/v1alpha1", "kind": "WorkspaceConnection",
            "metadata": {"name": "vision"},
            "spec": {"cluster": {"server": "http://127.0.0.1:1"}, "namespace": k8s.NS,
                     "workspace": "vision", "localQueue": "team-a", "slack": {"channels": ["C0BENCH"]}}}))
        clock = ManualClock(NOW)
        settings = Settings(workspaces_dir=Path(tmp), button_signing_key="k" * 32,
                            monitor_log_reads_per_sweep=0)
        services = Services(settings=settings, redis=fakeredis.FakeRedis(),
                            surface=TerminalSurface(lambda _: None),
                            queue=InlineQueue(clock.now, lambda *_: None), clock=clock)
        ws = load_descriptors(tmp).descriptors[0].descriptor
        cache = Cache(NoReader(), [k8s.NS])  # type: ignore[arg-type]
        for kind in KINDS:
            store = cache.stores[(k8s.NS, kind.name)]
            store.objects = {o["metadata"]["name"]: o for o in items if o["kind"] == kind.name}
            store.version = "1"
        tune_gc()  # the collector as `taubot monitor` sets it (workers/gc_tuning.py)
        cpu = []
        for i in range(3):
            started = time.process_time()
            report = SweepReport()
            asyncio.run(sweep_workspace(services, ws, cache, NoReader(), report, [0]))  # type: ignore[arg-type]
            cpu.append(time.process_time() - started)
            if i == 0:
                first = report
        tracemalloc.start()
        asyncio.run(sweep_workspace(services, ws, cache, NoReader(), SweepReport(), [0]))  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"cache: {args.runs:,} runs, {pods:,} pods")
    print(f"sweep CPU: first {cpu[0]:.2f} s (posts {sum(first.posts.values())}), then {cpu[1]:.2f} s, "
          f"{cpu[2]:.2f} s (goal ≤ 2 s); stalled {first.stalled}")
    print(f"API requests per sweep: {NoReader.requests_made} (the cache is read, nothing is LISTed)")
    print(f"memory: peak traced during a sweep {peak / 1e6:.0f} MB, max RSS {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
