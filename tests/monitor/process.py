"""The stall monitor as it runs in production, for the process-level tests (issue 24).

What runs: the real `taubot monitor` process (a subprocess, its own event
loop and real time for its loop), the Kubernetes API emulator in its own
process (`bench/emulator_process.py`), a fault proxy between the two
(`tests/fakes/fault_proxy.py`: faults at the transport), the fake Slack on a
thread of the test process, and the suite's private Redis — optionally behind
a TCP fault proxy too. The monitor's settings make its loop fast (a 1 s
interval, a short lease, a short idle limit); thresholds never depend on
waiting, because the runs are made already stalled by their own timestamps
(`tests/fixtures/k8s.py`'s T0 is in the past of any real clock).

Tests wait on the monitor's log lines, on what the fake Slack received and on
what the proxy saw — each with a timeout that only bounds a failure.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.emulator_process import EmulatorProcess
from tests.fakes.fault_proxy import HttpFaultProxy, SeenRequest, TcpFaultProxy
from tests.fakes.slack_api import FakeSlack, SlackCall, running_fake_slack
from tests.fixtures import k8s

REPO = Path(__file__).resolve().parents[2]
TOKEN = "xoxb-monitor-process"
VISION = "C012VISION"
AUDIO, AUDIO_NS = "C012AUDIO", "team-audio"
LONG_AGO = k8s.T0  # every fixture timestamp is this old by any real clock: runs are stalled at once


def queued(name: str, ns: str = k8s.NS, *, uid: str | None = None, queue: str = "team-a") -> list[dict]:
    """A Job suspended by Kueue with its pending Workload, waiting since T0 (tests/fixtures/k8s.py)."""
    j = k8s.job(name, ns=ns, suspend=True, t0=LONG_AGO, queue=queue, uid=uid)
    return [j, k8s.workload(j, state="pending", t0=LONG_AGO)]


def image_pull(name: str, image: str = "taugridacr.azurecr.io/vision/vit:1.4.0", ns: str = k8s.NS,
               *, uid: str | None = None) -> list[dict]:
    """An admitted Job whose pod is in ImagePullBackOff since T0."""
    j = k8s.job(name, ns=ns, suspend=False, active=1, t0=LONG_AGO, uid=uid)
    pod = k8s.job_pod(j, t0=LONG_AGO, node="gpu-node-1", phase="Pending",
                      containers=[k8s.image_pull_backoff(image=image)])
    return [j, k8s.workload(j, state="admitted", t0=LONG_AGO), pod]


def running(name: str, ns: str = k8s.NS) -> list[dict]:
    """The same Job admitted and running (a run that recovered)."""
    j = k8s.job(name, ns=ns, suspend=False, active=1, t0=LONG_AGO)
    pod = k8s.job_pod(j, t0=LONG_AGO, node="gpu-node-3", phase="Running", containers=[k8s.running()])
    return [j, k8s.workload(j, state="admitted", t0=LONG_AGO), pod]


def descriptor(directory: Path, name: str, ns: str, channel: str, server: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "taugrid.io/v1alpha1", "kind": "WorkspaceConnection", "metadata": {"name": name},
        "spec": {"cluster": {"server": server}, "namespace": ns, "workspace": name, "localQueue": "team-a",
                 "slack": {"channels": [channel]},
                 "owners": {"queue-owner": {"channel": "C0QUEUE", "usergroup": "S0QUEUE"},
                            "image-owner": {"channel": "C0IMAGES"}}}}))
    return path


class MonitorProcess:
    """One `taubot monitor` process; its stderr (the log) is collected line by line."""

    def __init__(self, environ: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "workers.cli", "monitor"], env=environ, cwd=REPO,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def mark(self) -> int:
        with self._changed:
            return len(self.lines)

    def wait_log(self, pattern: str, *, after: int = 0, count: int = 1, timeout: float = 30.0) -> list[str]:
        """The first ``count`` log lines from ``after`` on matching ``pattern`` (waits for them)."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [x for x in self.lines[after:] if regex.search(x)]
                if len(found) >= count:
                    return found[:count]
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    tail = "\n".join(x for x in self.lines[-200:] if "swept" not in x)[-6000:]
                    raise AssertionError(f"monitor: {count} line(s) matching {pattern!r} not seen "
                                         f"(exit {self.proc.poll()}); last lines:\n{tail}")
                self._changed.wait(left)

    def wait_lines(self, condition: Any, *, after: int = 0, timeout: float = 30.0, what: str = "") -> None:
        """Until ``condition(lines since after)`` holds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition(self.lines[after:]):
                left = deadline - time.monotonic()
                if left <= 0:
                    tail = "\n".join(x for x in self.lines[after:] if "swept" not in x)[-6000:]
                    raise AssertionError(f"monitor: {what} not seen; lines:\n{tail}")
                self._changed.wait(left)

    def wait_streams_healthy(self, after: int, timeout: float = 40.0) -> None:
        """Every stream that failed since ``after`` has delivered an event again since (its backoff
        starts over: a next fault meets it at 1 s, not where the last one left it)."""
        failed = re.compile(r"monitor: (\S+) stream failed")
        back = re.compile(r"monitor: (\S+) stream is back after")

        def healthy(lines: list[str]) -> bool:
            state: dict[str, bool] = {}
            for line in lines:
                if m := failed.search(line):
                    state[m.group(1)] = False
                elif m := back.search(line):
                    state[m.group(1)] = True
            return all(state.values())
        self.wait_lines(healthy, after=after, timeout=timeout, what="every failed stream back")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """kill -9: no cleanup of any kind (a node lost, an OOM kill)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return int(self.proc.returncode)


@dataclass
class World:
    """Everything the monitor talks to, and the monitors started in it."""

    emu: EmulatorProcess
    proxy: HttpFaultProxy
    slack: FakeSlack
    redis_proxy: TcpFaultProxy
    workspaces: Path
    settings: dict[str, str] = field(default_factory=dict)
    monitors: list[MonitorProcess] = field(default_factory=list)

    def environ(self, **settings: Any) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAUBOT_")}
        env.update({"TAUBOT_WORKSPACES_DIR": str(self.workspaces), "TAUBOT_SLACK_BOT_TOKEN": TOKEN,
                    "TAUBOT_SLACK_API_URL": self.slack.api_url, "TAUBOT_REDIS_URL": self.redis_proxy.url,
                    "TAUBOT_BUTTON_SIGNING_KEY": "k" * 32, "TAUBOT_METRICS_PORT": "0",
                    "TAUBOT_MONITOR_INTERVAL_SECONDS": "1", "TAUBOT_MONITOR_LEASE_SECONDS": "3",
                    "TAUBOT_MONITOR_WATCH_IDLE_SECONDS": "3", "TAUBOT_MONITOR_LOG_READS_PER_SWEEP": "0",
                    "TAUBOT_KUBE_REQUEST_TIMEOUT_SECONDS": "3"})
        env.update({f"TAUBOT_{k.upper()}": str(v) for k, v in {**self.settings, **settings}.items()})
        return env

    def start_monitor(self, **settings: Any) -> MonitorProcess:
        monitor = MonitorProcess(self.environ(**settings))
        self.monitors.append(monitor)
        return monitor

    # ------------------------------------------------------------ what Slack received

    def tops(self, channel: str = VISION) -> list[SlackCall]:
        """Top-level posts that Slack accepted in ``channel``, oldest first."""
        return [c for c in self.slack.calls_to("chat.postMessage")
                if c.params.get("channel") == channel and not c.params.get("thread_ts") and c.response.get("ok")]

    def posts_of(self, name: str, channel: str = VISION) -> list[SlackCall]:
        """Top-level posts naming the run ``name`` (its card's header, a group card's list, or the
        escaped text of a degraded post) — as a whole name, not a prefix of another."""
        named = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")
        return [c for c in self.tops(channel) if named.search(text_of(c))]

    def replies(self, ts: str, channel: str = VISION) -> list[str]:
        return [m["text"] for m in self.slack.thread(channel, ts)]

    def wait_posted(self, name: str, channel: str = VISION, timeout: float = 30.0) -> SlackCall:
        try:
            self.slack.wait_until(lambda: bool(self.posts_of(name, channel)), timeout, f"a post of {name}")
        except AssertionError as exc:
            log = "\n".join(x for m in self.monitors for x in m.lines[-60:] if "swept" not in x)[-4000:]
            raise AssertionError(f"{exc}; the monitor said:\n{log}") from None
        return self.posts_of(name, channel)[0]

    def wait_reply(self, ts: str, needle: str, channel: str = VISION, timeout: float = 30.0) -> str:
        self.slack.wait_until(lambda: any(needle in r for r in self.replies(ts, channel)), timeout,
                              f"a reply with {needle!r}")
        return next(r for r in self.replies(ts, channel) if needle in r)


def text_of(call: SlackCall) -> str:
    import json

    return json.dumps(call.params.get("blocks"), ensure_ascii=False) + (call.params.get("text") or "")


def assert_posted_once(world: World, names: list[str], channel: str = VISION) -> None:
    """Nothing lost, nothing twice: each run on exactly one top-level post."""
    counts = {n: len(world.posts_of(n, channel)) for n in names}
    log = "\n".join(x for m in world.monitors for x in m.lines if "swept" not in x)[-5000:]
    log += "\n".join(text_of(c)[:300] for c in world.tops(channel))
    assert counts == dict.fromkeys(names, 1), f"{counts}\n{log}"


def max_requests_in_window(seen: list[SeenRequest], window: float = 0.9) -> tuple[int, str]:
    """The most requests (WATCHes and first LIST pages) one stream made in any ``window`` seconds:
    the monitor allows one per second per stream (0.9: a second minus scheduling jitter)."""
    by_stream: dict[str, list[float]] = defaultdict(list)
    last: dict[str, SeenRequest] = {}
    for r in seen:
        if not (r.first_page and r.method == "GET"):
            continue
        before = last.get(r.stream)
        last[r.stream] = r
        if before is not None and before.query == r.query and r.at - before.at < 0.1 and before.outcome == "reset":
            continue  # aiohttp resends an idempotent request once when a reused connection was reset
        by_stream[r.stream].append(r.at)
    worst, which = 0, ""
    for stream, times in by_stream.items():
        times.sort()
        j = 0
        for i, t in enumerate(times):
            while times[j] <= t - window:
                j += 1
            if i - j + 1 > worst:
                worst, which = i - j + 1, stream
    return worst, which


def streams_with(seen: list[SeenRequest], outcome: str, watches: bool = True) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for r in seen:
        if r.outcome == outcome and r.is_watch == watches:
            out[r.stream] += 1
    return dict(out)


@contextmanager
def world(objects: list[dict], redis_url: str, tmp: Path, *, bookmarks: float = 1.0) -> Iterator[World]:
    """The emulator process with ``objects`` behind a fault proxy, the fake Slack, Redis behind a
    TCP proxy, and one descriptor (vision → team-vision → C012VISION)."""
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    with ExitStack() as stack:
        emu = stack.enter_context(EmulatorProcess(objects, bookmarks=bookmarks))
        proxy = HttpFaultProxy(emu.base_url)
        stack.callback(proxy.close)
        redis_proxy = TcpFaultProxy(port)
        stack.callback(redis_proxy.close)
        slack = stack.enter_context(running_fake_slack(token=TOKEN, ts_clock=time.time))
        workspaces = tmp / "workspaces"
        workspaces.mkdir()
        descriptor(workspaces, "vision", k8s.NS, VISION, proxy.base_url)
        w = World(emu, proxy, slack, redis_proxy, workspaces)
        try:
            yield w
        finally:
            for m in w.monitors:
                m.stop()


def platform() -> list[dict]:
    """The workspace's LocalQueues (team-a → cluster-queue, team-b → cq-gpu-b) and its TauWorkspace."""
    return [k8s.tau_workspace("vision", phase="Ready"), k8s.local_queue("team-a"),
            k8s.local_queue("team-b", cluster_queue="cq-gpu-b"), k8s.pvc(),
            k8s.local_queue("team-a", ns=AUDIO_NS)]


__all__ = ["AUDIO", "AUDIO_NS", "VISION", "MonitorProcess", "World", "assert_posted_once", "descriptor",
           "image_pull", "max_requests_in_window", "platform", "queued", "running", "streams_with", "text_of",
           "world"]
