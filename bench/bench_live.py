"""Live status latency with injected RTT: `python -m bench.bench_live [--rtt-ms 20] [--pods 256]`.

A RayJob of N pods (one crash-looping) is served by the local Kubernetes API
emulator (in its own process) with `latency` = RTT on every request; we time `diagnose_live` end to
end (client creation, three request rounds, evaluation) and print the median,
the worst run and the request count. Target: ≤ 4×RTT + 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.synth import RUN_NAME, synthetic_snapshot
from tests.fixtures import k8s
from tests.live.conftest import workspace_objects, write_descriptor
from workers.diagnosis.live import diagnose_live
from workers.kube.client import Identity
from workers.workspaces import load_descriptors

IDENTITY = Identity(user="alice@example.com", groups=("team-vision", "gpu-users"))


async def measure(pods: int, rtt: float, runs: int) -> tuple[list[float], int, str | None]:
    objects = workspace_objects() + synthetic_snapshot(pods, "RayJob", failing_pod_index=0)["items"]
    timings: list[float] = []
    requests = 0
    first = None
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump.json"
        dump.write_text(json.dumps(objects))
        server = subprocess.Popen([sys.executable, "-m", "bench.emulator_process", str(dump), str(rtt)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            base_url = server.stdout.readline().strip()
            # Production descriptors name the cluster's CA; loading that one certificate is
            # what a real status pays, not the whole system bundle an unset CA would load.
            ca = Path(tmp) / "ca.pem"
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=bench-ca", "-days", "1",
                            "-keyout", str(Path(tmp) / "ca.key"), "-out", str(ca)],
                           check=True, capture_output=True)
            write_descriptor(Path(tmp), base_url, ca=ca)
            registry = load_descriptors(tmp)
            for _ in range(runs):
                start = time.perf_counter()
                result = await diagnose_live(registry, run=RUN_NAME, identity=IDENTITY,
                                             now=k8s.T0 + timedelta(minutes=30), workspace="vision")
                timings.append((time.perf_counter() - start) * 1000)
                requests, first = result.requests, result.diagnosis.first_incomplete
        finally:
            server.stdin.close()
            server.wait(timeout=10)
    return timings, requests, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--pods", type=int, default=256)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    timings, requests, first = asyncio.run(measure(args.pods, args.rtt_ms / 1000, args.runs))
    target = 4 * args.rtt_ms + 50
    print(f"live status, RayJob with {args.pods} pods, injected RTT {args.rtt_ms:g} ms, {args.runs} runs")
    print(f"  requests per status: {requests}   first incomplete: {first}")
    print(f"  median {statistics.median(timings):.1f} ms   min {min(timings):.1f} ms   "
          f"max {max(timings):.1f} ms   target ≤ {target:.0f} ms")


if __name__ == "__main__":
    main()
