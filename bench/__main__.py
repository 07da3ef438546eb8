"""Every figure of issues 16, 28 and 36 in one run, side by side: `.venv/bin/python -m bench` (~25 min).

Each benchmark runs as its own process, one after another (they would skew each other), with its
output shown as it comes; the table at the end picks each figure out of that output by the line
the benchmark prints for it, and the load average. `--quick` leaves out the 1,000-watch run (five 60 s
windows after one setup: about 10 of the minutes).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    name: str
    goal: str
    pattern: str  # matched in the benchmark's output; its groups make the figure
    shown: str  # format of the groups


@dataclass(frozen=True)
class Bench:
    args: tuple[str, ...]
    figures: tuple[Figure, ...]


WATCH = ("bench.bench_watch", "--interval", "15", "--seconds", "60", "--in-process")
BENCHES = (
    Bench(("bench.bench_live",), (Figure(
        "live status, 256-pod RayJob, 20 ms RTT", "≤ 130 ms, ≤ 10 requests",
        r"requests per status: (\d+).*?median ([\d.]+) ms", "{1} ms, {0} requests"),)),
    Bench(("bench.bench_live", "--tls"), (Figure(
        "same, TLS with a named CA", "≤ 140 ms", r"median ([\d.]+) ms", "{0} ms"),)),
    Bench(("bench.ack_latency", "--ack-only"), (
        Figure("ack, 50 concurrent /tau status, 1 process", "p50 ≤ 20, p99 ≤ 50 ms",
               r"--processes 1, no worker: n=\d+ p50=([\d.]+) ms p99=([\d.]+) ms", "p50 {0}, p99 {1} ms"),
        Figure("  server CPU per ack, 1 process", "—", r"--processes 1, no worker.*?servers ([\d.]+) ms",
               "{0} ms"),
        Figure("ack, 50 concurrent /tau status, --processes 2", "p50 ≤ 20, p99 ≤ 50 ms",
               r"--processes 2, no worker: n=\d+ p50=([\d.]+) ms p99=([\d.]+) ms", "p50 {0}, p99 {1} ms"),
    )),
    Bench(("bench.bench_cold_cli",), (
        Figure("cold taubot diagnose live, 0 RTT", "≤ 0.6 s",
               r"0 RTT\), \d+ processes: median ([\d.]+) s.*?CPU of the process: median ([\d.]+) s",
               "{0} s wall, {1} s CPU"),
        Figure("  the same at 200 ms RTT (handshakes counted)", "≤ 4 round trips",
               r"200 ms RTT, handshakes counted\), \d+ processes: median ([\d.]+) s = ([\d.]+) round trips",
               "{1} round trips ({0} s)"),
    )),
    Bench((*WATCH, "--pool", "1"), (
        Figure("200 watches at 15 s, one worker process", "≥ 95 % within 2 s of due",
               r"late at the end: (\d+%)", "{0} (a lower bound)"),
        Figure("  chat.update only on change", "0 wasted", r"changed a card, (\d+) wasted", "{0} wasted"),
        Figure("  CPU per tick", "—", r"→ ([\d.]+) ms CPU per job", "{0} ms"),
    )),
    Bench((*WATCH, "--pool", "1", "--rtt", "20"), (
        Figure("  the same with 20 ms RTT to the API server", "≥ 95 %", r"late at the end: (\d+%)",
               "{0} (a lower bound)"),
    )),
    Bench((*WATCH, "--pool", "4", "--rtt", "20"), (
        Figure("  20 ms RTT, --pool 4 (the chart's worker)", "≥ 95 %", r"late at the end: (\d+%)",
               "{0} (a lower bound)"),
    )),
    Bench((*WATCH, "--pool", "4", "--tier3"), (
        Figure("  --pool 4 with Slack's tier 3 kept (50 a minute)", "within tier 3",
               r"late at the end: (\d+%).*?chat.update: (\d+) a minute", "{0}, {1} edits a minute"),
    )),
    Bench((*WATCH, "--watches", "1000", "--workers", "2", "--pool", "1", "--runs", "5"), (
        Figure("1,000 watches on two worker processes", "≥ 95 %", r"late at the end: (\d+%)",
               "{0} (a lower bound)"),
        Figure("  the same, each of five 60 s windows", "≥ 95 % in every one",
               r"window 1 of 5[^=]*= ([\d.]+%).*?window 2 of 5[^=]*= ([\d.]+%)"
               r".*?window 3 of 5[^=]*= ([\d.]+%).*?window 4 of 5[^=]*= ([\d.]+%)"
               r".*?window 5 of 5[^=]*= ([\d.]+%)", "{0} {1} {2} {3} {4}"),
    )),
    Bench(("bench.bench_warm",), (
        Figure("command → card, warm worker, 20 ms RTT", "—",
               r"warm worker, 20 ms RTT: n=\d+ p50=([\d.]+) ms p99=([\d.]+) ms", "p50 {0}, p99 {1} ms"),
        Figure("command → card, warm worker, 100 ms RTT", "—",
               r"warm worker, 100 ms RTT: n=\d+ p50=([\d.]+) ms p99=([\d.]+) ms", "p50 {0}, p99 {1} ms"),
        Figure("  connections opened by warm statuses (20 / 100 ms)", "0",
               r"connections opened by the \d+ warm statuses: (\d+).*?connections opened by the \d+ warm "
               r"statuses: (\d+)", "{0} / {1}"),
    )),
    Bench(("bench.bench_evaluate",), (
        Figure("evaluate() cold CPU, 1,000 / 5,000 / 20,000 pods", "≤ 20 / ≤ 100 ms / linear",
               r"\n\s+1000\s+\d+\s+([\d.]+).*?\n\s+5000\s+\d+\s+([\d.]+).*?\n\s+20000\s+\d+\s+([\d.]+)"
               r".*?= ([\d.]+)x", "{0} / {1} / {2} ms (x{3} from 5,000)"),
    )),
    Bench(("bench.bench_dump",), (
        Figure("50 MB YAML dump → diagnosis", "≤ 15 s, ≤ 1 GB",
               r"YAML dump .*?median ([\d.]+) s, peak RSS (\d+) MB", "{0} s, {1} MB"),
        Figure("small dump, cold taubot diagnose", "≤ 0.4 s", r"cold process: median ([\d.]+) s", "{0} s"),
    )),
    Bench(("bench.bench_monitor",), (
        Figure("monitor sweep, 5,000 runs", "≤ 2 s CPU", r"sweep CPU: first ([\d.]+) s.*?then ([\d.]+) s",
               "{0} s first, {1} s after"),
    )),
    Bench(("bench.bench_redaction",), (
        Figure("redaction of a 1 MB line", "≤ 100 ms", r"1 MB ordinary line[^:]*: best ([\d.]+) ms",
               "{0} ms"),
        Figure("redaction of 10,000 a%3A%2F%2F", "≤ 100 ms", r"a%3A%2F%2F[^:]*: best ([\d.]+) ms", "{0} ms"),
    )),
    Bench(("bench.bench_monitor", "--runs", "1000", "--namespaces", "10", "--hostile-line"), (
        Figure("monitor sweep, 1,000 runs, one hostile 100 kB line", "≤ 2x a normal sweep",
               r"sweep CPU: first ([\d.]+) s.*?then ([\d.]+) s", "{0} s first, {1} s after"),
    )),
)


def run(bench: Bench) -> str:
    """Run one benchmark, echoing its output; the output."""
    print(f"\n$ python -m {' '.join(bench.args)}", flush=True)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", *bench.args], capture_output=True, text=True)
    print(proc.stdout, end="")
    if proc.returncode != 0:
        print(proc.stderr[-2000:], end="")
    print(f"({time.perf_counter() - started:.0f} s, exit {proc.returncode})", flush=True)
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="leave out the 1,000-watch run")
    args = parser.parse_args(argv)
    rows: list[tuple[str, str, str]] = []
    for bench in BENCHES:
        if args.quick and "1000" in bench.args:
            continue
        output = run(bench)
        for figure in bench.figures:
            found = re.search(figure.pattern, output, re.S)
            rows.append((figure.name, figure.goal,
                         figure.shown.format(*found.groups()) if found else "not printed (see above)"))
    width = max(len(r[0]) for r in rows)
    goal_width = max(len(r[1]) for r in rows)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average (1, 5, 15 min) at the end: {load}")
    print(f"\n{'figure':<{width}}  {'goal':<{goal_width}}  now")
    for name, goal, now in rows:
        print(f"{name:<{width}}  {goal:<{goal_width}}  {now}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
