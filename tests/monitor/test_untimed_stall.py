"""A RayJob that hangs without printing an error is auto-posted as stalled (issue 25, SPEC §11).

Ray's Jobs API gives no per-line time, so the monitor dates the driver log's tail by when it was
first seen — the same Redis record /tau status keeps (workers/collect/logs/seen.py) — and a tail
unchanged for longer than the stall threshold is "no progress since …". One read alone claims
nothing. Through the emulator (`services/proxy` to the head's dashboard, answers shaped as Ray
2.60 gives them: tests/fixtures/ray_dashboard.py), the fake Slack and the suite's Redis; the
RayJob is KubeRay v1's shape (tests/fixtures/k8s.py). The clock is the test's.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import redis

from tests.fakes.kube_api import running_emulator
from tests.fakes.slack_api import running_fake_slack
from tests.fixtures import k8s
from tests.fixtures.ray_dashboard import serve_driver_log
from tests.live.conftest import workspace_objects, write_descriptor
from workers.collect.investigate import diagnose_live
from workers.config.settings import Settings
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity
from workers.monitor.run import run_once
from workers.plumbing.clock import ManualClock
from workers.services import Services, install

TOKEN = "xoxb-monitor"
CHANNEL = "C012VISION"
NOW = k8s.T0 + timedelta(minutes=60)
RUN = "ray-pretrain-13b"
ALICE = Identity(user="alice@example.com", groups=("team-vision",))
# Hugging Face Trainer dicts as a Ray driver prints them; the Jobs API returns them untimed.
DRIVER_LOG = "".join(f"{{'loss': {2 - i / 10:.4f}, 'grad_norm': 1.1, 'learning_rate': 4e-05, "
                     f"'epoch': {i / 10:.2f}}}\n" for i in range(8))


def ray_world() -> tuple[list[dict], str, str]:
    rj = k8s.rayjob(RUN)
    rc = k8s.raycluster(rayjob=rj, state="ready")
    pods = [k8s.ray_pod(rc, "head", node="aks-system-0", phase="Running", containers=[k8s.running("ray-head")]),
            k8s.ray_pod(rc, "worker", node="gpu-node-1", phase="Running",
                        containers=[k8s.running("ray-worker")])]
    service = f"{rj['status']['rayClusterName']}-head-svc"
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": service, "namespace": k8s.NS},
           "spec": {"ports": [{"name": "dashboard", "port": 8265}]}}
    return ([*workspace_objects(), rj, rc, *pods, svc, k8s.workload(rj, state="admitted")],
            service, rj["status"]["jobId"])


def _posts(fake) -> list[str]:  # noqa: ANN001
    return [json.dumps(c.params.get("blocks"), ensure_ascii=False) + (c.params.get("text") or "")
            for c in fake.calls_to("chat.postMessage")
            if c.params.get("channel") == CHANNEL and not c.params.get("thread_ts") and c.response.get("ok")]


def test_a_silently_hung_rayjob_is_posted_once_its_untimed_log_stays_unchanged(tmp_path: Path,
                                                                               redis_url: str) -> None:
    objects, service, job_id = ray_world()
    with running_emulator(objects) as emu, running_fake_slack(token=TOKEN) as fake:
        serve_driver_log(emu, k8s.NS, service, job_id, DRIVER_LOG)
        (tmp_path / "workspaces").mkdir()
        write_descriptor(tmp_path / "workspaces", emu.base_url, channels=(CHANNEL,))
        settings = Settings(slack_bot_token=TOKEN, slack_api_url=fake.api_url, redis_url=redis_url,
                            workspaces_dir=tmp_path / "workspaces", button_signing_key="k" * 32)
        clock = ManualClock(NOW)
        services = Services.for_slack(settings, clock=clock)
        install(services)
        try:
            first = asyncio.run(run_once(services))
            assert first.log_reads == 1 and _posts(fake) == []  # one read: the time is unknown, no claim
            clock.advance(10 * 60)
            asyncio.run(run_once(services))
            assert _posts(fake) == []  # unchanged for 10 minutes: under the 20-minute threshold
            clock.advance(15 * 60)
            asyncio.run(run_once(services))
            [post] = _posts(fake)
            assert RUN in post and "Runtime progress" in post and "no progress since" in post
            asyncio.run(run_once(services))
            assert len(_posts(fake)) == 1  # posted once
        finally:
            services.redis.close()


def test_the_monitor_and_a_status_share_the_first_sighting(tmp_path: Path, redis_url: str) -> None:
    """A /tau status read the same tail 25 minutes before the monitor's first read: that first read
    already knows the tail has not moved since then (one record per run uid, in Redis)."""
    objects, service, job_id = ray_world()
    conn = redis.Redis.from_url(redis_url)
    with running_emulator(objects) as emu, running_fake_slack(token=TOKEN) as fake:
        serve_driver_log(emu, k8s.NS, service, job_id, DRIVER_LOG)
        (tmp_path / "workspaces").mkdir()
        write_descriptor(tmp_path / "workspaces", emu.base_url, channels=(CHANNEL,))
        earlier = NOW - timedelta(minutes=25)
        status = asyncio.run(diagnose_live(load_descriptors(tmp_path / "workspaces"), run=RUN, identity=ALICE,
                                           now=earlier, workspace="vision", seen=conn))
        assert "time of the last progress line unknown" in status.diagnosis.phase("Runtime progress").summary
        settings = Settings(slack_bot_token=TOKEN, slack_api_url=fake.api_url, redis_url=redis_url,
                            workspaces_dir=tmp_path / "workspaces", button_signing_key="k" * 32)
        services = Services.for_slack(settings, clock=ManualClock(NOW))
        install(services)
        try:
            asyncio.run(run_once(services))
            [post] = _posts(fake)
            assert RUN in post and "no progress since" in post
        finally:
            services.redis.close()
            conn.close()
