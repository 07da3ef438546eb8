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
from tests.diagnosis.test_node_health import node
from tests.fixtures import k8s
from tests.live.conftest import workspace_objects, write_descriptor
from workers.collect.investigate import diagnose_live
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity
from workers.plumbing.gc_tuning import tune_gc

IDENTITY = Identity(user="alice@example.com", groups=("team-vision", "gpu-users"))


def make_ca_and_server_cert(tmp: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate it signed for 127.0.0.1, as a cluster has."""
    ca_key, ca, key, csr, cert = (tmp / n for n in ("ca.key", "ca.pem", "server.key", "server.csr",
                                                    "server.pem"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", *ec, "-subj", "/CN=bench-ca", "-days", "1", "-keyout", str(ca_key), "-out", str(ca))
    run("req", *ec, "-subj", "/CN=kube-apiserver", "-keyout", str(key), "-out", str(csr))
    ext = tmp / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-days", "1", "-extfile", str(ext), "-out", str(cert))
    return ca, cert, key


async def measure(pods: int, rtt: float, runs: int, tls: bool = False) -> tuple[list[float], int, str | None]:
    items = synthetic_snapshot(pods, "RayJob", failing_pod_index=0)["items"]
    hosts = sorted({p["spec"]["nodeName"] for p in items
                    if p.get("kind") == "Pod" and p["spec"].get("nodeName")})
    objects = workspace_objects() + items + [node(**{"metadata.name": h}) for h in hosts]  # the run's nodes
    timings: list[float] = []
    requests = 0
    first = None
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump.json"
        dump.write_text(json.dumps(objects))
        # Production descriptors name the cluster's CA; loading that one certificate is what a real
        # status pays, not the whole system bundle an unset CA would load. With --tls the emulator
        # serves https with a certificate that CA signed, so the handshakes are paid too.
        ca, cert, key = make_ca_and_server_cert(Path(tmp))
        tls_args = [str(cert), str(key)] if tls else []
        server = subprocess.Popen([sys.executable, "-m", "bench.emulator_process", str(dump), str(rtt),
                                   *tls_args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            base_url = server.stdout.readline().strip()
            write_descriptor(Path(tmp), base_url, ca=ca)
            registry = load_descriptors(tmp)
            tune_gc()  # the collector as `taubot worker` sets it (workers/plumbing/gc_tuning.py)
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
    parser.add_argument("--tls", action="store_true",
                        help="the emulator serves https (with a CA the descriptor names)")
    args = parser.parse_args()
    timings, requests, first = asyncio.run(measure(args.pods, args.rtt_ms / 1000, args.runs, args.tls))
    target = 4 * args.rtt_ms + (60 if args.tls else 50)
    transport = "TLS with a named CA" if args.tls else "plain http"
    print(f"live status, RayJob with {args.pods} pods, injected RTT {args.rtt_ms:g} ms, {transport}, "
          f"{args.runs} runs")
    print(f"  requests per status: {requests}   first incomplete: {first}")
    print(f"  median {statistics.median(timings):.1f} ms   min {min(timings):.1f} ms   "
          f"max {max(timings):.1f} ms   target ≤ {target:.0f} ms")


if __name__ == "__main__":
    main()
