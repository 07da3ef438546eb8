"""A 50 MB YAML dump through `taubot diagnose --from-file`, and a small dump cold.

    .venv/bin/python -m bench.bench_dump [--megabytes 50]

What runs: `bench.synth.synthetic_snapshot` (fixture shapes) grown until its
YAML (PyYAML's block style, as `kubectl get -o yaml` writes) reaches the size
asked, written to a temporary file; then `taubot diagnose RUN --from-file` as
a fresh process, three times, timed from outside with its peak RSS
(`wait4` rusage). Then the same for one of the bundled small dumps (a cold
start: interpreter, imports, one evaluation). Goals: 50 MB in ≤ 15 s and
≤ 1 GB; a small dump in ≤ 0.4 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.synth import RUN_NAME, synthetic_snapshot

ROOT = Path(__file__).resolve().parent.parent
SMALL = ROOT / "workers" / "examples" / "l4-job-waiting-for-quota.json"
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def run(args: list[str]) -> tuple[float, int, int]:
    """Seconds, peak RSS in MB and exit code of one `taubot` process. The peak is measured by
    GNU time (a small process of its own): a child forked from this one would report this
    process's memory too, and this one holds the dump it generated."""
    started = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", sys.executable, "-m", "workers.cli", *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, text=True)
    seconds = time.perf_counter() - started
    peak_kb = int(done.stderr.strip().splitlines()[-1])
    return seconds, peak_kb // 1024, done.returncode


def dump_of(megabytes: float, path: Path) -> int:
    pods = 2000
    while True:
        text = yaml.dump(synthetic_snapshot(pods, "RayJob", failing_pod_index=pods // 2), Dumper=_DUMPER,
                         sort_keys=False, default_flow_style=False)
        if len(text) >= megabytes * 1024 * 1024:
            path.write_text(text)
            return pods
        pods = int(pods * megabytes * 1024 * 1024 / len(text)) + 100


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "dump.yaml"
        pods = dump_of(args.megabytes, big)
        size = big.stat().st_size / 1024 / 1024
        results = [run(["diagnose", RUN_NAME, "--from-file", str(big), "--format", "json"])
                   for _ in range(args.runs)]
        codes = {code for _, _, code in results}
        median = statistics.median(s for s, _, _ in results)
        peak = max(m for _, m, _ in results)
        print(f"{size:.1f} MB YAML dump ({pods} pods): median {median:.2f} s, peak RSS {peak} MB, "
              f"exit {sorted(codes)}   goal ≤ 15 s, ≤ 1024 MB")
    small = [run(["diagnose", "llama-ft-7b", "--from-file", str(SMALL)]) for _ in range(5)]
    cold = statistics.median(s for s, _, _ in small)
    print(f"small dump ({SMALL.name}), cold process: median {cold:.2f} s, "
          f"peak RSS {max(m for _, m, _ in small)} MB   goal ≤ 0.4 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
