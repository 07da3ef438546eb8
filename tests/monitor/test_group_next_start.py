"""The monitor's grouped post for runs waiting in one ClusterQueue names their next start, from its own
cache (issue 35, SPEC §7b): LIST then WATCH against the emulator, real Redis, the fake Slack.

Objects: Kueue v1beta2 shapes from tests/fixtures/k8s.py — `cluster_queue` (quota, flavorsReservation,
pendingWorkloads), admitted `workload`s with `spec.maximumExecutionTimeSeconds`
(apis/kueue/v1beta2/workload_types.go), the release bound as workload_controller.go
reconcileMaxExecutionTime computes it (docs/reference/kueue-verified.md).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.kube_api import KubeEmulator, running_emulator
from tests.fakes.slack_api import FakeSlack, running_fake_slack
from tests.fixtures import k8s
from tests.live.conftest import workspace_objects
from workers.config.settings import Settings
from workers.diagnosis.podfacts import condition
from workers.diagnosis.timeutil import parse_time
from workers.monitor.run import Monitor, SweepReport, _all_synced, run_once
from workers.plumbing.clock import ManualClock
from workers.services import Services, install

from .test_monitor import AUDIO_NS, NOW, TOKEN, VISION, descriptors

CQ = "cluster-queue"
HEADER = "🚨 2 runs stalled: waiting for quota in ClusterQueue cluster-queue"


def holder(name: str, ns: str, limit: int | None) -> list[dict]:
    """A running Job holding 8 GPUs of the ClusterQueue since 20 minutes before NOW, its Workload
    admitted with ``limit`` seconds of time (None: no limit)."""
    t0 = NOW - timedelta(minutes=20)
    j = k8s.job(name, ns=ns, suspend=False, active=1, gpus=8, t0=t0)
    wl = k8s.workload(j, state="admitted", cluster_queue=CQ, t0=t0)
    if limit is not None:
        wl["spec"]["maximumExecutionTimeSeconds"] = limit
    pod = k8s.job_pod(j, t0=t0, node="gpu-node-3", phase="Running", containers=[k8s.running(t0=t0)])
    return [j, wl, pod]


def waiting(name: str) -> list[dict]:
    """A Job Kueue keeps suspended, its 8 GPUs waiting for quota since 45 minutes before NOW."""
    t0 = NOW - timedelta(minutes=45)
    j = k8s.job(name, suspend=True, gpus=8, t0=t0)
    return [j, k8s.workload(j, state="waiting_for_quota", cluster_queue=CQ, t0=t0)]


def world(*, bert_ns: str = AUDIO_NS, limits: bool = True, pending: int = 2) -> list[dict]:
    """q-run-1 and q-run-2 wait in cluster-queue (16 GPUs, all held): llama-a (team-vision) holds 8 for
    up to 3 h, bert (``bert_ns``) 8 for up to 1 h."""
    return [*workspace_objects(), k8s.local_queue("team-a", ns=AUDIO_NS),
            k8s.cluster_queue(CQ, gpu_quota=16, gpu_used=16, pending=pending),
            *holder("llama-a", k8s.NS, 3 * 3600 if limits else None),
            *holder("bert", bert_ns, 3600 if limits else None),
            *waiting("q-run-1"), *waiting("q-run-2")]


def released(objects: list[dict], name: str) -> str:
    """HH:MM UTC when the holder ``name``'s time limit runs out: Admitted + maximumExecutionTimeSeconds."""
    wl = next(o for o in objects if o["kind"] == "Workload" and o["metadata"]["name"].startswith(f"job-{name}-"))
    at = parse_time(condition(wl, "Admitted")["lastTransitionTime"])
    assert at is not None
    return f"{at + timedelta(seconds=wl['spec']['maximumExecutionTimeSeconds']):%H:%M} UTC"


class World:
    def __init__(self, emu: KubeEmulator, fake: FakeSlack, services: Services) -> None:
        self.emu, self.fake, self.services = emu, fake, services

    def group_posts(self) -> list[Any]:
        return [c for c in self.fake.calls_to("chat.postMessage") if not c.params.get("thread_ts")
                and "runs stalled" in json.dumps(c.params.get("blocks"), ensure_ascii=False)]


@pytest.fixture
def monitored(tmp_path: Path, redis_url: str) -> Iterator[Any]:
    def start(objects: list[dict]) -> Any:
        return _Started(tmp_path, redis_url, objects)
    yield start


class _Started:
    def __init__(self, tmp_path: Path, redis_url: str, objects: list[dict]) -> None:
        self.tmp_path, self.redis_url, self.objects = tmp_path, redis_url, objects

    def __enter__(self) -> World:
        self._emu = running_emulator(self.objects)
        self._slack = running_fake_slack(token=TOKEN)
        emu, fake = self._emu.__enter__(), self._slack.__enter__()
        descriptors(self.tmp_path / "workspaces", emu.base_url)
        settings = Settings(slack_bot_token=TOKEN, slack_api_url=fake.api_url, redis_url=self.redis_url,
                            workspaces_dir=self.tmp_path / "workspaces", button_signing_key="k" * 32)
        self.services = Services.for_slack(settings, clock=ManualClock(NOW))
        install(self.services)
        return World(emu, fake, self.services)

    def __exit__(self, *exc: object) -> None:
        self.services.redis.close()
        self._slack.__exit__(*exc)
        self._emu.__exit__(*exc)


def test_the_group_says_the_next_start_and_moves_it_as_a_holder_finishes(monitored: Any) -> None:
    """bert's limit frees 8 GPUs first: q-run-1 starts by then at the latest. bert finishes (its
    Workload gone, Kueue's reservation down to 8): the WATCH brings both, and the next sweep edits the
    group's card to a start now — with no reply (nothing joined or left)."""
    objects = world()
    with monitored(objects) as w:
        async def scenario() -> None:
            stop = asyncio.Event()
            monitor = Monitor(w.services, leased=False)
            monitor.stop = stop
            await monitor.sync()  # LIST, then WATCH, every stream
            try:
                [cluster] = monitor.clusters.values()
                await asyncio.wait_for(_all_synced(monitor), 20)
                await monitor.sweep(cluster, SweepReport(), [0])
                [post] = w.group_posts()
                assert json.dumps(post.params["blocks"], ensure_ascii=False).count(
                    f"{HEADER}; the next start at the latest {released(objects, 'bert')}") == 1
                # bert finishes: Kueue deletes nothing by itself, but the Job's owner does; Kueue books
                # the quota back (ClusterQueue status).
                bert_wl = next(o for o in objects if o["kind"] == "Workload" and "bert" in o["metadata"]["name"])
                w.emu.delete("Workload", AUDIO_NS, bert_wl["metadata"]["name"])
                w.emu.upsert(k8s.cluster_queue(CQ, gpu_quota=16, gpu_used=8, pending=2))
                cqs = cluster.cache.stores[("", "ClusterQueue")]
                audio = cluster.cache.stores[(AUDIO_NS, "Workload")]

                def booked_back() -> bool:
                    return cqs.objects[CQ]["status"]["flavorsReservation"][0]["resources"][0]["total"] == "8"

                await asyncio.wait_for(cqs.until(booked_back), 20)
                await asyncio.wait_for(audio.until(lambda: bert_wl["metadata"]["name"] not in audio.objects), 20)
                lists = sum(s.lists for s in cluster.cache.streams.values())
                report = SweepReport()
                await monitor.sweep(cluster, report, [0])
                assert sum(s.lists for s in cluster.cache.streams.values()) == lists  # the WATCH brought it
                assert report.posts.get("group-moved") == 1
                [edit] = [c for c in w.fake.calls_to("chat.update") if c.params["ts"] == post.response["ts"]]
                text = json.dumps(edit.params["blocks"], ensure_ascii=False)
                assert f"{HEADER}; the next start ≈ {NOW:%H:%M} UTC" in text
                assert not w.fake.thread(VISION, post.response["ts"])[1:]  # no reply for a moved start
                calls = len(w.fake.calls)
                await monitor.sweep(cluster, SweepReport(), [0])  # nothing moved: nothing sent
                assert len(w.fake.calls) == calls
            finally:
                stop.set()
                await monitor.close()

        asyncio.run(scenario())


@pytest.mark.parametrize(("case", "objects"), [
    ("no holder has a time limit or an ETA", world(limits=False)),
    ("a holder's namespace is not watched", world(bert_ns="team-other")),
    ("the ClusterQueue counts a pending Workload the monitor cannot see", world(pending=3)),
], ids=["no-limits", "unwatched-holder", "unseen-pending"])
def test_no_basis_no_time(monitored: Any, case: str, objects: list[dict]) -> None:
    """Never a time without a basis: what the monitor cannot see is unknown, so the post names no start."""
    with monitored(objects) as w:
        asyncio.run(run_once(w.services))
        [post] = w.group_posts()
        header = next(b["text"]["text"] for b in post.params["blocks"] if b["type"] == "header")
        assert header == HEADER, case
        assert not w.fake.calls_to("chat.update")


def test_a_kueue_serving_only_v1beta1_is_read_there(monitored: Any) -> None:
    """Kueue before v0.15 serves kueue.x-k8s.io/v1beta1 only: each Kueue stream's 404 for v1beta2 is
    asked again at v1beta1 (as a status reads it), and the group says its next start as before."""
    objects = world()
    with monitored(objects) as w:
        w.emu.serve_versions("kueue.x-k8s.io", ["v1beta1"])
        asyncio.run(run_once(w.services))
        [post] = w.group_posts()
        header = next(b["text"]["text"] for b in post.params["blocks"] if b["type"] == "header")
        assert header == f"{HEADER}; the next start at the latest {released(objects, 'bert')}"
        listed = {r.path for r in w.emu.requests if "kueue.x-k8s.io" in r.path}
        assert "/apis/kueue.x-k8s.io/v1beta1/clusterqueues" in listed
        assert f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{k8s.NS}/workloads" in listed


def test_a_cluster_queue_the_monitor_may_not_read_leaves_every_run_judged(monitored: Any) -> None:
    """A chart without the ClusterQueue rule (403 on the cluster-wide LIST): no time is said, every run
    is still judged and posted, and no sweep waits for that LIST (`Cache.first_lists`)."""
    with monitored(world()) as w:
        w.emu.forbid("list", "clusterqueues")
        report = asyncio.run(run_once(w.services))
        [post] = w.group_posts()
        header = next(b["text"]["text"] for b in post.params["blocks"] if b["type"] == "header")
        assert header == HEADER
        assert report.unread == [] and report.stalled == 2

        async def waits() -> list[Any]:
            monitor = Monitor(w.services, leased=False)
            try:
                await monitor.sync()
                [cluster] = monitor.clusters.values()
                await cluster.cache.list_all()
                assert cluster.cache.streams[(None, "ClusterQueue")].error
                return cluster.cache.first_lists()
            finally:
                await monitor.close()

        assert asyncio.run(waits()) == []
