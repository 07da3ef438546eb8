"""Cold `taubot diagnose` live, as a user runs it: a new process each time (imports, client, TLS-less
handshake, the rounds, evaluation, output) against the Kubernetes API emulator in its own process at
0 RTT. Prints the median wall time of ``--runs`` processes (goal ≤ 0.6 s, issue 36) and, with
``--importtime``, the slowest imports of one run (`python -X importtime`).

    .venv/bin/python -m bench.bench_cold_cli [--runs 7] [--importtime]
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
from pathlib import Path

from tests.live.conftest import workspace_objects, write_descriptor
from tests.slack.conftest import example_objects

RUN = "llama-ft-7b"
EXAMPLE = "l4-job-waiting-for-quota"


def command(workspaces: Path) -> list[str]:
    return [sys.executable, "-m", "workers.cli", "diagnose", RUN, "--workspace", "vision",
            "--workspaces-dir", str(workspaces), "--as", "alice@example.com", "--as-group", "team-vision",
            "--format", "json"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--importtime", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump.json"
        dump.write_text(json.dumps([*workspace_objects(), *example_objects(EXAMPLE)]))
        server = subprocess.Popen([sys.executable, "-m", "bench.emulator_process", str(dump), "0"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            base_url = server.stdout.readline().strip()
            workspaces = Path(tmp) / "workspaces"
            workspaces.mkdir()
            write_descriptor(workspaces, base_url)
            env = {k: v for k, v in os.environ.items() if not k.startswith("TAUBOT_")}
            argv = command(workspaces)
            subprocess.run(argv, env=env, capture_output=True, check=False)  # the page cache, .pyc files
            walls, cpus = [], []
            for _ in range(args.runs):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
                walls.append(time.perf_counter() - started)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                if done.returncode not in (0, 1):
                    raise SystemExit(f"taubot diagnose failed ({done.returncode}): {done.stderr[-2000:]}")
            first = json.loads(done.stdout).get("first_incomplete")
            print(f"cold taubot diagnose live ({EXAMPLE}, 0 RTT), {args.runs} processes: median "
                  f"{statistics.median(walls):.3f} s, min {min(walls):.3f} s (goal ≤ 0.6 s); "
                  "CPU of the process: "
                  f"median {statistics.median(cpus):.3f} s, min {min(cpus):.3f} s (the wall time on a busy "
                  f"machine is mostly waiting for a core); first incomplete {first}")
            if args.importtime:
                traced = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env,
                                        capture_output=True, text=True, check=False)
                rows = []
                for line in traced.stderr.splitlines():
                    if m := re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line):
                        rows.append((int(m.group(2)), len(m.group(3)), m.group(4)))
                total = sum(c for c, depth, _ in rows if depth == 1)
                print(f"imports: {total / 1e6:.3f} s in all (top level); the slowest, cumulative:")
                for cum, depth, name in sorted(rows, reverse=True)[:25]:
                    print(f"  {cum / 1000:8.1f} ms  {'  ' * (depth - 1)}{name}")
        finally:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
