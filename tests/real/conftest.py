"""The real-systems suite: a real Ray head (dashboard and Jobs API) and real MLflow tracking servers.

Why: emulators written beside the code agree with the code. These fixtures start
the real servers once per session, on 127.0.0.1 only (a test checks that nothing
of theirs listens elsewhere), submit real jobs through Ray's Jobs REST API all at
once, and seed MLflow through its REST API. taubot then reads them through the
Kubernetes API emulator's `services/proxy`, which forwards to the real dashboard.

Waiting: a real server has no event to subscribe to for "started" or "job
finished", so `until()` re-checks a condition with a short pause, bounded by a
timeout that only decides a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import aiohttp
import pytest

from tests.fixtures import k8s

JOBS = Path(__file__).resolve().parent / "jobs"
BIN = Path(sys.executable).parent
# The instant the suite's MLflow metrics are stamped relative to; diagnoses take it as `now`.
NOW = k8s.T0 + timedelta(minutes=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_for(condition: Callable[[], Awaitable[object]], *, timeout: float, what: str) -> object:
    """Await ``condition()`` (re-checked every 0.2 s) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        got = await condition()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.2)


def until(condition: Callable[[], Awaitable[object]], *, timeout: float, what: str) -> object:
    """`wait_for` from synchronous code (session fixtures)."""
    return asyncio.run(wait_for(condition, timeout=timeout, what=what))


async def _get(url: str, **kw: object) -> tuple[int, bytes]:
    try:
        async with aiohttp.ClientSession() as s, s.get(url, timeout=aiohttp.ClientTimeout(total=10),
                                                       **kw) as r:  # type: ignore[arg-type]
            return r.status, await r.read()
    except (aiohttp.ClientError, TimeoutError):
        return 0, b""


def _stop(proc: subprocess.Popen) -> None:
    """End a server we started, by its own process id (its children follow it: `ray start
    --block` stops what it started on SIGTERM; mlflow's uvicorn likewise)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session (start_new_session)
            proc.wait(timeout=10)


# ------------------------------------------------------------------ Ray


@dataclass(frozen=True)
class RayJobCase:
    """A real Ray job and the RayJob that KubeRay would have made for it."""

    run: str
    mode: str  # tests/real/jobs/train.py's mode
    final: str | None  # the Ray status the job ends in; None: still running at the test

    @property
    def submission_id(self) -> str:
        """KubeRay passes `status.jobId` as the submission id (reference §2.1)."""
        return k8s.rayjob(self.run)["status"]["jobId"]


CASES = {c.run: c for c in (
    RayJobCase("hf-driver", "hf-driver", "SUCCEEDED"), RayJobCase("ray-workers-hang", "ray-workers-hang", None),
    RayJobCase("bars", "bars", "SUCCEEDED"), RayJobCase("steps", "steps", "SUCCEEDED"),
    RayJobCase("hang-dump", "hang-dump", "FAILED"), RayJobCase("crash", "crash", "FAILED"),
    RayJobCase("oom", "oom", "FAILED"), RayJobCase("many-lines", "many", "SUCCEEDED"),
    RayJobCase("bad-byte", "bad-byte", "SUCCEEDED"),
)}


@dataclass
class RayHead:
    url: str
    proc: subprocess.Popen
    release: Path  # the hung job ends when this file exists
    statuses: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    # A short temp dir: Ray's unix sockets live under it (path length limit).
    temp = Path(tempfile.mkdtemp(prefix="tbray-"))
    dashboard = free_port()
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONUNBUFFERED": "1",
           # The dashboard's py-spy endpoints (issue 40) are off unless the head enables them, and run
           # the `py-spy` on the agent's PATH (the venv's, from the `[real]` extra).
           "RAY_DASHBOARD_ENABLE_PROFILING": "1", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    # Bound to loopback: Ray binds and advertises the host's address without these (reference §2.6).
    cmd = [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--dashboard-host", "127.0.0.1", "--port", str(free_port()), "--dashboard-port", str(dashboard),
           "--ray-client-server-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port()),
           "--num-cpus", "4", "--object-store-memory", str(100 * 1024 * 1024), "--temp-dir", str(temp),
           "--include-dashboard", "true", "--disable-usage-stats"]
    with open(temp / "ray-start.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{dashboard}"
    head = RayHead(url, proc, temp / "release-hung-job")
    try:
        async def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"ray start exited: {(temp / 'ray-start.log').read_text()[-2000:]}")
            return (await _get(f"{url}/api/version"))[0] == 200
        until(up, timeout=120, what="the Ray dashboard")
        asyncio.run(_submit_all(head))
        yield head
    finally:
        head.release.touch()
        _stop(proc)
        shutil.rmtree(temp, ignore_errors=True)


async def _submit_all(head: RayHead) -> None:
    """Every job at once (one head, concurrent jobs: the suite stays short)."""
    async with aiohttp.ClientSession() as s:
        async def submit(case: RayJobCase) -> None:
            args = [str(head.release)] if case.mode == "ray-workers-hang" else []
            body = {"entrypoint": " ".join([sys.executable, str(JOBS / "train.py"), case.mode, *args]),
                    "submission_id": case.submission_id,
                    "runtime_env": {"env_vars": {"PYTHONUNBUFFERED": "1"}}}
            async with s.post(f"{head.url}/api/jobs/", json=body) as r:
                assert r.status == 200, await r.text()
        await asyncio.gather(*(submit(c) for c in CASES.values()))


HUNG_MARKER = "trained steps: 30"  # the hung job's last line before its silence


@pytest.fixture(scope="session")
def ray_jobs(ray_head: RayHead) -> dict[str, dict]:
    """Every job settled — finished in its final status, or (the hung one) silent after its last
    line — as Ray's JobDetails, by run name."""
    async def settled(case: RayJobCase) -> dict:
        async def ready() -> dict | None:
            status, body = await _get(f"{ray_head.url}/api/jobs/{case.submission_id}")
            if status != 200:
                return None
            details = json.loads(body)
            if case.final is None:
                code, logs = await _get(f"{ray_head.url}/api/jobs/{case.submission_id}/logs")
                return details if code == 200 and HUNG_MARKER in json.loads(logs)["logs"] else None
            if details["status"] in ("SUCCEEDED", "FAILED", "STOPPED"):
                assert details["status"] == case.final, details
                return details
            return None
        return await wait_for(ready, timeout=240, what=f"Ray job {case.run}")  # type: ignore[return-value]

    async def all_settled() -> list[dict]:
        return list(await asyncio.gather(*(settled(c) for c in CASES.values())))
    return dict(zip(CASES, asyncio.run(all_settled()), strict=True))


# ------------------------------------------------------------------ MLflow


@dataclass
class MlflowServer:
    url: str
    proc: subprocess.Popen
    username: str | None = None
    password: str | None = None


def _start_mlflow(root: Path, *, auth: bool) -> MlflowServer:
    port = free_port()
    env = dict(os.environ)
    cmd = [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
           "--default-artifact-root", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1"]
    server = MlflowServer(f"http://127.0.0.1:{port}", None)  # type: ignore[arg-type]
    if auth:
        # MLflow's own auth app: HTTP Basic; its admin is created from this password (>= 12 chars).
        server.username, server.password = "admin", "taubot-real-suite-pw"
        env["MLFLOW_AUTH_ADMIN_PASSWORD"] = server.password
        env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = "taubot-real-suite"
        cmd[2:2] = ["--app-name", "basic-auth"]
    with open(root / "server.log", "wb") as log:
        server.proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
    return server


def _wait_mlflow(server: MlflowServer, root: Path) -> None:
    async def up() -> bool:
        if server.proc.poll() is not None:
            raise AssertionError(f"mlflow server exited: {(root / 'server.log').read_text()[-2000:]}")
        return (await _get(f"{server.url}/health"))[0] == 200
    until(up, timeout=120, what="the MLflow server")


@pytest.fixture(scope="session")
def mlflow_servers() -> Iterator[tuple[MlflowServer, MlflowServer]]:
    """(plain, basic-auth): started together, each with its own sqlite store."""
    roots = [Path(tempfile.mkdtemp(prefix="tbmlflow-")) for _ in range(2)]
    servers = [_start_mlflow(roots[0], auth=False), _start_mlflow(roots[1], auth=True)]
    try:
        for server, root in zip(servers, roots, strict=True):
            _wait_mlflow(server, root)
        yield servers[0], servers[1]
    finally:
        for server, root in zip(servers, roots, strict=True):
            _stop(server.proc)
            shutil.rmtree(root, ignore_errors=True)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)
