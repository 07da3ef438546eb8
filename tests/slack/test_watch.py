"""`/tau status --watch` end to end (issue 5): signed command → rq status job → scheduled ticks.

Real HTTP to the app, real Redis, real rq workers (an in-process `SimpleWorker`
with its scheduler, and for the restart test a `taubot worker` process killed
with SIGKILL), the Kubernetes API emulator whose objects change between
ticks, and the fake Slack, whose recorded calls and stored messages are what
the assertions read.

Ticks are driven deterministically through the workers' own due set
(`workers/plumbing/timed_jobs.py`): the pending tick is made due, a `TickMover` claims it
and queues it to rq, and a burst worker runs it — the path a forking
production worker takes when the interval has passed.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from rq.job import Job
from rq.scheduler import RQScheduler

from tests.fakes.kube_api import KubeEmulator, running_emulator
from tests.fakes.slack_signing import block_action_body
from tests.fixtures import k8s
from tests.live.conftest import workspace_objects, write_descriptor
from tests.waiting import wait_for
from workers.contracts.ids import STOP_WATCHING_ACTION
from workers.contracts.ids import watch_id as _watch_id
from workers.flows.watch import load_state, owner_key, state_key
from workers.plumbing.clock import SystemClock

from .conftest import ALICE, ALICE_IDENTITY, CHANNEL, EXAMPLE_NOW, SlackApp, taubot_worker
from .test_cards import card_text


def watch_id(channel: str, run: str) -> str:
    """The watch of ``run`` in workspace vision (the test descriptor's) in ``channel``."""
    return _watch_id(channel, "vision", run)


BOB = "U012BOB"  # mapped, and the emulator lets him read the run: may stop any watch of it
CAROL = "U012CAROL"  # mapped, but may not read the run's Job: may not stop someone else's watch
RUN = "train-a"
# Created hours before the test clock starts (EXAMPLE_NOW), as a run someone asks about.
T0 = EXAMPLE_NOW - timedelta(hours=5)


def identity_file(directory: Path) -> Path:
    path = directory / "identity-watch.yaml"
    path.write_text(yaml.safe_dump({"users": {
        ALICE: ALICE_IDENTITY,
        BOB: {"user": "bob@example.com", "groups": ["team-vision"]},
        CAROL: {"user": "carol@example.com", "groups": ["team-audio"]},
    }, "map_by_email": False}))
    return path


@pytest.fixture
def app(slack_app_factory: Callable[..., SlackApp], tmp_path: Path) -> SlackApp:
    # A tick never sleeps for the pace: what it cannot send now is re-scheduled. The tests of the
    # card's logic let one tick's card edit and its transition replies go together (Slack's own
    # channel limit is about one a second, with short bursts); pacing has its own tests.
    return slack_app_factory(identity_file=identity_file(tmp_path), slack_channel_burst=8)


# ------------------------------------------------------------ run shapes (tests/fixtures/k8s.py)


def pending() -> list[dict[str, Any]]:
    """Suspended by Kueue, Workload waiting for quota (the l4 example's shape)."""
    j = k8s.job(RUN, suspend=True, t0=T0)
    return [j, k8s.workload(j, state="pending", t0=T0)]


def admitted() -> list[dict[str, Any]]:
    j = k8s.job(RUN, suspend=False, active=1, t0=T0)
    return [j, k8s.workload(j, state="admitted", t0=T0)]


def running() -> list[dict[str, Any]]:
    j = k8s.job(RUN, suspend=False, active=1, t0=T0)
    pod = k8s.job_pod(j, t0=T0, node="gpu-node-1", phase="Running", containers=[k8s.running(t0=T0)])
    return [j, k8s.workload(j, state="admitted", t0=T0), pod]


def succeeded() -> list[dict[str, Any]]:
    j = k8s.job(RUN, suspend=False, succeeded=1, conditions=k8s.job_complete(T0, 3600), t0=T0)
    pod = k8s.job_pod(j, t0=T0, node="gpu-node-1", phase="Succeeded", containers=[k8s.terminated(t0=T0)])
    return [j, k8s.workload(j, state="admitted", t0=T0), pod]


@contextmanager
def cluster(app: SlackApp, objects: list[dict[str, Any]]) -> Iterator[KubeEmulator]:
    with running_emulator([*workspace_objects(), *objects]) as emu:
        write_descriptor(app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        yield emu


def apply(emu: KubeEmulator, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        emu.upsert(obj)


# ------------------------------------------------------------------ driving and reading


def scheduled(app: SlackApp) -> list[str]:
    """The ids of the ticks waiting in the workers' due set."""
    return app.timed()


def tick(app: SlackApp, seconds: float = 5) -> None:
    """Let ``seconds`` pass on the app's clock, make the pending tick due, and let a real
    worker's mover claim it and the worker run it."""
    ids = scheduled(app)
    assert len(ids) == 1, f"expected exactly one pending tick, got {ids}"
    app.clock.advance(seconds)
    assert app.run_timed() == 1


def start_watch(app: SlackApp, *, user: str = ALICE, extra: str = "--interval 5") -> None:
    status, ack, _ = app.command(f"status {RUN} --watch {extra}".strip(), user_id=user)
    assert status == 200 and "`--watch`" in ack["text"], ack
    app.work()


def card(app: SlackApp) -> tuple[str, dict[str, Any]]:
    """The one card (thread reply with blocks) and its current state in the fake Slack."""
    posted = [c for c in app.fake.calls_to("chat.postMessage") if c.params.get("blocks")]
    assert len(posted) == 1, [c.params.get("text") for c in posted]
    ts = posted[0].response["ts"]
    message = app.fake.message(CHANNEL, ts)
    assert message is not None
    return ts, message


def parent_ts(app: SlackApp) -> str:
    [parent] = [c for c in app.fake.calls_to("chat.postMessage") if not c.params.get("thread_ts")]
    return str(parent.response["ts"])


def replies(app: SlackApp) -> list[str]:
    """Thread replies without blocks: the transition lines and notes, oldest first."""
    return [m["text"] for m in app.fake.thread(CHANNEL, parent_ts(app)) if not m.get("blocks")]


def updates(app: SlackApp) -> list[Any]:
    return [c for c in app.fake.calls_to("chat.update") if c.response.get("ok")]


def make_next_tick_due(app: SlackApp) -> None:
    """Make the watch's pending tick due, as time would (the movers run on the system clock)."""
    app.make_due()


def wait_for_tick(app: SlackApp, wid: str, tick: int, what: str, timeout: float = 20.0) -> None:
    wait_for(app.redis, state_key(wid),
             lambda: (load_state(app.redis, wid) or pytest.fail("state lost")).tick >= tick,
             timeout=timeout, what=what)


def has_stop_button(message: dict[str, Any]) -> bool:
    return any(e.get("action_id") == STOP_WATCHING_ACTION
               for b in message["blocks"] if b["type"] == "actions" for e in b["elements"])


def press_stop(app: SlackApp, user: str, response_id: str) -> None:
    ts, message = card(app)
    body = block_action_body(STOP_WATCHING_ACTION, watch_id(CHANNEL, RUN), user_id=user,
                             channel_id=CHANNEL, message_ts=ts, thread_ts=parent_ts(app),
                             message=message, response_url=app.fake.response_url(response_id))
    status, _, seconds = app.post(body)
    assert status == 200 and seconds < 3
    app.work()


# ------------------------------------------------------------------ tests


def test_card_follows_admission_to_running_and_each_transition_is_replied_once(app: SlackApp) -> None:
    with cluster(app, pending()) as emu:
        start_watch(app)
        ts, message = card(app)
        text = card_text(message["blocks"])
        assert "⏳ *First incomplete: Kueue admission* (pending)" in text
        assert "👀 *Watching* every 5 s until" in text and has_stop_button(message)
        assert "last refreshed 10:30:00 UTC" in text  # the test clock's time, not a promise

        # Unchanged cluster: ticks re-collect but never re-send the card.
        for _ in range(2):
            tick(app)
        assert updates(app) == [] and replies(app) == []
        assert load_state(app.redis, watch_id(CHANNEL, RUN)).tick == 2  # type: ignore[union-attr]

        apply(emu, admitted())
        tick(app)
        assert len(updates(app)) == 1
        text = card_text(app.fake.message(CHANNEL, ts)["blocks"])  # type: ignore[index]
        assert "✅ Done: Submitted · Admission" in text and "*First incomplete: Pod scheduling*" in text
        # Pending since before the watch began (3 ticks of 5 s ago): its true start is unknown.
        assert replies(app) == ["*Kueue admission*: pending → done after at least 15s"]

        tick(app)  # nothing moved
        assert len(updates(app)) == 1 and len(replies(app)) == 1

        apply(emu, running())
        tick(app)
        assert len(updates(app)) == 2
        message = app.fake.message(CHANNEL, ts)
        text = card_text(message["blocks"])  # type: ignore[index]
        assert "✅ Done: Submitted · Admission · Scheduling" in text and "Start · Ready" in text
        assert has_stop_button(message)  # type: ignore[arg-type]
        # SPEC §7: one reply for the tick, however many phases moved — a line for each.
        assert len(replies(app)) == 2
        lines = [line for reply in replies(app) for line in reply.split("\n")]
        for phase in ("Kueue admission", "Pod scheduling", "Image pull", "Container start", "Ready"):
            assert sum(line.startswith(f"*{phase}*: ") for line in lines) == 1, (phase, lines)
        # Pending since before the watch began: its true start is unknown, so "at least".
        assert any(line.startswith("*Pod scheduling*: pending → done after at least ") for line in lines)

        apply(emu, succeeded())
        tick(app)
        message = app.fake.message(CHANNEL, ts)
        text = card_text(message["blocks"])  # type: ignore[index]
        assert "⏹️ *Watching stopped*" in text and "the run finished (succeeded)" in text
        assert "*The run succeeded*" in text  # issue 27: the card says so, not what to check
        assert "check the driver" not in text
        assert not has_stop_button(message)  # type: ignore[arg-type]
        assert scheduled(app) == [] and app.queue.count == 0
        assert app.redis.get(owner_key(watch_id(CHANNEL, RUN))) is None


def test_a_waiting_runs_ticks_read_its_queue_only_when_its_workload_changed_or_every_nth(
        slack_app_factory: Callable[..., SlackApp], tmp_path: Path) -> None:
    """Issue 29: the queue position costs 6 reads (LocalQueue list, LocalQueue, the namespace's
    Workloads, the ClusterQueue's list and the ClusterQueue, and — issue 35, for the start estimate —
    the Workloads holding its quota), a tick's re-read 5 (issue 28: the Workloads ahead are read by
    name, not the namespace's every one); a tick whose Workload kept its
    resourceVersion reuses the last position and makes none of them, until it is
    `watch_queue_every_ticks` ticks old."""
    app = slack_app_factory(identity_file=identity_file(tmp_path), slack_channel_burst=8,
                            watch_queue_every_ticks=3)
    job = k8s.job(RUN, suspend=True, t0=T0)
    waiting = k8s.workload(job, state="waiting_for_quota", t0=T0)
    with cluster(app, [k8s.cluster_queue("cluster-queue", gpu_used=16, pending=1), job, waiting]) as emu:

        def queue_reads() -> int:
            reads = [r for r in emu.requests if "visibility.kueue" in r.path or "/localqueues/" in r.path
                     or "/clusterqueues/" in r.path
                     or (r.path.endswith("/workloads") and "labelSelector" not in r.query)]
            emu.clear_requests()
            return len(reads)

        wid = watch_id(CHANNEL, RUN)
        start_watch(app)
        assert queue_reads() == 6  # the watch's first card (it counts as tick 0, as its first tick does)
        memo = load_state(app.redis, wid).reads.queue  # type: ignore[union-attr]
        assert memo is not None and (memo.position.position_in_cluster_queue, memo.cluster_queue) == (
            1, "cluster-queue")
        tick(app)
        assert queue_reads() == 0  # tick 0: the Workload unchanged
        waiting["status"]["conditions"][0]["message"] += " "  # Kueue rewrote its status: a new resourceVersion
        apply(emu, [waiting])
        tick(app)
        # tick 1: read again, all but the namespace's Workloads: a tick reads those ahead by name
        # (none here: nobody is ahead in the LocalQueue), never every Workload of the namespace
        assert queue_reads() == 5
        tick(app)
        tick(app)
        assert queue_reads() == 0  # ticks 2, 3
        tick(app)
        assert queue_reads() == 5  # tick 4: three ticks after the last read, read whatever happened
        assert load_state(app.redis, wid).reads.queue_read_tick == 4  # type: ignore[union-attr]


def test_second_watch_joins_the_first_and_says_so_in_its_thread(app: SlackApp) -> None:
    with cluster(app, pending()):
        start_watch(app)
        start_watch(app, user=BOB, extra="")
        card(app)  # still exactly one card
        [note] = replies(app)
        assert note.startswith(f"👀 <@{BOB}> asked to watch `{RUN}` too and joined this watch")
        assert "every 5 s" in note
        assert len(scheduled(app)) == 1
        state = load_state(app.redis, watch_id(CHANNEL, RUN))
        assert state is not None and state.watchers == [ALICE, BOB]


def test_stop_button_refuses_without_access_and_stops_with_it(app: SlackApp) -> None:
    with cluster(app, pending()) as emu:
        emu.forbid("get", "jobs", user="carol@example.com")
        start_watch(app)

        press_stop(app, CAROL, "carol")
        [refusal] = [c for c in app.fake.calls_to("chat.postEphemeral") if c.params["user"] == CAROL]
        assert "can stop it" in refusal.params["text"]
        assert len(scheduled(app)) == 1 and has_stop_button(card(app)[1])

        emu.clear_requests()
        press_stop(app, BOB, "bob")
        reviews = [r for r in emu.requests if r.path.endswith("/selfsubjectaccessreviews")]
        assert [r.body["spec"]["resourceAttributes"] for r in reviews] == [
            {"verb": "get", "resource": "jobs", "group": "batch", "namespace": k8s.NS, "name": RUN}]
        assert reviews[0].header_values("Impersonate-User") == ["bob@example.com"]
        _, message = card(app)
        text = card_text(message["blocks"])
        assert "⏹️ *Watching stopped*" in text and "*Stop watching* was pressed" in text
        assert not has_stop_button(message)
        assert f"⏹️ <@{BOB}> stopped watching `{RUN}`." in replies(app)
        assert scheduled(app) == []  # the pending tick was dropped

        # The requester may always stop; a press on a stopped watch is answered privately.
        press_stop(app, ALICE, "alice")
        assert any("already stopped" in c.params["text"] for c in app.fake.calls_to("chat.postEphemeral"))


def test_message_not_found_ends_the_watch(app: SlackApp) -> None:
    with cluster(app, pending()) as emu:
        start_watch(app)
        apply(emu, admitted())
        app.fake.fail_next("chat.update", "message_not_found")
        tick(app)
        assert "⏹️ Stopped watching `train-a`: the card was deleted." in replies(app)
        assert scheduled(app) == []
        assert app.redis.get(owner_key(watch_id(CHANNEL, RUN))) is None
        state = load_state(app.redis, watch_id(CHANNEL, RUN))
        assert state is not None and state.stopped == "the card was deleted"


def test_rate_limited_update_is_retried_once_after_retry_after(app: SlackApp) -> None:
    with cluster(app, pending()) as emu:
        start_watch(app)
        apply(emu, admitted())
        app.fake.rate_limit_next("chat.update", retry_after=1)
        tick(app)
        calls = app.fake.calls_to("chat.update")
        assert [c.status for c in calls] == [429, 200]  # slack_sdk waited Retry-After, then retried
        assert "✅ Done: Submitted · Admission" in card_text(card(app)[1]["blocks"])


def test_watch_survives_a_worker_killed_between_ticks(app: SlackApp) -> None:
    """`taubot worker` (a forking rq Worker with its scheduler) runs a tick and is SIGKILLed; the
    next tick waits in Redis and a new worker carries the watch on from the state there.

    The worker process runs on the system clock, as in production, so this test's in-process
    worker does too (a watch started on the test clock would look 30 minutes expired)."""
    app.services.clock = SystemClock()
    with cluster(app, pending()) as emu:
        start_watch(app)
        wid = watch_id(CHANNEL, RUN)
        make_next_tick_due(app)
        with taubot_worker():  # SIGKILLed on exit, with its scheduler process
            wait_for_tick(app, wid, 1, "the worker to run the tick")
        assert len(scheduled(app)) == 1  # tick #1 waits in Redis, not in the dead worker
        apply(emu, admitted())
        tick(app)
        assert len(updates(app)) == 1
        assert "✅ Done: Submitted · Admission" in card_text(card(app)[1]["blocks"])
        assert [r.split(" after ")[0] for r in replies(app)] == ["*Kueue admission*: pending → done"]
        state = load_state(app.redis, wid)
        assert state is not None and state.tick == 2 and state.stopped is None


def scheduler_lock_holder(app: SlackApp) -> bytes:
    """The name holding the queue's rq scheduler lock, once a worker's scheduler has taken it: a
    worker may run its first tick (its mover needs no lock) before its scheduler is up."""
    key = RQScheduler.get_locking_key(app.queue.name)
    wait_for(app.redis, key, lambda: app.redis.get(key) is not None, timeout=20,
             what="the worker's rq scheduler to take its lock")
    holder = app.redis.get(key)
    assert holder is not None
    return holder


def test_watch_ticks_run_while_the_workers_rq_scheduler_process_is_dead(app: SlackApp) -> None:
    """Issue 15.11. The scheduler process of a `taubot worker` is SIGKILLed (as a Redis outage
    also ends it). Ticks never went through rq's schedule since issue 28: the worker's own
    `TickMover` claims the due tick and it runs (with rq's defaults a dead scheduler stopped every
    watch for ten minutes; the worker also restarts it within 5 s for rq's own retries)."""
    app.services.clock = SystemClock()  # the worker process runs on the system clock
    with cluster(app, pending()) as emu:
        start_watch(app)
        wid = watch_id(CHANNEL, RUN)
        make_next_tick_due(app)
        with taubot_worker():
            wait_for_tick(app, wid, 1, "the worker to run the first tick")
            holder = scheduler_lock_holder(app)
            pid = int(app.redis.hget(f"rq:scheduler:{holder.decode()}", "pid"))
            os.kill(pid, signal.SIGKILL)
            apply(emu, admitted())
            make_next_tick_due(app)
            wait_for_tick(app, wid, 2, "the worker's mover to run the due tick", timeout=30)
        assert "✅ Done: Submitted · Admission" in card_text(card(app)[1]["blocks"])


def test_a_new_worker_runs_the_due_tick_of_a_killed_one_with_its_scheduler_lock_standing(
        app: SlackApp) -> None:
    """Issue 15.11. A `taubot worker` and its scheduler are SIGKILLed (a node lost, an OOM kill);
    their rq scheduler lock stands (rq alone keeps it 61 s). The replacement's mover needs no
    lock: it claims the due tick and runs it."""
    app.services.clock = SystemClock()
    with cluster(app, pending()) as emu:
        start_watch(app)
        wid = watch_id(CHANNEL, RUN)
        make_next_tick_due(app)
        with taubot_worker():
            wait_for_tick(app, wid, 1, "the first worker to run the first tick")
            scheduler_lock_holder(app)  # held when the worker dies: the lock stands after it
        assert app.redis.get(RQScheduler.get_locking_key(app.queue.name)) is not None  # the dead one's
        apply(emu, admitted())
        make_next_tick_due(app)
        with taubot_worker():
            wait_for_tick(app, wid, 2, "the new worker's mover to run the due tick", timeout=30)
        assert "✅ Done: Submitted · Admission" in card_text(card(app)[1]["blocks"])


def test_a_paced_card_holds_a_slot_before_its_next_tick_and_sends_then_without_asking_again(
        slack_app_factory: Callable[..., SlackApp], tmp_path: Path) -> None:
    """Cards that change together each reserve their own slot of the tier-3 budget, up to shortly
    before their next tick, instead of all retrying at the same instant and giving up after a few
    rounds with the budget unspent: the re-run at the slot sends at once, while the budget, as
    any other card sees it, is still full."""
    # 30 edits a minute, bursts of 3: one slot every 2 s once a burst is spent.
    app = slack_app_factory(identity_file=identity_file(tmp_path), slack_updates_per_minute=30,
                            slack_channel_burst=8)
    with cluster(app, pending()) as emu:
        start_watch(app)
        ts, _ = card(app)
        pacer = app.services.pacer
        assert pacer is not None
        app.clock.advance(5)  # the tick is due
        while pacer.try_acquire("chat.update", "C0ELSEWHERE") == 0:  # other cards spent the burst
            pass
        apply(emu, admitted())
        tick(app, seconds=0)
        assert updates(app) == []
        [retry] = scheduled(app)
        assert retry.endswith("-t0-d1")
        paced = Job.fetch(retry.removesuffix("-d1"), connection=app.redis).return_value()
        assert paced["card"] == "deferred" and paced["reserved"] is True and paced["retry_in"] == 2.0
        state = load_state(app.redis, watch_id(CHANNEL, RUN))
        assert state is not None and state.reserved and state.deferrals == 1
        app.clock.advance(2)  # the reserved slot's time; the budget is spent again by then
        assert pacer.try_acquire("chat.update", "C0ELSEWHERE") > 0
        tick(app, seconds=0)
        [update] = updates(app)
        assert update.params["ts"] == ts and "✅ Done: Submitted · Admission" in card_text(app.fake.message(
            CHANNEL, ts)["blocks"])
        state = load_state(app.redis, watch_id(CHANNEL, RUN))
        assert state is not None and state.tick == 1 and state.deferrals == 0 and not state.reserved


def test_a_tick_whose_slot_is_past_its_next_tick_does_not_wait_and_the_next_tick_sends(
        slack_app_factory: Callable[..., SlackApp], tmp_path: Path) -> None:
    """Issue 16: a tick never sleeps for the pace. When the workspace's tier-3 budget has no slot
    before the next tick would be due, this tick gives its card edit up at once (nothing held,
    nothing reserved) and the next tick keeps its time and sends the card once there is a slot."""
    app = slack_app_factory(identity_file=identity_file(tmp_path), slack_updates_per_minute=1)
    with cluster(app, pending()) as emu:
        start_watch(app)
        ts, _ = card(app)
        pacer = app.services.pacer
        assert pacer is not None
        while pacer.try_acquire("chat.update", "C0ELSEWHERE") == 0:  # another card took the budget
            pass
        apply(emu, admitted())
        tick(app)
        assert updates(app) == []  # paced: nothing sent, and the worker was not held
        [following] = scheduled(app)
        assert following.endswith("-t1")  # the next tick, on its own time: no re-run of this one
        paced = Job.fetch(following.removesuffix("-t1") + "-t0", connection=app.redis).return_value()
        assert paced["card"] == "deferred" and "retry_in" not in paced
        state = load_state(app.redis, watch_id(CHANNEL, RUN))
        assert state is not None and state.tick == 1 and state.deferrals == 0 and not state.reserved
        assert state.next_due is not None and (state.next_due - state.started_at).total_seconds() == 10
        app.clock.advance(55)  # the budget refills on the app's clock
        tick(app)
        [update] = updates(app)
        assert update.params["ts"] == ts
        assert "✅ Done: Submitted · Admission" in card_text(app.fake.message(CHANNEL, ts)["blocks"])


def test_stop_pressed_from_another_channel_or_message_stops_nothing(app: SlackApp) -> None:
    """Issue 26.6: the Stop button's value names the watch; a press naming it from another
    channel or on another message is refused, even by the requester, and the watch goes on."""
    with cluster(app, pending()):
        start_watch(app)
        ts, message = card(app)
        for response_id, channel, pressed in (("a", "C0OTHERCH", ts), ("b", CHANNEL, parent_ts(app))):
            body = block_action_body(STOP_WATCHING_ACTION, watch_id(CHANNEL, RUN), user_id=ALICE,
                                     channel_id=channel, message_ts=pressed, thread_ts=parent_ts(app),
                                     message=message, response_url=app.fake.response_url(response_id))
            assert app.post(body)[0] == 200
            app.work()
        refusals = [c.params for c in app.fake.calls_to("chat.postEphemeral")]
        assert [r["channel"] for r in refusals] == ["C0OTHERCH", CHANNEL]
        assert all("not pressed on the card taubot offered it on" in r["text"] for r in refusals)
        assert len(scheduled(app)) == 1 and has_stop_button(card(app)[1])
        assert not [r for r in replies(app) if "stopped watching" in r]
