"""The monitor leaves the record of a run's last read, so a status after its post takes 3 rounds.

Issue 36.2: a status sends the reads that depend on the run's log — a hung Job's ranks, a stalled
Ray driver's stack — with the log when the record of the run's last read (Redis,
`taubot:last-read:<uid>`, workers/collect/logs/memory.py) found the run waiting; at first sight
they cost a fourth and fifth round. The monitor's sweep reads the log as its own identity and,
when it finds the run waiting, writes that record (workers/monitor/last_read.py). The record only
decides when a status sends a read: the user's own reviews and the API server's RBAC still gate
each one, so a user denied `pods/log` gets nothing through it.

Through the emulator (rounds as tests/live/test_rounds_every_case.py counts them), the fake Slack
and the suite's Redis; the clock is the test's. Shapes: KubeRay's submitter mirror and Ray 2.60's
dashboard (tests/live/test_submitter_log.py, tests/fixtures/ray_dashboard.py), py-spy 0.4's dump,
LlamaFactory#7396's NCCL watchdog pair (tests/diagnosis/test_ranks.py).
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from pathlib import Path

from redis import Redis

from tests.diagnosis.test_ranks import indexed_job, lagging
from tests.fakes.kube_api import KubeEmulator, RecordedRequest, running_emulator
from tests.fakes.slack_api import FakeSlack, running_fake_slack
from tests.fixtures import k8s
from tests.live.conftest import own, proxied, rounds, workspace_objects, write_descriptor
from tests.live.test_rank_logs import cluster, served
from tests.live.test_rounds_every_case import mirrored, stalled_ray_run
from tests.live.test_submitter_log import driver_lines, ray_run
from workers.collect.investigate import diagnose_live
from workers.collect.logs.memory import recall
from workers.config.settings import Settings
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity
from workers.monitor.run import run_once
from workers.plumbing.clock import ManualClock
from workers.services import Services, install

TOKEN = "xoxb-monitor"
CHANNEL = "C012VISION"
NOW = k8s.T0 + timedelta(minutes=60)
ALICE = Identity(user="alice@example.com", groups=("team-vision",))
LATENCY = 0.1  # as test_rounds_every_case.py
RANKS_LATENCY = 0.2  # 32 concurrent reads in one round (as tests/live/test_rank_logs.py)
RAY = "ray-pretrain-13b"
JOB = "llama-ft-7b"
RAY_UID = k8s.rayjob(RAY)["metadata"]["uid"]


def sweep(emu: KubeEmulator, fake: FakeSlack, tmp_path: Path, redis_url: str, now: datetime = NOW
          ) -> list[RecordedRequest]:
    """One monitor sweep (`taubot monitor --once`) at ``now``; the requests it made."""
    (tmp_path / "workspaces").mkdir(exist_ok=True)
    write_descriptor(tmp_path / "workspaces", emu.base_url, channels=(CHANNEL,))
    settings = Settings(slack_bot_token=TOKEN, slack_api_url=fake.api_url, redis_url=redis_url,
                        workspaces_dir=tmp_path / "workspaces", button_signing_key="k" * 32)
    services = Services.for_slack(settings, clock=ManualClock(now))
    install(services)
    emu.clear_requests()
    try:
        asyncio.run(run_once(services))
    finally:
        services.redis.close()
    return list(emu.requests)


def status(emu: KubeEmulator, tmp_path: Path, run: str, conn: Redis, now: datetime = NOW):  # noqa: ANN201
    """A user's live status (as ALICE, impersonated); its diagnosis and requests (no queue reads)."""
    write_descriptor(tmp_path, emu.base_url)
    emu.clear_requests()
    report = asyncio.run(diagnose_live(load_descriptors(tmp_path), run=run, identity=ALICE, now=now,
                                       workspace="vision", seen=conn))
    assert all(r.header_values("Impersonate-User") == [ALICE.user] for r in emu.requests)
    return report.diagnosis, own(list(emu.requests))


def posted(fake: FakeSlack) -> list[str]:
    return [json.dumps(c.params.get("blocks"), ensure_ascii=False) for c in fake.calls_to("chat.postMessage")
            if c.params.get("channel") == CHANNEL and not c.params.get("thread_ts") and c.response.get("ok")]


def test_a_status_after_the_monitor_posted_a_stalled_rayjob_shows_its_stack_in_three_rounds(
        tmp_path: Path, redis_url: str, conn: Redis) -> None:
    """The monitor's read finds the driver stalled (mirror and driver log quiet for 30 minutes),
    posts it, and reads the job's details once, as itself (no impersonation), never the dump. The
    user's status right after: the proxy review with round 2, the details and the dump with the
    log — 3 rounds, 14 requests, where a first sighting takes 5. A later sweep reads no details
    again (the record names the same job's driver)."""
    with running_emulator(workspace_objects(), latency=LATENCY) as emu, running_fake_slack(token=TOKEN) as fake:
        head_ip = stalled_ray_run(emu)
        requests = sweep(emu, fake, tmp_path, redis_url)
        [post] = posted(fake)
        assert RAY in post and "no progress since" in post
        [details] = proxied(requests, f"/api/jobs/{k8s.rayjob(RAY)['status']['jobId']}")
        assert details.header_values("Impersonate-User") == []  # the monitor's own identity
        assert proxied(requests, "/worker/traceback") == []  # py-spy is never run by the monitor
        record = recall(conn, RAY_UID, NOW)
        assert record is not None and record.waiting and record.driver is not None
        assert (record.driver.pid, str(record.driver.ip)) == (13860, head_ip)

        d, requests = status(emu, tmp_path, RAY, conn, NOW + timedelta(minutes=1))
        check = d.phase("Runtime progress")
        assert check.reason == "progress.stalled" and check.driver_stack[0] == "wait (threading.py:327)"
        [dump] = proxied(requests, "/worker/traceback")
        assert (dump.query["pid"], dump.query["ip"], dump.round) == ("13860", head_ip, 3)
        assert max(r.round for r in requests) == 3 and len(requests) == 14, rounds(requests)

        requests = sweep(emu, fake, tmp_path, redis_url, NOW + timedelta(minutes=2))
        assert proxied(requests, "/api/jobs/") == [] and len(posted(fake)) == 1


def test_a_user_denied_pod_logs_gets_no_log_or_dashboard_read_from_the_monitors_record(
        tmp_path: Path, redis_url: str, conn: Redis) -> None:
    """The monitor's record says the driver waits and names its process; a user who may not read
    pods/log still gets nothing through the proxy (no driver log, no details, no dump): the early
    reads wait for the user's own reviews. The mirror's read is the user's, refused by the API
    server; the answer says the permission is missing."""
    with running_emulator(workspace_objects(), latency=LATENCY) as emu, running_fake_slack(token=TOKEN) as fake:
        stalled_ray_run(emu)
        sweep(emu, fake, tmp_path, redis_url)
        assert recall(conn, RAY_UID, NOW).driver is not None  # type: ignore[union-attr]
        emu.forbid("get", "pods", subresource="log", user=ALICE.user)
        d, requests = status(emu, tmp_path, RAY, conn, NOW + timedelta(minutes=1))
    assert [r for r in requests if "/proxy/" in r.path] == [], rounds(requests)
    assert len([r for r in requests if r.path.endswith("/log")]) == 1  # the mirror's, refused
    check = d.phase("Runtime progress")
    assert "permission denied (get pods/log)" in check.summary and check.driver_stack == []
    assert max(r.round for r in requests) <= 3


def test_a_status_after_the_monitor_found_a_32_rank_job_hung_reads_its_ranks_in_three_rounds(
        tmp_path: Path, redis_url: str, conn: Redis) -> None:
    """The monitor reads the run's own log (one request), finds the NCCL watchdog's hang, and
    records it: the user's status sends every rank's tail with the log once its `pods/log` review
    (round 2) allowed — 3 rounds, 39 requests, where a first sighting takes 4 — and names the
    culprit. A user denied pods/log sends no rank read on the record."""
    objs = indexed_job(32)
    with running_emulator(cluster(objs), latency=RANKS_LATENCY) as emu, running_fake_slack(token=TOKEN) as fake:
        served(emu, objs, lagging(32, 17))
        requests = sweep(emu, fake, tmp_path, redis_url)
        assert len([r for r in requests if r.path.endswith("/log")]) == 1
        record = recall(conn, objs[0]["metadata"]["uid"], NOW)
        assert record is not None and record.waiting and record.driver is None
        d, requests = status(emu, tmp_path, JOB, conn, NOW + timedelta(minutes=1))
        culprit = d.phase("Runtime progress").culprit
        assert culprit is not None and culprit.rank == 17 and culprit.node == "gpu-a17"
        logs = [r for r in requests if r.path.endswith("/log")]
        assert len(logs) == len({r.path for r in logs}) == 32 and {r.round for r in logs} == {3}
        assert max(r.round for r in requests) == 3 and len(requests) == 39, rounds(requests)

        emu.forbid("get", "pods", subresource="log", user=ALICE.user)
        d, requests = status(emu, tmp_path, JOB, conn, NOW + timedelta(minutes=2))
    assert "permission denied (get pods/log)" in d.phase("Runtime progress").summary
    assert len([r for r in requests if r.path.endswith("/log")]) <= 2, rounds(requests)  # refused, no ranks


def test_a_run_the_monitor_finds_progressing_again_is_recorded_as_no_longer_waiting(
        tmp_path: Path, redis_url: str, conn: Redis) -> None:
    """A record that says waiting is cleared when the monitor's read finds the driver moving, so
    no later status dumps a stack for a run that recovered; a healthy run leaves no record."""
    with running_emulator(workspace_objects(), latency=LATENCY) as emu, running_fake_slack(token=TOKEN) as fake:
        stalled_ray_run(emu)
        sweep(emu, fake, tmp_path, redis_url)
        assert recall(conn, RAY_UID, NOW).waiting is True  # type: ignore[union-attr]
        later = NOW + timedelta(minutes=5)
        objects, sub_pod, _service, job_id = ray_run()
        mirrored(emu, sub_pod, job_id, driver_lines(12), -5)  # two more lines, the last at `later`
        requests = sweep(emu, fake, tmp_path, redis_url, later)
        assert proxied(requests, "/api/jobs/") == []
        record = recall(conn, RAY_UID, later)
        assert record is not None and record.waiting is False and record.driver is None

    conn.flushdb()
    with running_emulator(workspace_objects(), latency=LATENCY) as emu, running_fake_slack(token=TOKEN) as fake:
        objects, sub_pod, _service, job_id = ray_run()
        for obj in objects:
            emu.upsert(obj)
        mirrored(emu, sub_pod, job_id, driver_lines(10), 1)
        sweep(emu, fake, tmp_path, redis_url)
        assert recall(conn, RAY_UID, NOW) is None and posted(fake) == []
