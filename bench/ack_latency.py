"""Ack latency of `/tau` under a burst, and time from command to first card.

Run by hand from the repository root (needs the local Redis):

    .venv/bin/python -m bench.ack_latency [--commands 50] [--workers 2] [--redis-url URL]

What it measures, over real HTTP and real Redis, with the fake Slack and the
Kubernetes API emulator standing in for slack.com and a cluster:

1. **Ack latency**: ``--commands`` signed `/tau status` requests, signed
   beforehand and released together (a barrier), to `taubot serve http` running
   in its own process as in production, once per ``--processes`` count (its
   servers share the port); the time until each HTTP response (the ack)
   arrives. Slack's limit is 3 s; the goal is p50 ≤ 20 ms, p99 ≤ 50 ms (issue 36).
   Beside it, the CPU each ack cost the servers (`/proc`) and this bench: the
   figures a loaded machine moves least. ``--ack-only`` stops there.
2. **Command → first card**: one command with ``--workers`` `taubot worker`
   processes running (real forking rq workers, started as subprocesses):
   time from sending the command until the phase card is in the thread.
3. **Burst → all cards**: the same burst with the workers running; time until
   every card was posted (throughput of the worker side).

Slack's `chat.postMessage` rate limit (≈1/s per channel) is not simulated by
the fake, so (3) is an upper bound of what the workers do, not of what Slack
would accept in one channel.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from redis import Redis
from rq import Queue

from bot.serve import EVENTS_PATH
from tests.fakes.kube_api import running_emulator
from tests.fakes.slack_api import FakeSlack, running_fake_slack
from tests.fakes.slack_signing import signed_headers, slash_command_body
from tests.live.conftest import workspace_objects, write_descriptor
from tests.slack.conftest import example_objects
from tests.slack.test_services import ServerProcess

SECRET = "bench-signing-secret"
TOKEN = "xoxb-bench"
CHANNEL = "C012VISION"
USER = "U012ALICE"
RUN = "llama-ft-7b"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: p99 of 50 samples is the 50th)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def signed(url: str, text: str, response_id: str, fake: FakeSlack) -> urllib.request.Request:
    """A signed slash command, built (and its HMAC computed) before the clock starts."""
    body = slash_command_body(text=text, user_id=USER, channel_id=CHANNEL,
                              response_url=fake.response_url(response_id))
    return urllib.request.Request(url, data=body.encode(), headers=signed_headers(SECRET, body),
                                  method="POST")


def post(request: urllib.request.Request, start: threading.Barrier | None = None) -> float:
    """Send one request (after every other sender is ready, with ``start``); seconds to the ack."""
    if start is not None:
        start.wait()
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        if response.status != 200:
            raise RuntimeError(f"ack status {response.status}")
    return time.perf_counter() - started


def send(url: str, text: str, response_id: str, fake: FakeSlack) -> float:
    return post(signed(url, text, response_id, fake))


def burst(url: str, fake: FakeSlack, count: int) -> list[float]:
    """``count`` commands released at the same instant, as a stand-up's worth of `/tau` arrives.

    Sent from one asyncio thread over raw HTTP/1.1, each on a new connection as Slack's are:
    the measuring side should take as little as it can of the cores the server runs on (50
    urllib threads cost the bench itself a few ms of every ack)."""
    parts = urlsplit(url)
    raws = []
    for _ in range(count):
        body = slash_command_body(text=f"status {RUN}", user_id=USER, channel_id=CHANNEL,
                                  response_url=fake.response_url(f"b{uuid.uuid4().hex[:8]}"))
        head = [f"POST {parts.path} HTTP/1.1", f"Host: {parts.netloc}",
                "Content-Type: application/x-www-form-urlencoded", f"Content-Length: {len(body.encode())}",
                "Connection: close", *(f"{k}: {v}" for k, v in signed_headers(SECRET, body).items()
                                       if k.lower() not in ("content-type", "content-length"))]
        raws.append(("\r\n".join(head) + "\r\n\r\n").encode() + body.encode())

    async def one(raw: bytes, start: asyncio.Event) -> float:
        await start.wait()
        started = time.perf_counter()
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        writer.write(raw)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await reader.readexactly(length)
        elapsed = time.perf_counter() - started
        writer.close()
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError("ack status " + head.split(b"\r\n")[0].decode())
        return elapsed

    async def run() -> list[float]:
        start = asyncio.Event()
        tasks = [asyncio.create_task(one(raw, start)) for raw in raws]
        await asyncio.sleep(0)  # every sender is waiting on the event
        start.set()
        return list(await asyncio.gather(*tasks))

    return asyncio.run(run())


def cards(fake: FakeSlack) -> int:
    return sum(1 for call in fake.calls_to("chat.postMessage")
               if call.params.get("thread_ts") and call.response.get("ok"))


def wait_cards(fake: FakeSlack, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while cards(fake) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {cards(fake)} of {count} cards after {timeout}s")
        time.sleep(0.005)


def describe(label: str, values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (f"{label}: n={len(ms)} p50={percentile(ms, 50):.1f} ms p99={percentile(ms, 99):.1f} ms "
            f"max={max(ms):.1f} ms mean={statistics.fmean(ms):.1f} ms")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU the processes have used so far (Linux: /proc/PID/stat, fields 14 and 15)."""
    ticks = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def serving_pids(server: ServerProcess) -> list[int]:
    """The processes that answer requests: the forked servers, or the one process itself."""
    return server.children() if server.processes > 1 else [server.proc.pid]


def ack_figure(server: ServerProcess, fake: FakeSlack, queue: Queue, commands: int, bursts: int) -> None:
    """Warm up, then ``bursts`` bursts with no worker running: their ack latencies together (one
    burst of 50 is too small a sample for a stable p50), and the CPU each ack cost the servers
    and this bench (the figures a loaded machine moves least)."""
    url = server.url + EVENTS_PATH
    send(url, "help", "warmup", fake)  # first request pays imports and connections
    for _ in range(2):  # and first bursts fill the pools (threads, Redis) of every process
        burst(url, fake, commands)
    queue.empty()
    acks: list[float] = []
    pids = serving_pids(server)
    server_before, bench_before = cpu_seconds(pids), time.process_time()
    for _ in range(bursts):
        acks += burst(url, fake, commands)
        assert queue.count == commands, f"{queue.count} of {commands} jobs queued"
        queue.empty()
    server_cpu, bench_cpu = cpu_seconds(pids) - server_before, time.process_time() - bench_before
    print(describe(f"ack latency, {bursts} bursts of {commands} concurrent commands, serve http "
                   f"--processes {server.processes}, no worker", acks))
    print(f"  CPU per ack: servers {server_cpu / len(acks) * 1000:.2f} ms, this bench (the sender) "
          f"{bench_cpu / len(acks) * 1000:.2f} ms; load average {os.getloadavg()[0]:.2f}")


def cleanup(conn: Redis, queue: Queue) -> None:
    """Remove every key this run left: its jobs (queued, finished, failed), their results, the
    queue's registries, and the operator-access cache entries."""
    registries = [queue.finished_job_registry, queue.failed_job_registry, queue.scheduled_job_registry]
    job_ids = set(queue.get_job_ids())
    for registry in registries:
        job_ids.update(registry.get_job_ids())
    for job_id in job_ids:
        conn.delete(f"rq:job:{job_id}", f"rq:results:{job_id}")
    queue.delete(delete_jobs=True)
    for pattern in (f"rq:*:{queue.name}", "taubot:operator-access:*"):
        for key in conn.scan_iter(pattern):
            conn.delete(key)


@contextmanager
def serving(env: dict[str, str], processes: int) -> Iterator[ServerProcess]:
    """`taubot serve http --processes N` as its own process, once every server listens."""
    server = ServerProcess(env, processes)
    try:
        server.wait_listening()
        yield server
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--bursts", type=int, default=10)
    parser.add_argument("--processes", default="1,2",
                        help="server process counts to measure the ack at, comma-separated; the "
                        "worker figures use the last")
    parser.add_argument("--ack-only", action="store_true",
                        help="only the ack figures (no worker): e.g. to profile the server under bursts")
    args = parser.parse_args(argv)

    queue_name = f"taubot-bench-{uuid.uuid4().hex[:8]}"
    conn = Redis.from_url(args.redis_url)
    queue = Queue(queue_name, connection=conn)
    workers: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp, running_fake_slack(token=TOKEN) as fake, \
            running_emulator([*workspace_objects(), *example_objects("l4-job-waiting-for-quota")]) as emu:
        workspaces = Path(tmp) / "workspaces"
        workspaces.mkdir()
        write_descriptor(workspaces, emu.base_url, channels=(CHANNEL,))
        identity = Path(tmp) / "identity.yaml"
        identity.write_text(yaml.safe_dump({"users": {USER: {"user": "alice@example.com",
                                                              "groups": ["team-vision"]}}}))
        env = {
            "TAUBOT_SLACK_BOT_TOKEN": TOKEN,
            "TAUBOT_SLACK_SIGNING_SECRET": SECRET,
            "TAUBOT_SLACK_API_URL": fake.api_url,
            "TAUBOT_REDIS_URL": args.redis_url,
            "TAUBOT_WORKSPACES_DIR": str(workspaces),
            "TAUBOT_IDENTITY_FILE": str(identity),
            "TAUBOT_QUEUE_NAME": queue_name,
            "TAUBOT_METRICS_PORT": "0",
        }
        counts = [int(n) for n in args.processes.split(",")]
        try:
            for processes in counts[:-1]:
                with serving({**os.environ, **env}, processes) as server:
                    ack_figure(server, fake, queue, args.commands, args.bursts)
            with serving({**os.environ, **env}, counts[-1]) as server:  # its own process
                url = server.url + EVENTS_PATH
                ack_figure(server, fake, queue, args.commands, args.bursts)
                if args.ack_only:
                    return 0

                worker_env = {**os.environ, **env}
                for _ in range(args.workers):
                    workers.append(subprocess.Popen(
                        [sys.executable, "-m", "workers.cli", "worker"], env=worker_env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                time.sleep(1.5)  # let the workers register and start listening

                firsts = []
                for i in range(5):
                    before = cards(fake)
                    started = time.perf_counter()
                    send(url, f"status {RUN}", f"one{i}", fake)
                    wait_cards(fake, before + 1, 30)
                    firsts.append(time.perf_counter() - started)
                print(describe(f"command → card in thread, one at a time, {args.workers} workers", firsts))

                before = cards(fake)
                started = time.perf_counter()
                acks = burst(url, fake, args.commands)
                wait_cards(fake, before + args.commands, 120)
                total = time.perf_counter() - started
                print(describe(f"ack latency, {args.commands} concurrent commands, workers busy", acks))
                print(f"burst → all {args.commands} cards: {total:.2f} s with {args.workers} workers "
                      f"({args.commands / total:.1f} cards/s)")
                kube = len(emu.requests)
                print(f"  Kubernetes API requests seen by the emulator: {kube}")
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(timeout=10)
            cleanup(conn, queue)
            conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
