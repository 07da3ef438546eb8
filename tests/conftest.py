"""Shared fixtures: the suite's own `redis-server`, emptied per test, and installed Services.

The suite never touches a Redis it did not start: a session fixture starts
`redis-server` on a free loopback port (no persistence) and stops it at the
end, so two suites on one machine — or a suite next to a running taubot —
cannot see each other's keys. `redis-server` missing is a clear error.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from workers import services as services_module
from workers.collect.kueue import CLUSTER_QUEUE_NAMES

REAL_SUITE = Path(__file__).resolve().parent / "real"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/real (real Ray and MLflow, the `[real]` extra) is its own pytest run in scripts/test.sh:
    collected only when named on the command line, so the main run never runs it twice."""
    if collection_path != REAL_SUITE:
        return None
    here = config.invocation_params.dir
    named = [(here / arg.split("::")[0]).resolve() for arg in config.args]
    return not any(p == REAL_SUITE or REAL_SUITE in p.parents for p in named)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def _private_redis() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.exit("redis-server is not installed; the suite starts its own (Debian/Ubuntu: "
                    "'apt-get install redis-server'; macOS: 'brew install redis')", returncode=1)
    for _ in range(5):
        port = _free_port()
        workdir = tempfile.mkdtemp(prefix="taubot-redis-")
        proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", workdir, "--loglevel", "notice"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        ready = False
        for line in proc.stdout:  # the server says when it listens: wait on that, not on time
            if "Ready to accept connections" in line:
                ready = True
                break
        if not ready:  # it exited (port taken between our check and its bind): try another
            proc.wait(timeout=10)
            shutil.rmtree(workdir, ignore_errors=True)
            continue
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            shutil.rmtree(workdir, ignore_errors=True)
        return
    pytest.exit("could not start a private redis-server", returncode=1)


@pytest.fixture
def redis_url(_private_redis: str) -> Iterator[str]:
    """URL of the suite's own Redis; emptied before and after each test using it."""
    conn = redis.Redis.from_url(_private_redis)
    conn.flushdb()
    yield _private_redis
    conn.flushdb()
    conn.close()


@pytest.fixture
def conn(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the suite's own Redis (emptied around each test by `redis_url`)."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def seen(conn: redis.Redis) -> redis.Redis:
    """The bot's Redis as a status sees it: where reads leave their records (first sightings, the
    last read, ETAs, ClusterQueue hints) for later statuses, watches and the monitor."""
    return conn


@pytest.fixture(autouse=True)
def _no_cluster_queue_hints() -> None:
    """Each test starts as a fresh process does, knowing no LocalQueue's ClusterQueue: the hints a
    process keeps are keyed by the API server's URL, and a later test's emulator may get an earlier
    one's port — whose hint would then save it a request (issue 35's LocalQueue read in round 1)."""
    CLUSTER_QUEUE_NAMES.forget()


@pytest.fixture(autouse=True)
def _no_installed_services() -> Iterator[None]:
    """Each test installs the Services its jobs use (or none): nothing leaks between tests."""
    services_module.install(None)
    yield
    services_module.install(None)
