"""The stall monitor at scale, as it runs: `taubot monitor` in its own process (issue 24).

What runs: the Kubernetes API emulator in its own process (bench/emulator_process.py) with WATCH
and bookmarks, the real `taubot monitor` process, a private `redis-server`, and the fake Slack on a
thread here. One descriptor (and channel) per namespace. Each run is a Job, its Workload and
`--pods` pods (10 by default), each served as a real API server serves it (managedFields, kubectl's
last-applied-configuration, env, mounts, the token volume); 2 % are stuck from the start (1 % waiting
for quota — one group post per namespace — and 1 % crash-looping — one post each). Figures:

* time from the monitor's start to its first post (goal ≤ 2 min);
* threshold crossing → post: runs whose image pull started failing 5 min minus 40 s before they are
  added, so they cross the 5-minute threshold while the monitor runs (goal ≤ interval + 30 s);
* streams open / needed (from its /metrics), API requests per sweep after the first (the emulator's
  count over some sweeps), max posts per second into one channel (≤ 1), the monitor's peak RSS
  (goal ≤ 1.5 GB at 20,000 runs) and its CPU per sweep (utime+stime from /proc).

    .venv/bin/python -m bench.bench_monitor [--runs 5000 --namespaces 50] [--cluster-wide]
    .venv/bin/python -m bench.bench_monitor --scale      # 5,000 in 50, then 20,000 in 200
    .venv/bin/python -m bench.bench_monitor --runs 1000 --namespaces 10 --hostile-line   # issue 34

The last line of each scenario keeps the old summary's form (`sweep CPU: first … then …`) for
`python -m bench`.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from bench.emulator_process import EmulatorProcess
from tests.fakes.slack_api import FakeSlack, running_fake_slack
from tests.fixtures import k8s

REPO = Path(__file__).resolve().parents[1]
TOKEN = "xoxb-bench-monitor"
INTERVAL = 30
CROSSING = 10  # runs that cross their threshold while the monitor runs
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def namespace(i: int) -> str:
    return f"team-{i:03d}"


def channel(i: int) -> str:
    return f"C0BENCH{i:03d}"


# Issue 34: one crash loop's termination message as a hostile tenant writes it — 100 kB of the
# shape that made the old URL-userinfo rule backtrack cubically (59 s for one sweep).
HOSTILE_LINE = ("a%3A%2F%2F" * 10_000)[:100_000]


# What a real API server and real clients add to every object, and the monitor never reads
# (`kubectl get -o json --show-managed-fields` on Kubernetes 1.31, abridged): server-side apply's
# managedFields, kubectl's last-applied-configuration, a pod's environment, mounts, probes and its
# projected service-account token volume. The cache trims them on arrival (workers/monitor/trim.py).
MANAGED_FIELDS = [
    {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kube-controller-manager",
     "operation": "Update", "time": "2026-11-30T10:00:10Z",
     "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:job-name": {},
                                                                  "f:controller-uid": {}},
                                 "f:ownerReferences": {".": {}, 'k:{"uid":"9271fbe7"}': {}}},
                  "f:spec": {"f:containers": {'k:{"name":"trainer"}': {
                      ".": {}, "f:env": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                      "f:resources": {".": {}, "f:limits": {}, "f:requests": {}},
                      "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                             "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {},
                             "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}}}},
    {"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": "kubelet", "operation": "Update",
     "subresource": "status", "time": "2026-11-30T10:01:40Z",
     "fieldsV1": {"f:status": {"f:conditions": {'k:{"type":"ContainersReady"}': {".": {}, "f:status": {}},
                                                'k:{"type":"Initialized"}': {".": {}, "f:status": {}},
                                                'k:{"type":"Ready"}': {".": {}, "f:status": {}}},
                               "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {},
                               "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}}},
]
ENV = [{"name": "HF_HOME", "value": "/cache/hf"}, {"name": "NCCL_DEBUG", "value": "INFO"},
       {"name": "NCCL_SOCKET_IFNAME", "value": "eth0"}, {"name": "OMP_NUM_THREADS", "value": "8"},
       {"name": "MASTER_ADDR", "value": "run-master-0.run-headless"},
       {"name": "MASTER_PORT", "value": "29500"},
       {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}]
TOKEN_VOLUME = {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                "path": "namespace"}]}}]}}


def served(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a real API server serves it (see MANAGED_FIELDS)."""
    meta = obj["metadata"]
    meta["managedFields"] = copy.deepcopy(MANAGED_FIELDS)
    if obj.get("kind") in ("Job", "RayJob"):  # submitted with kubectl apply
        meta.setdefault("annotations", {})["kubectl.kubernetes.io/last-applied-configuration"] = \
            json.dumps({k: obj.get(k) for k in ("apiVersion", "kind", "spec")}) + "\n"
    specs = [obj["spec"]] if obj.get("kind") == "Pod" else \
        [(obj.get("spec") or {}).get("template", {}).get("spec") or {}] if obj.get("kind") == "Job" else []
    for spec in specs:
        spec.setdefault("volumes", []).append(copy.deepcopy(TOKEN_VOLUME))
        for c in spec.get("containers") or []:
            c["env"] = copy.deepcopy(ENV)
            c["command"] = ["torchrun", "--nnodes=10", "--nproc-per-node=8", "train.py", "--config",
                            "configs/llama-7b.yaml"]
            c["volumeMounts"] = [{"name": "kube-api-access-x7k2p", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
            c["readinessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}
    return obj


def objects(runs: int, namespaces: int, hostile: bool = False, pods: int = 10) -> list[dict[str, Any]]:
    # The ClusterQueue every LocalQueue feeds (the monitor caches it for the grouped posts' next start,
    # issue 35): its quota held by the running runs, the waiting ones counted pending.
    waiting = sum(1 for i in range(runs) if (i // namespaces) % 100 == 0)
    out: list[dict[str, Any]] = [served(k8s.cluster_queue(gpu_quota=8 * runs, gpu_used=8 * (runs - waiting),
                                                          pending=waiting))]
    for n in range(namespaces):
        out.append(k8s.local_queue("team-a", ns=namespace(n)))
    for i in range(runs):
        ns, name = namespace(i % namespaces), f"run-{i:05d}"
        k = i // namespaces  # the run's place in its namespace: 2 % of each namespace is stuck
        if k % 100 == 0:
            j = k8s.job(name, ns=ns, suspend=True)
            out += [served(j), served(k8s.workload(j, state="pending"))]
            continue
        j = k8s.job(name, ns=ns, suspend=False, active=pods)
        message = HOSTILE_LINE if hostile and i == 50 * namespaces else None
        out += [served(j), served(k8s.workload(j, state="admitted"))]
        for p in range(pods):  # one crash-looping pod makes the run stuck
            container = (k8s.crash_loop(exit_code=1, reason="Error", message=message)
                         if k % 100 == 50 and p == 0 else k8s.running())
            out.append(served(k8s.job_pod(j, index=p, node=f"gpu-node-{(i * pods + p) % 600}",
                                          phase="Running", containers=[container])))
    return out


def crossing(i: int, namespaces: int, now: datetime) -> tuple[list[dict[str, Any]], datetime]:
    """A run whose pull has failed for 5 min minus 40 s: (its objects, when it crosses 5 min)."""
    t0 = now - timedelta(minutes=5) + timedelta(seconds=40)
    ns, name = namespace((i * 7) % namespaces), f"cross-{i:02d}"
    j = k8s.job(name, ns=ns, suspend=False, active=1, t0=t0)
    pod = k8s.job_pod(j, t0=t0, node="gpu-node-1", phase="Pending", containers=[k8s.image_pull_backoff()])
    ready = next((c for c in pod["status"].get("conditions") or [] if c.get("type") == "Ready"), None)
    since = (ready or {}).get("lastTransitionTime") or pod["metadata"]["creationTimestamp"]
    return [j, k8s.workload(j, state="admitted", t0=t0), pod], \
        datetime.fromisoformat(since.replace("Z", "+00:00")) + timedelta(minutes=5)


def descriptors(directory: Path, namespaces: int, server: str) -> None:
    for n in range(namespaces):
        (directory / f"ws-{n:03d}.yaml").write_text(yaml.safe_dump({
            "apiVersion": "taugrid.io/v1alpha1", "kind": "WorkspaceConnection",
            "metadata": {"name": f"ws-{n:03d}"},
            "spec": {"cluster": {"server": server}, "namespace": namespace(n), "workspace": f"ws-{n:03d}",
                     "localQueue": "team-a", "slack": {"channels": [channel(n)]}}}))


class Monitor:
    def __init__(self, env: dict[str, str], log_path: str | None = None) -> None:
        self.log = open(log_path, "w", encoding="utf-8") if log_path else None  # noqa: SIM115 - open while it runs
        self.proc = subprocess.Popen([sys.executable, "-m", "workers.cli", "monitor"], env=env, cwd=REPO,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.sweeps: list[tuple[float, int, float]] = []  # (arrival, runs, seconds)
        # Why streams restarted: (arrival, stream, why) of every "stream failed" / "410" log line.
        self.failures: list[tuple[float, str, str]] = []
        import threading

        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if self.log is not None:
                self.log.write(line)
                self.log.flush()
            if m := re.search(r"monitor: (\S+) stream failed \((.*)\); retrying", line):
                self.failures.append((time.monotonic(), m.group(1), m.group(2)))
            elif m := re.search(r"monitor: (\S+) watch expired", line):
                self.failures.append((time.monotonic(), m.group(1), "410 Gone"))
            if m := re.search(r"swept (\d+) runs in ([\d.]+) s", line):
                self.sweeps.append((time.monotonic(), int(m.group(1)), float(m.group(2))))
            elif "Traceback" in line or "ERROR" in line:
                print("  monitor:", line.rstrip()[:200], flush=True)

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what} not within {timeout:.0f} s")
        time.sleep(0.2)


def metric(port: int, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
               if line.startswith(name) and not line.startswith("#"))


def tops(fake: FakeSlack) -> list[Any]:
    return [c for c in fake.calls_to("chat.postMessage")
            if not c.params.get("thread_ts") and c.response.get("ok")]


def scenario(runs: int, namespaces: int, cluster_wide: bool, log_path: str | None = None,
             measure_after: float = 0.0, hostile: bool = False, pods: int = 10) -> None:
    mode = "one cluster-wide WATCH per kind" if cluster_wide else "one WATCH per namespace and kind"
    if hostile:
        mode += "; one crash loop's termination message is a hostile 100 kB line"
    print(f"\n== {runs:,} runs in {namespaces} namespaces, {pods} pods each ({mode}), 2 % stuck, "
          f"interval {INTERVAL} s", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-monitor-"))
    port = free_port()
    redis_proc = subprocess.Popen([shutil.which("redis-server") or "redis-server", "--port", str(port),
                                   "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                   "--dir", str(workdir)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert redis_proc.stdout is not None
    for line in redis_proc.stdout:
        if "Ready to accept connections" in line:
            break
    items = objects(runs, namespaces, hostile, pods)
    try:
        with (EmulatorProcess(items, bookmarks=60) as emu,
              running_fake_slack(token=TOKEN, ts_clock=time.time) as fake):
            (workdir / "ws").mkdir()
            descriptors(workdir / "ws", namespaces, emu.base_url)
            metrics_port = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("TAUBOT_")}
            env.update({"TAUBOT_WORKSPACES_DIR": str(workdir / "ws"), "TAUBOT_SLACK_BOT_TOKEN": TOKEN,
                        "TAUBOT_SLACK_API_URL": fake.api_url,
                        "TAUBOT_REDIS_URL": f"redis://127.0.0.1:{port}/0",
                        "TAUBOT_BUTTON_SIGNING_KEY": "k" * 32, "TAUBOT_METRICS_PORT": str(metrics_port),
                        "TAUBOT_METRICS_HOST": "127.0.0.1", "TAUBOT_MONITOR_INTERVAL_SECONDS": str(INTERVAL),
                        "TAUBOT_MONITOR_LOG_READS_PER_SWEEP": "0", "TAUBOT_LOG_FORMAT": "text",
                        "TAUBOT_MONITOR_CLUSTER_WIDE": "true" if cluster_wide else "false"})
            started = time.monotonic()
            monitor = Monitor(env, log_path)
            try:
                wait(lambda: bool(tops(fake)), 600, "a first post")
                first_post = time.monotonic() - started
                wait(lambda: any(n == runs for _, n, _ in monitor.sweeps), 900, "a full sweep")
                full_at = next(at for at, n, _ in monitor.sweeps if n == runs)
                print(f"monitor peak RSS by its first full sweep: {monitor.peak_rss_mb():.0f} MB", flush=True)
                streams = metric(metrics_port, "taubot_monitor_streams")
                needed = 1 + (8 if cluster_wide else 8 * namespaces)  # and the cluster's ClusterQueues
                wait(lambda: len(monitor.sweeps) >= 2 and monitor.sweeps[-1][0] > full_at, 600,
                     "a second sweep")
                if measure_after:  # steady state later on: every first WATCH has reached its timeout
                    wait(lambda: time.monotonic() - started >= measure_after, measure_after + 60, "")
                # API requests and CPU over the next sweeps (the cache is kept by WATCH)
                n0, req0, cpu0 = len(monitor.sweeps), emu.request_count(), monitor.cpu()
                window_from, failed0 = time.monotonic(), len(monitor.failures)
                now = datetime.now(UTC)
                crossings = [crossing(i, namespaces, now) for i in range(CROSSING)]
                emu.upsert([o for objs, _ in crossings for o in objs])
                mono_of = lambda wall: time.monotonic() + (wall - datetime.now(UTC)).total_seconds()  # noqa: E731
                cross_at = {f"cross-{i:02d}": mono_of(at) for i, (_, at) in enumerate(crossings)}
                wait(lambda: all(any(name in str(c.params.get("blocks")) for c in tops(fake))
                                 for name in cross_at), 600, "every crossing posted")
                latency = []
                for name, at in cross_at.items():
                    post = next(c for c in tops(fake) if name in str(c.params.get("blocks")))
                    latency.append(post.at - at)
                wait(lambda: len(monitor.sweeps) >= n0 + 2, 600, "two more sweeps")
                sweeps = len(monitor.sweeps) - n0
                seen = emu.requests()[req0:]
                requests = len(seen) / sweeps
                watches = sum(1 for r in seen if r["query"].get("watch") == "true")
                lists = sum(1 for r in seen
                            if r["query"].get("watch") != "true" and not r["query"].get("continue"))
                window = time.monotonic() - window_from
                failed = Counter(why.split(":")[0] for _, _, why in monitor.failures[failed0:])
                cpu_per_sweep = (monitor.cpu() - cpu0) / sweeps
                per_second: Counter[tuple[str, int]] = Counter()
                for c in fake.calls_to("chat.postMessage"):
                    per_second[(str(c.params.get("channel")), int(c.at))] += 1
                rss = monitor.peak_rss_mb()
                stream_requests = metric(metrics_port, "taubot_monitor_stream_requests_total")
            finally:
                monitor.stop()
            seconds = [s for _, n, s in monitor.sweeps if n == runs]
            print(f"time to first post: {first_post:.1f} s (goal ≤ 120 s); first full sweep "
                  f"{full_at - started:.1f} s after start", flush=True)
            print(f"threshold crossing → post: median {sorted(latency)[len(latency) // 2]:.1f} s, "
                  f"max {max(latency):.1f} s (goal ≤ interval + 30 = {INTERVAL + 30} s)")
            print(f"streams open / needed: {streams:.0f} / {needed}; LIST+WATCH requests started by the "
                  f"cache: {stream_requests:.0f}")
            print(f"API requests per sweep after the first: {requests:.1f} (log reads off) — over {sweeps} "
                  f"sweeps in {window:.0f} s from {window_from - started:.0f} s after the start: {watches} "
                  f"WATCH, {lists} LIST; stream failures then {dict(failed) or 0}. Each WATCH asks "
                  f"timeoutSeconds 300-600 s as client-go does, so from 300 s after the start each stream "
                  f"re-opens its WATCH about every 450 s: {needed * INTERVAL / 450:.0f} per {INTERVAL}-s "
                  f"sweep in steady state, none of them a LIST")
            every = Counter(why.split(":")[0] for _, _, why in monitor.failures)
            print(f"stream failures over the whole run: {dict(every) or 0}")

            print(f"max posts per second into one channel: {max(per_second.values())} (goal ≤ 1); "
                  f"top-level posts {len(tops(fake))}")
            print(f"monitor peak RSS: {rss:.0f} MB (goal ≤ 1536 MB at 20,000 runs)")
            print(f"sweep CPU: first {seconds[0] if seconds else 0:.2f} s wall, then {cpu_per_sweep:.2f} s "
                  f"CPU per sweep (interval {INTERVAL} s)")
    finally:
        redis_proc.terminate()
        redis_proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--pods", type=int, default=10, help="pods per running run")
    parser.add_argument("--cluster-wide", action="store_true")
    parser.add_argument("--log", help="write the monitor's log here (one scenario)")
    parser.add_argument("--measure-after", type=float, default=0.0,
                        help="measure requests per sweep only from this many seconds after the start")
    parser.add_argument("--scale", action="store_true",
                        help="5,000 runs in 50 namespaces, then 20,000 in 200")
    parser.add_argument("--hostile-line", action="store_true",
                        help="one crash loop's termination message is a hostile 100 kB line (issue 34)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stopped: the processes it started stop too
    if args.scale:
        scenario(5000, 50, args.cluster_wide, pods=args.pods)
        scenario(20000, 200, args.cluster_wide, pods=args.pods)
    else:
        scenario(args.runs, args.namespaces, args.cluster_wide, args.log, args.measure_after,
                 args.hostile_line, args.pods)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
