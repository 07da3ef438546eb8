"""A waiting run's queue position: requests, rounds and latency per status and per watch tick,
and what drawing its chart costs. `python -m bench.bench_queue [--rtt-ms 20] [--runs 15]`.

The Kubernetes API emulator (in this process, `latency` = RTT on every request) serves a
ClusterQueue with three LocalQueues' Workloads waiting (Kueue's visibility API computed from them);
the run waits 3rd. Three cases, each timed end to end through `investigate` as a status or a
watch tick makes it:

* **first status**: no earlier read — the LocalQueue's list, the LocalQueue and the namespace's
  Workloads, then the ClusterQueue's list and the ClusterQueue, then the Workload ahead in another
  namespace;
* **tick, Workload unchanged**: the watch's last read is reused (no queue request);
* **tick, Workload changed**: re-read after round 2, the ClusterQueue's reads started at once.

Then the loss + learning-rate chart (matplotlib Agg, 900×720) of a 500-line log: the time a card
would have waited for it before the card was posted first.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from tests.live.conftest import write_descriptor
from workers.collect.investigate import investigate
from workers.collect.kueue import QueueMemo
from workers.collect.plan import ReadPlan
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity, KubeClients
from workers.render.charts import loss_chart

IDENTITY = Identity(user="alice@example.com", groups=("team-vision", "gpu-users"))
CQ = "h100-shared"
NOW = k8s.T0 + timedelta(minutes=30)


def queued(name: str, at: float, ns: str = k8s.NS, queue: str = "team-a") -> list[dict]:
    job = k8s.job(name, ns, queue=queue, suspend=True, gpus=8, at=at)
    return [job, k8s.workload(job, state="waiting_for_quota", cluster_queue=CQ, flavor="h100", at=at)]


def cluster() -> list[dict]:
    return [k8s.tau_workspace("vision"), k8s.pvc(),
            k8s.local_queue("team-a", cluster_queue=CQ),
            k8s.local_queue("nlp", ns="team-nlp", cluster_queue=CQ),
            k8s.cluster_queue(CQ, gpu_quota=64, gpu_used=56, flavor="h100"),
            *queued("nlp-pretrain", 10, ns="team-nlp", queue="nlp"), *queued("sweep-7", 20),
            *queued("train", 30), *queued("eval-late", 40)]


async def measure(rtt: float, runs: int) -> dict[str, tuple[list[float], int, int]]:
    """Per case: (timings in ms, requests, rounds) of the last run."""
    out: dict[str, tuple[list[float], int, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        async with KubeEmulator(cluster(), latency=rtt) as emu:
            write_descriptor(Path(tmp), emu.base_url)
            registry = load_descriptors(tmp)
            kube = KubeClients()
            memo: QueueMemo | None = None

            async def one(case: str, queue_memo: QueueMemo | None) -> QueueMemo | None:
                emu.clear_requests()
                start = time.perf_counter()
                report = await investigate(registry.resolve(workspace="vision"), kube=kube, identity=IDENTITY,
                                           now=NOW, plan=ReadPlan(run="train", workspace="vision",
                                                                  queue_memo=queue_memo))
                timings = out.setdefault(case, ([], 0, 0))[0]
                timings.append((time.perf_counter() - start) * 1000)
                out[case] = (timings, report.requests, emu.rounds())
                return report.queue_memo

            for _ in range(runs):
                memo = await one("first status", None)
            for _ in range(runs):
                await one("tick, Workload unchanged", memo)
            assert memo is not None
            stale = memo.model_copy(update={"workload_version": "changed"})
            for _ in range(runs):
                await one("tick, Workload changed", stale)
    return out


def chart_ms(runs: int) -> tuple[float, int]:
    curve = [(float(i), 2.5 - i / 400) for i in range(500)]
    rates = [(float(i), 1e-4 * min(1.0, i / 50)) for i in range(500)]
    loss_chart(curve[:10], "warm-up", lr_curve=rates[:10])  # matplotlib's import, paid once per process
    timings, size = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        png = loss_chart(curve, "bench", lr_curve=rates) or b""
        timings.append((time.perf_counter() - start) * 1000)
        size = len(png)
    return statistics.median(timings), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    results = asyncio.run(measure(args.rtt_ms / 1000, args.runs))
    print(f"queue position of a waiting run, injected RTT {args.rtt_ms:g} ms, {args.runs} runs each")
    for case, (timings, requests, rounds) in results.items():
        print(f"  {case:<26} requests {requests:>2}   rounds {rounds}   "
              f"median {statistics.median(timings):6.1f} ms   max {max(timings):6.1f} ms")
    median, size = chart_ms(max(3, args.runs // 3))
    print(f"  loss + learning-rate chart (500 points, 900x720 PNG, {size // 1024} KiB): "
          f"median {median:.0f} ms — drawn after the card is posted")


if __name__ == "__main__":
    main()
