"""Concurrent `--watch`es on `taubot worker` processes: ticks on time, CPU per tick, chat.update calls.

Run by hand from the repository root (needs the local Redis):

    .venv/bin/python -m bench.bench_watch [--watches 200] [--seconds 60] [--interval 15]
        [--workers 1] [--pool 4] [--in-process] [--tier3]

What runs: the Kubernetes API emulator in its own process (bench/emulator_process.py, so its
work does not share this process's GIL); the fake Slack in this process; ``--watches`` Jobs
waiting for Kueue admission, each watched from its own channel (so the per-channel pace never
binds); ``--workers`` `taubot worker --pool N` processes, as production runs them, which also
run the status jobs that post the cards and start the watches. The clock starts when every
watch has started. A third of the way in, half of the runs are admitted; two thirds in, a
quarter start running. The tier-3 budget is lifted unless ``--tier3``: the bench measures the
worker, not Slack's limit.

Figures:

* **ticks on time**: `taubot_watch_tick_lag_seconds` from each worker's /metrics — how late each
  tick started after its slot (`started_at + k × interval`); and ticks done vs. slots passed.
* **CPU per job**: user+system CPU of the workers and every work horse (``wait4`` rusage).
* **chat.update calls vs changed cards**: every successful chat.update is compared with the
  message's previous blocks, ignoring the "updated HH:MM:SS" element; a call that changed
  nothing would be a wasted tier-3 call. They must be equal.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue

from bench.ack_latency import cleanup
from bench.emulator_process import EmulatorProcess
from tests.fakes.slack_api import FakeSlack, running_fake_slack
from tests.fixtures import k8s
from tests.live.conftest import workspace_objects, write_descriptor
from workers.contracts.commands import StatusCommand
from workers.contracts.identity import Identity
from workers.contracts.ids import watch_id as _watch_id
from workers.contracts.requests import StatusRequest
from workers.flows.watch import load_state, lock_name, owner_key, pending_key, state_key
from workers.plumbing.jobqueue import RqQueue, enqueue_request
from workers.plumbing.timed_jobs import due_key, leased_key
from workers.records.cards import KEY_PREFIX as CARD_PREFIX
from workers.records.keys import parent_key

TOKEN = "xoxb-bench"
USER = "U012ALICE"
IDENTITY = Identity(user="alice@example.com", groups=("team-vision",))
T0 = datetime.now(UTC) - timedelta(hours=5)  # "created 5h ago" stays put during the bench


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def tick_lag(port: int) -> dict[str, int]:
    """The cumulative buckets of `taubot_watch_tick_lag_seconds` ("2.0": ticks that started
    within 2 s of due, "+Inf": every tick observed) from the worker's own /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {s.labels["le"]: int(s.value) for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "taubot_watch_tick_lag_seconds_bucket"}


def _window_lag(workers: list[tuple[subprocess.Popen[bytes], int]]) -> dict[str, int]:
    """The workers' tick-lag buckets summed, now (a window's figure is the difference of two)."""
    lags = [tick_lag(port) for _, port in workers]
    return {le: sum(lag.get(le, 0) for lag in lags) for le in lags[0]} if lags else {}


def ticks_by_read(port: int) -> dict[str, int]:
    """`taubot_watch_ticks_total` by `read` ("probe": the card kept after two reads; "full")."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {s.labels["read"]: int(s.value) for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "taubot_watch_ticks_total"}


def group_cpu(pgid: int) -> float:
    """User+system CPU seconds of every live process in process group ``pgid`` (a `taubot worker`
    and the workers and horses it started), from /proc."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after "(comm)": state, ppid, pgrp, …, utime (12), stime (13)
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def _window(workers: list[tuple[subprocess.Popen[bytes], int]], emu: EmulatorProcess) -> dict[str, Any]:
    """Everything a window reports, as counters now: lag buckets, ticks by read, CPU, requests."""
    reads = [ticks_by_read(port) for _, port in workers]
    return {"lag": _window_lag(workers), "probe": sum(r.get("probe", 0) for r in reads),
            "full": sum(r.get("full", 0) for r in reads),
            "cpu": sum(group_cpu(proc.pid) for proc, _ in workers), "requests": emu.request_count()}


def forget_watches(conn: Redis, n: int) -> None:
    """Delete the bench's own watches (state, owner, pending card, lock) and nothing else: a run
    killed before its cleanup would otherwise hand its states to the next run."""
    for i in range(n):
        wid = watch_id(channel(i), run_name(i))
        conn.delete(state_key(wid), owner_key(wid), pending_key(wid), lock_name(wid))


def watch_id(channel: str, run: str) -> str:
    return _watch_id(channel, "vision", run)


def channel(i: int) -> str:
    return f"C0WATCH{i:04d}"


def run_name(i: int) -> str:
    return f"bench-run-{i:04d}"


def pending(i: int) -> list[dict[str, Any]]:
    j = k8s.job(run_name(i), suspend=True, t0=T0)
    return [j, k8s.workload(j, state="pending", t0=T0)]


def admitted(i: int) -> list[dict[str, Any]]:
    j = k8s.job(run_name(i), suspend=False, active=1, t0=T0)
    return [j, k8s.workload(j, state="admitted", t0=T0)]


def running(i: int) -> list[dict[str, Any]]:
    j = k8s.job(run_name(i), suspend=False, active=1, t0=T0)
    pod = k8s.job_pod(j, t0=T0, node="gpu-node-1", phase="Running", containers=[k8s.running(t0=T0)])
    return [*admitted(i), pod]


def _stable(blocks: list[dict[str, Any]]) -> str:
    """The blocks without the refresh time (the watch footer's second element)."""
    out = []
    for block in blocks:
        if block.get("type") == "context":
            elements = [e for e in block.get("elements") or []
                        if not str(e.get("text", "")).startswith("updated ")]
            block = {**block, "elements": elements}
        out.append(block)
    return json.dumps(out, sort_keys=True)


def count_changes(fake: FakeSlack) -> tuple[int, int, set[str]]:
    """(successful chat.update calls, of which changed the card, the card ts's that changed)."""
    previous: dict[str, str] = {}
    for call in fake.calls_to("chat.postMessage"):
        if call.params.get("blocks") and call.response.get("ok"):
            previous[call.response["ts"]] = _stable(call.params["blocks"])
    calls = changed = 0
    touched: set[str] = set()
    for call in fake.calls_to("chat.update"):
        if not call.response.get("ok"):
            continue
        calls += 1
        ts = str(call.params["ts"])
        now = _stable(call.params["blocks"])
        if previous.get(ts) != now:
            changed += 1
            touched.add(ts)
        previous[ts] = now
    return calls, changed, touched


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--watches", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--interval", type=int, default=5)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--tier3", action="store_true",
                        help="keep Slack's real chat.update budget (50 a minute per workspace)")
    parser.add_argument("--workers", type=int, default=1, help="`taubot worker` processes (pods)")
    parser.add_argument("--pool", type=int, default=1,
                        help="`taubot worker --pool N`: N rq workers in the one worker process tree")
    parser.add_argument("--in-process", action="store_true",
                        help="run `taubot worker --in-process` (no fork per tick)")
    parser.add_argument("--rtt", type=float, default=0.0, metavar="MS",
                        help="round-trip time injected at the emulator, per request (a real API server's "
                        "distance): ticks then wait on it, which is what --pool overlaps")
    parser.add_argument("--runs", type=int, default=1,
                        help="measure this many consecutive windows of --seconds on the same watches "
                        "(one setup), each printed on its own")
    args = parser.parse_args(argv)

    queue_name = f"taubot-bench-watch-{uuid.uuid4().hex[:8]}"
    conn = Redis.from_url(args.redis_url)
    queue = Queue(queue_name, connection=conn)
    n = args.watches
    objects = [obj for i in range(n) for obj in pending(i)]
    workers: list[tuple[subprocess.Popen[bytes], int]] = []
    status_jobs: list[str] = []
    forget_watches(conn, n)
    with tempfile.TemporaryDirectory() as tmp, running_fake_slack(token=TOKEN) as fake, \
            EmulatorProcess([*workspace_objects(), *objects], latency=args.rtt / 1000) as emu:
        workspaces = Path(tmp) / "workspaces"
        workspaces.mkdir()
        # Production descriptors name the cluster's CA: loading that one certificate is what a
        # tick pays, not the whole system bundle an unset CA would load (~20 ms per client).
        ca = Path(tmp) / "ca.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=bench-ca", "-days", "1",
                        "-keyout", str(Path(tmp) / "ca.key"), "-out", str(ca)],
                       check=True, capture_output=True)
        write_descriptor(workspaces, emu.base_url, channels=tuple(channel(i) for i in range(n)), ca=ca)
        env = {
            "TAUBOT_SLACK_BOT_TOKEN": TOKEN,
            "TAUBOT_SLACK_API_URL": fake.api_url,
            "TAUBOT_REDIS_URL": args.redis_url,
            "TAUBOT_WORKSPACES_DIR": str(workspaces),
            "TAUBOT_QUEUE_NAME": queue_name,
            # The worker is what is measured, so Slack's tier-3 budget is lifted unless --tier3.
            "TAUBOT_SLACK_UPDATES_PER_MINUTE": "50" if args.tier3 else "1000000",
        }
        try:
            mode = (["--in-process"] if args.in_process else []) + ["--pool", str(args.pool)]
            for _ in range(args.workers):
                port = free_port()
                workers.append((subprocess.Popen(
                    [sys.executable, "-m", "workers.cli", "worker", *mode],
                    env={**os.environ, **env, "TAUBOT_METRICS_PORT": str(port)}, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, start_new_session=True), port))
            for i in range(n):
                command = StatusCommand(run=run_name(i), watch=True, interval=args.interval)
                request = StatusRequest(command=command, identity=IDENTITY, channel=channel(i), user=USER,
                                        requested_at=datetime.now(UTC))
                status_jobs.append(enqueue_request(RqQueue(queue), request))
            cards = {watch_id(channel(i), run_name(i)): i for i in range(n)}
            setup = time.perf_counter()
            while sum(conn.exists(state_key(wid)) for wid in cards) < n:  # the workers post every card
                if time.perf_counter() - setup > 600:
                    raise RuntimeError("the watches did not all start within 10 minutes")
                time.sleep(0.2)
            print(f"{n} watches started (status job + first card each) in "
                  f"{time.perf_counter() - setup:.1f} s by the worker(s) under test")
            first = _window(workers, emu)
            started = time.perf_counter()
            changed_runs: set[int] = set()
            for step, (share, shape) in enumerate(((2, admitted), (4, running)), start=1):
                time.sleep(max(0.0, started + args.seconds * step / 3 - time.perf_counter()))
                emu.upsert([obj for i in range(0, n, share) for obj in shape(i)])
                changed_runs.update(range(0, n, share))
            time.sleep(max(0.0, started + args.seconds - time.perf_counter()))
            windows = [_window(workers, emu)]
            for run in range(2, args.runs + 1):  # more windows on the same watches, after the first
                time.sleep(max(0.0, started + args.seconds * run - time.perf_counter()))
                windows.append(_window(workers, emu))
            for run, (before, after) in enumerate(zip([first, *windows[:-1]], windows, strict=True), start=1):
                within = after["lag"].get("2.0", 0) - before["lag"].get("2.0", 0)
                seen = after["lag"].get("+Inf", 0) - before["lag"].get("+Inf", 0)
                probes, fulls = after["probe"] - before["probe"], after["full"] - before["full"]
                done = max(1, probes + fulls)
                print(f"  window {run} of {args.runs} ({args.seconds:g} s): {within}/{seen} ticks started "
                      f"within 2 s of due = {within / max(1, seen):.1%}; {probes} probe + {fulls} full "
                      f"ticks, {(after['cpu'] - before['cpu']) / done * 1000:.1f} ms worker CPU and "
                      f"{(after['requests'] - before['requests']) / done:.2f} API requests per tick"
                      + (" (runs changed in this window)" if run == 1 else " (no run changed)"))
            elapsed = time.perf_counter() - started
            states = [load_state(conn, wid) for wid in cards]
            ended = datetime.now(UTC)  # slots passed, per watch from its own start (ticks keep to them)
            ticks = sum(s.tick for s in states if s is not None)
            lags = [tick_lag(port) for _, port in workers]
            buckets = {le: sum(lag.get(le, 0) for lag in lags) for le in lags[0]} if lags else {}
            on_time, lagged = buckets.get("2.0", 0), buckets.get("+Inf", 0)
            requests = emu.request_count()
            cpu = 0.0
            for proc, _ in workers:
                os.killpg(proc.pid, signal.SIGTERM)  # warm shutdown: the current tick finishes
                _, _, usage = os.wait4(proc.pid, 0)
                cpu += usage.ru_utime + usage.ru_stime
            workers = []

            expected_changes = len(range(0, n, 2)) + len(range(0, n, 4))
            calls, changed, touched = count_changes(fake)
            due = sum(int((ended - s.started_at).total_seconds() // args.interval) for s in states if s)
            kind = "in-process SimpleWorker" if args.in_process else "forking rq Worker"
            print(f"{args.workers} × `taubot worker --pool {args.pool}` ({kind}s + scheduler), {n} watches "
                  f"every {args.interval} s, {args.rtt:g} ms RTT, {elapsed:.1f} s after the last one "
                  "started:")
            print(f"  ticks: {ticks} done, {due} slots passed "
                  f"→ {ticks / elapsed:.1f} ticks/s ({ticks / max(1, due):.0%} of due)")
            # A tick still pending at the end and already 2 s past due is late too, though no
            # histogram saw it start; one running at the end is counted so as well (a lower bound).
            # A tick waiting for the slot it reserved has started (its card goes out then).
            overdue = sum(1 for st in states if st is not None and st.next_due is not None
                          and not st.deferrals and (ended - st.next_due).total_seconds() > 2)
            print(f"  ticks started within 2 s of due (taubot_watch_tick_lag_seconds): "
                  f"{on_time}/{lagged}; with the {overdue} pending and over 2 s late at the end: "
                  f"{on_time / max(1, lagged + overdue):.0%} (a lower bound)")
            shown = ", ".join(f"≤ {le} s: {count}" for le, count in buckets.items())
            print(f"  tick lag, cumulative: {shown}")
            print(f"  worker CPU (processes + work horses), setup included: {cpu:.1f} s → "
                  f"{cpu / max(1, ticks + n) * 1000:.1f} ms CPU per job")
            print(f"  chat.update: {calls / elapsed * 60:.0f} a minute "
                  f"({'tier 3 kept: 50 a minute' if args.tier3 else 'tier-3 budget lifted'})")
            print(f"  chat.update: {calls} calls, {changed} changed a card, {calls - changed} wasted; "
                  f"runs changed {len(changed_runs)} times in total {expected_changes} "
                  f"(cards touched: {len(touched)})")
            print(f"  Kubernetes API requests: {requests} ({requests / max(1, ticks + n):.1f} per job, "
                  "first cards included)")
            print(f"  bench process max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB")
            assert calls == changed, "a chat.update that changed nothing"
        finally:
            for proc, _ in workers:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            cleanup(conn, queue)
            conn.delete(due_key(queue_name), leased_key(queue_name))
            forget_watches(conn, n)
            for key in conn.scan_iter(f"{CARD_PREFIX}C0WATCH*"):  # the cards the bench's channels got
                conn.delete(key)
            for job_id in status_jobs:
                conn.delete(parent_key(job_id))
            for key in conn.scan_iter("taubot:pace:*"):
                conn.delete(key)
            conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
