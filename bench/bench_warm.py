"""Command → card through a warm worker, at 20 ms and 100 ms RTT: `python -m bench.bench_warm`.

Run by hand from the repository root (needs the local Redis). What runs: `taubot serve http`
(its own process), one `taubot worker --in-process` (rq's SimpleWorker: its connection pools
live as long as it does, issue 28), the fake Slack, and the Kubernetes API emulator with
``latency`` = RTT on every request, serving the bundled running RayJob (`l7-rayjob-running`:
layers 6–8 are read — its nodes, and the driver log through the dashboard after the user's
`pods/log` review). Each command goes to a channel of its own, so Slack's per-channel pace is
not what is measured. The first command after the worker starts is cold (it opens the pool);
the figures are of the ``--commands`` after it, one at a time: time from sending the signed
command to the card in the thread (p50, p99), and the TCP connections the emulator accepted for
them (client ports), which a warm worker keeps at zero.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import yaml
from redis import Redis
from rq import Queue

from bench.ack_latency import SECRET, TOKEN, USER, cards, cleanup, describe, post, wait_cards
from bot.serve import EVENTS_PATH
from tests.diagnosis.test_node_health import node
from tests.fakes.kube_api import KubeEmulator, running_emulator
from tests.fakes.slack_api import FakeSlack, running_fake_slack
from tests.fakes.slack_signing import signed_headers, slash_command_body
from tests.fixtures.ray_dashboard import serve_driver_log
from tests.live.conftest import workspace_objects, write_descriptor
from tests.slack.conftest import example_objects
from tests.slack.test_services import serve_http

RUN = "ray-pretrain-13b"
DRIVER_LOG = "".join(f"{{'loss': {2 - i / 100:.4f}, 'epoch': {i / 100:.2f}}}\n" for i in range(200))


def channel(i: int) -> str:
    return f"C0WARM{i:04d}"


def cluster_objects() -> list[dict]:
    objects = [*workspace_objects(), *example_objects("l7-rayjob-running")]
    hosts = sorted({(o.get("spec") or {}).get("nodeName") for o in objects
                    if o.get("kind") == "Pod" and (o.get("spec") or {}).get("nodeName")})
    rj = next(o for o in objects if o.get("kind") == "RayJob")
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": f"{rj['status']['rayClusterName']}-head-svc",
                            "namespace": rj["metadata"]["namespace"]},
               "spec": {"ports": [{"name": "dashboard", "port": 8265}]}}
    return [*objects, service, *[node(**{"metadata.name": h}) for h in hosts]]


def serve_dashboard(emu: KubeEmulator, objects: list[dict]) -> None:
    rj = next(o for o in objects if o.get("kind") == "RayJob")
    serve_driver_log(emu, rj["metadata"]["namespace"], f"{rj['status']['rayClusterName']}-head-svc",
                     rj["status"]["jobId"], DRIVER_LOG)


def command(url: str, fake: FakeSlack, i: int) -> float:
    body = slash_command_body(text=f"status {RUN}", user_id=USER, channel_id=channel(i),
                              response_url=fake.response_url(f"warm{i}"))
    request = urllib.request.Request(url, data=body.encode(), headers=signed_headers(SECRET, body),
                                     method="POST")
    before = cards(fake)
    started = time.perf_counter()
    post(request)
    wait_cards(fake, before + 1, 60)
    return time.perf_counter() - started


def measure(rtt_ms: float, commands: int, redis_url: str) -> None:
    queue_name = f"taubot-bench-warm-{uuid.uuid4().hex[:8]}"
    conn = Redis.from_url(redis_url)
    queue = Queue(queue_name, connection=conn)
    objects = cluster_objects()
    worker: subprocess.Popen[bytes] | None = None
    with tempfile.TemporaryDirectory() as tmp, running_fake_slack(token=TOKEN) as fake, \
            running_emulator(objects, latency=rtt_ms / 1000) as emu:
        serve_dashboard(emu, objects)
        workspaces = Path(tmp) / "workspaces"
        workspaces.mkdir()
        write_descriptor(workspaces, emu.base_url, channels=tuple(channel(i) for i in range(commands + 1)))
        identity = Path(tmp) / "identity.yaml"
        identity.write_text(yaml.safe_dump({"users": {USER: {"user": "alice@example.com",
                                                              "groups": ["team-vision"]}}}))
        env = {**os.environ, "TAUBOT_SLACK_BOT_TOKEN": TOKEN, "TAUBOT_SLACK_SIGNING_SECRET": SECRET,
               "TAUBOT_SLACK_API_URL": fake.api_url, "TAUBOT_REDIS_URL": redis_url,
               "TAUBOT_WORKSPACES_DIR": str(workspaces), "TAUBOT_IDENTITY_FILE": str(identity),
               "TAUBOT_QUEUE_NAME": queue_name, "TAUBOT_METRICS_PORT": "0"}
        try:
            with serve_http(env, processes=1) as base:
                url = base + EVENTS_PATH
                worker = subprocess.Popen([sys.executable, "-m", "workers.cli", "worker", "--in-process"],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                first = command(url, fake, 0)  # cold: the worker's first status opens its pool
                cold = emu.connections()
                per_status = len(emu.requests)
                emu.clear_requests()
                warm = [command(url, fake, i) for i in range(1, commands + 1)]
                carried = emu.connections()
                print(describe(f"command → card, warm worker, {rtt_ms:g} ms RTT", warm))
                print(f"  first command (cold worker): {first * 1000:.1f} ms, {len(cold)} connections, "
                      f"{per_status} Kubernetes requests")
                print(f"  connections opened by the {commands} warm statuses: {len(carried - cold)} "
                      f"({len(carried)} carried their {len(emu.requests)} requests)")
        finally:
            if worker is not None:
                worker.terminate()
                worker.wait(timeout=10)
            cleanup(conn, queue)
            conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=30)
    parser.add_argument("--rtt", default="20,100", help="RTTs in ms, comma-separated")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    for rtt in (float(r) for r in args.rtt.split(",")):
        measure(rtt, args.commands, args.redis_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
