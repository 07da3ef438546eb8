"""Cheap watch ticks (issue 28.4): an unchanged run costs two requests as the user, nothing else.

Real HTTP to the app, real Redis and rq workers, the Kubernetes API emulator (which bumps an
object's `resourceVersion` on every write, as etcd does) and the fake Slack, as in test_watch.py.
A tick first reads the run and its Workloads (while Kueue holds it) or its pods (once it runs); the
card is kept when their versions are those the last full read saw, and a full status is read when
one changed, when a read failed, and at least every `watch_full_every_ticks` ticks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from tests.fixtures.blocks import card_text
from workers.flows.watch import load_state
from workers.plumbing.timed_jobs import TickMover, due_key
from workers.services import install

from .conftest import ALICE, ALICE_IDENTITY, CHANNEL, SlackApp
from .test_watch import (
    RUN,
    T0,
    apply,
    card,
    cluster,
    has_stop_button,
    identity_file,
    pending,
    press_stop,
    replies,
    running,
    scheduled,
    start_watch,
    tick,
    updates,
    watch_id,
)

ALICE_USER = ALICE_IDENTITY["user"]


@pytest.fixture
def app(slack_app_factory: Callable[..., SlackApp], tmp_path: Path) -> SlackApp:
    """As test_watch.py's: a tick's card edit and its replies may go together."""
    return slack_app_factory(identity_file=identity_file(tmp_path), slack_channel_burst=8)


def requests_of_tick(app: SlackApp, emu: KubeEmulator) -> list[str]:
    """Run the pending tick; the requests it made, as `METHOD path?selector`."""
    emu.clear_requests()
    tick(app)
    assert all(r.header_values("Impersonate-User") == [ALICE_USER] for r in emu.requests)
    return [f"{r.method} {r.path}" + (f"?{r.query['labelSelector']}" if "labelSelector" in r.query else "")
            for r in emu.requests]


def test_an_unchanged_waiting_runs_ticks_read_its_job_and_workloads_and_every_fourth_reads_in_full(
        app: SlackApp) -> None:
    with cluster(app, pending()) as emu:
        start_watch(app)
        ts, before = card(app)
        uid = load_state(app.redis, watch_id(CHANNEL, RUN)).reads.probe.reads[1].selector  # type: ignore[union-attr]
        probe = ["GET /apis/batch/v1/namespaces/team-vision/jobs/train-a",
                 f"GET /apis/kueue.x-k8s.io/v1beta2/namespaces/team-vision/workloads?{uid}"]
        for _ in range(4):  # the watch's first card was a full read (tick 0 counts from it)
            assert sorted(requests_of_tick(app, emu)) == probe
        assert updates(app) == [] and app.fake.message(CHANNEL, ts) == before
        full = requests_of_tick(app, emu)
        assert len(full) > len(probe) and any("tauworkspaces" in r for r in full)
        assert sorted(requests_of_tick(app, emu)) == probe  # and the next ones are cheap again
        assert updates(app) == []  # a full read that found the same card sends nothing


def test_a_running_runs_tick_reads_its_pods_and_a_crash_shows_at_the_next_tick(app: SlackApp) -> None:
    objects = running()
    with cluster(app, objects) as emu:
        start_watch(app)
        ts, _ = card(app)
        reads = requests_of_tick(app, emu)
        assert sorted(reads) == ["GET /api/v1/namespaces/team-vision/pods?batch.kubernetes.io/job-name=train-a",
                                 "GET /apis/batch/v1/namespaces/team-vision/jobs/train-a"]
        job, _wl, pod = objects
        pod_name = pod["metadata"]["name"]
        crashed = k8s.job_pod(job, t0=T0, node="gpu-node-1", phase="Running",
                              containers=[k8s.crash_loop("trainer", pod_name=pod_name, t0=T0)])
        apply(emu, [crashed])  # the kubelet writes the pod: a new resourceVersion, the Job unchanged
        assert len(requests_of_tick(app, emu)) > 2  # the probe saw it, the same tick read in full
        [update] = updates(app)
        assert update.params["ts"] == ts
        assert "CrashLoopBackOff" in card_text(app.fake.message(CHANNEL, ts)["blocks"])  # type: ignore[index]


def test_a_probe_read_that_is_refused_makes_the_tick_a_full_status_that_says_so(app: SlackApp) -> None:
    with cluster(app, pending()) as emu:
        start_watch(app)
        ts, _ = card(app)
        emu.forbid("get", "jobs", user=ALICE_USER)  # RBAC changed under the watch
        tick(app)
        text = card_text(app.fake.message(CHANNEL, ts)["blocks"])  # type: ignore[index]
        assert "permission denied" in text and "not found" not in text.lower()


def test_what_the_probe_does_not_read_reaches_the_card_within_four_ticks(app: SlackApp) -> None:
    """The workspace's readiness is not among the probe's reads: a TauWorkspace that stopped being
    Ready shows at the next full read, at most `watch_full_every_ticks` (4) ticks later."""
    with cluster(app, pending()) as emu:
        start_watch(app)
        ts, _ = card(app)
        apply(emu, [k8s.tau_workspace("vision", phase="Degraded")])
        for _ in range(4):
            tick(app)
        assert updates(app) == []
        tick(app)
        [update] = updates(app)
        text = card_text(app.fake.message(CHANNEL, ts)["blocks"])  # type: ignore[index]
        assert update.params["ts"] == ts and "Degraded" in text


def test_a_stop_pressed_while_an_unchanged_tick_reads_is_not_undone_by_the_tick(app: SlackApp) -> None:
    """An unchanged run's tick takes no lock: it commits its next tick only if the watch's state is
    still what it read. Here the probe's two reads are held at the API server while Alice presses
    Stop; when they are answered (unchanged), the tick's commit is refused, it finds the watch
    stopped, and no tick is scheduled again — the watch stays stopped and its card says so. The
    tick runs as an in-process worker runs it, on its mover's thread."""
    with cluster(app, pending()) as emu:
        start_watch(app)
        wid = watch_id(CHANNEL, RUN)
        emu.hang(times=2)
        app.clock.advance(5)
        key = due_key(app.queue.name)
        [member] = app.redis.zrange(key, 0, -1)
        app.redis.zadd(key, {member: 0.0})
        install(app.services)
        mover = TickMover(app.redis, app.queue, threads=1)
        try:
            assert mover.move_due() == 1
            assert emu.hung.wait(10), "the tick's probe never reached the API server"
            press_stop(app, ALICE, "alice")
        finally:
            emu.release()
            mover.stop()  # waits for the tick
        state = load_state(app.redis, wid)
        assert state is not None and state.stopped is not None and state.tick == 0
        assert scheduled(app) == []
        assert not has_stop_button(card(app)[1])
        assert f"⏹️ <@{ALICE}> stopped watching `{RUN}`." in replies(app)
