"""Cold `taubot diagnose` live, as a user runs it: a new process each time (imports, client, the
connections, the rounds, evaluation, output) against the Kubernetes API emulator in its own process.

Two figures (issue 36): the median wall time of ``--runs`` processes at 0 RTT (goal ≤ 0.6 s), and
the same at ``--rtt`` (200 ms) behind a delaying proxy (`bench/emulator_process.py --rtt`: every
byte takes RTT/2 each way and each new connection's TCP handshake a round trip), printed as round
trips: (wall at the RTT − wall at 0 RTT) / RTT, so imports and CPU cancel out and every handshake,
every sequential request and every connection opened after the first round counts (goal ≤ 4).
``--tls`` serves https with a named CA (a TLS handshake per connection too); ``--importtime``
prints the slowest imports of one run (`python -X importtime`).

    .venv/bin/python -m bench.bench_cold_cli [--runs 7] [--rtt 0.2] [--tls] [--importtime]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.bench_live import make_ca_and_server_cert
from bench.emulator_process import EmulatorProcess
from tests.live.conftest import workspace_objects, write_descriptor
from tests.slack.conftest import example_objects

RUN = "llama-ft-7b"
EXAMPLE = "l4-job-waiting-for-quota"


def command(workspaces: Path) -> list[str]:
    return [sys.executable, "-m", "workers.cli", "diagnose", RUN, "--workspace", "vision",
            "--workspaces-dir", str(workspaces), "--as", "alice@example.com", "--as-group", "team-vision",
            "--format", "json"]


@dataclass
class Runs:
    """``runs`` cold processes at one RTT: their wall and CPU times, what the emulator served."""

    rtt: float
    walls: list[float]
    cpus: list[float]
    requests: int  # per run
    connections: int  # per run (distinct client connections the emulator saw)
    first_incomplete: str | None

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpus)


def cold_runs(runs: int, rtt: float, *, tls: bool, tmp: Path) -> Runs:
    """``runs`` cold `taubot diagnose` processes against a fresh emulator process at ``rtt``."""
    objects = [*workspace_objects(), *example_objects(EXAMPLE)]
    ca, served_as = None, None
    if tls:  # a throwaway CA, named by the descriptor as a production one names the cluster's
        (tmp / f"tls-{rtt}").mkdir()
        ca, cert, key = make_ca_and_server_cert(tmp / f"tls-{rtt}")
        served_as = (cert, key)
    with EmulatorProcess(objects, rtt=rtt or None, tls=served_as) as emu:
        workspaces = tmp / f"workspaces-{rtt}"
        workspaces.mkdir()
        write_descriptor(workspaces, emu.base_url, ca=ca)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAUBOT_")}
        argv = command(workspaces)
        subprocess.run(argv, env=env, capture_output=True, check=False)  # the page cache, .pyc files
        served = len(emu.requests())
        walls, cpus = [], []
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            walls.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            if done.returncode not in (0, 1):
                raise SystemExit(f"taubot diagnose failed ({done.returncode}): {done.stderr[-2000:]}")
        last = emu.requests()[served:]
    connections = len({tuple(r["connection"]) for r in last}) // runs
    first = json.loads(done.stdout).get("first_incomplete")
    return Runs(rtt, walls, cpus, len(last) // runs, connections, first)


def importtime(argv: list[str], env: dict[str, str]) -> None:
    traced = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, capture_output=True, text=True,
                            check=False)
    rows = []
    for line in traced.stderr.splitlines():
        if m := re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line):
            rows.append((int(m.group(2)), len(m.group(3)), m.group(4)))
    total = sum(c for c, depth, _ in rows if depth == 1)
    print(f"imports: {total / 1e6:.3f} s in all (top level); the slowest, cumulative:")
    for cum, depth, name in sorted(rows, reverse=True)[:25]:
        print(f"  {cum / 1000:8.1f} ms  {'  ' * (depth - 1)}{name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rtt", type=float, default=0.2, help="seconds of round trip of the second figure "
                        "(0: only the first)")
    parser.add_argument("--tls", action="store_true", help="https with a named CA")
    parser.add_argument("--importtime", action="store_true")
    args = parser.parse_args()
    scheme = "https" if args.tls else "http"
    with tempfile.TemporaryDirectory() as tmp:
        local = cold_runs(args.runs, 0.0, tls=args.tls, tmp=Path(tmp))
        print(f"cold taubot diagnose live ({EXAMPLE}, {scheme}, 0 RTT), {args.runs} processes: median "
              f"{local.wall:.3f} s, min {min(local.walls):.3f} s (goal ≤ 0.6 s); CPU of the process: "
              f"median {local.cpu:.3f} s, min {min(local.cpus):.3f} s (the wall time on a busy machine is "
              f"mostly waiting for a core); {local.requests} requests on {local.connections} connections; "
              f"first incomplete {local.first_incomplete}; load average {os.getloadavg()[0]:.2f}")
        if args.rtt:
            far = cold_runs(args.runs, args.rtt, tls=args.tls, tmp=Path(tmp))
            trips = (far.wall - local.wall) / args.rtt
            print(f"cold taubot diagnose live ({EXAMPLE}, {scheme}, {args.rtt * 1000:.0f} ms RTT, handshakes "
                  f"counted), {args.runs} processes: median {far.wall:.3f} s = {trips:.1f} round trips "
                  f"(goal ≤ 4) over the wall at 0 RTT; CPU median {far.cpu:.3f} s; {far.requests} requests "
                  f"on {far.connections} connections; load average {os.getloadavg()[0]:.2f}")
        if args.importtime:
            with tempfile.TemporaryDirectory() as again:
                workspaces = Path(again)
                with EmulatorProcess([*workspace_objects(), *example_objects(EXAMPLE)]) as emu:
                    write_descriptor(workspaces, emu.base_url)
                    importtime(command(workspaces), {k: v for k, v in os.environ.items()
                                                     if not k.startswith("TAUBOT_")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
