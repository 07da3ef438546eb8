"""How long after a fault a due scheduled job (a watch tick, a retry) runs again (issue 15.11).

Starts a private `redis-server` (RDB saved on shutdown, so an outage keeps the data) and one
`taubot worker` process, then for each fault schedules a job due at once and times how long
it takes to finish:

* the scheduler process SIGKILLed;
* Redis down for 15 s (shut down with SAVE, started again on the same port);
* the whole worker SIGKILLed and a new one started (the dead scheduler's lock would stand for
  rq's interval + 60 s; `workers.rq_worker` releases it once its holder stops heart-beating).

    .venv/bin/python -m bench.bench_faults
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import redis
from rq import Queue
from rq.job import Job
from rq.scheduler import RQScheduler

REPO = Path(__file__).resolve().parents[1]
QUEUE = "taubot-bench-faults"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(port: int, directory: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--dir", directory, "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    conn = redis.Redis(port=port)
    for _ in range(200):
        try:
            conn.ping()
            return proc
        except redis.ConnectionError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not start")


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "workers.cli", "worker"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def time_due_job(conn: redis.Redis, queue: Queue, limit: float = 180.0) -> float:
    """Schedule a job due now; seconds until it finished."""
    job = queue.enqueue_at(datetime(2000, 1, 1, tzinfo=UTC), "os.getpid")
    started = time.monotonic()
    while time.monotonic() - started < limit:
        try:
            if Job.fetch(job.id, connection=conn).get_status() == "finished":
                return time.monotonic() - started
        except redis.ConnectionError:
            pass
        time.sleep(0.1)
    return float("inf")


def main() -> int:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_redis(port, tmp)
        conn = redis.Redis(port=port)
        queue = Queue(QUEUE, connection=conn)
        env = {**os.environ, "TAUBOT_REDIS_URL": f"redis://127.0.0.1:{port}/0", "TAUBOT_QUEUE_NAME": QUEUE,
               "TAUBOT_WORKSPACES_DIR": tmp, "TAUBOT_SLACK_BOT_TOKEN": "xoxb-bench"}
        worker = start_worker(env)
        try:
            print(f"baseline: due job ran after {time_due_job(conn, queue):.1f} s")

            holder = conn.get(RQScheduler.get_locking_key(QUEUE))
            pid = int(conn.hget(f"rq:scheduler:{holder.decode()}", "pid"))  # type: ignore[union-attr]
            os.kill(pid, signal.SIGKILL)
            print(f"scheduler process SIGKILLed: due job ran after {time_due_job(conn, queue):.1f} s")

            conn.shutdown(save=True)
            server.wait(timeout=10)
            time.sleep(15)
            server = start_redis(port, tmp)
            print(f"Redis down 15 s: due job ran {time_due_job(conn, queue):.1f} s after Redis came back")

            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
            worker = start_worker(env)
            print(f"worker SIGKILLed, new worker: due job ran after {time_due_job(conn, queue):.1f} s")
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            server.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
