"""`/tau status` end to end: signed command → ack → rq job → emulator → parent + threaded card.

Real HTTP to the app, real Redis, a real rq `SimpleWorker`, the Kubernetes API
emulator, and the fake Slack. Assertions read the card from the blocks the
fake Slack recorded for `chat.postMessage`, and the impersonation headers
from the requests the emulator recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from rq import Worker
from rq.command import send_kill_horse_command
from rq.job import Job
from rq.registry import FailedJobRegistry, ScheduledJobRegistry
from rq.scheduler import RQScheduler

from tests.fakes.kube_api import KubeEmulator, running_emulator
from tests.fixtures.blocks import card_text
from tests.live.conftest import workspace_objects, write_descriptor

from .conftest import ALICE, ALICE_IDENTITY, CHANNEL, SlackApp, example_objects, taubot_worker
from .details import details_of


@contextmanager
def cluster(slack_app: SlackApp, objects: list[dict[str, Any]]) -> Iterator[KubeEmulator]:
    """The emulator seeded with the workspace and ``objects``, and the descriptor pointing at it."""
    with running_emulator([*workspace_objects(), *objects]) as emu:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        yield emu



def parent_and_card(slack_app: SlackApp) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parent message in the channel and the one card in its thread, as Slack stored them."""
    posts = [p for p in slack_app.fake.calls_to("chat.postMessage") if p.response.get("ok")]
    parents = [p for p in posts if not p.params.get("thread_ts")]
    assert len(parents) == 1, [p.params for p in posts]
    parent_ts = parents[0].response["ts"]
    replies = slack_app.fake.thread(CHANNEL, parent_ts)
    assert len(replies) == 1, replies
    return slack_app.fake.message(CHANNEL, parent_ts), replies[0]


def assert_impersonated_alice(emu: KubeEmulator) -> None:
    assert emu.requests, "the worker never reached the cluster"
    for request in emu.requests:
        assert request.header_values("Impersonate-User") == [ALICE_IDENTITY["user"]], request.path
        assert request.header_values("Impersonate-Group") == ALICE_IDENTITY["groups"], request.path


def test_job_stuck_in_admission(slack_app: SlackApp) -> None:
    with cluster(slack_app, example_objects("l4-job-waiting-for-quota")) as emu:
        status, ack, seconds = slack_app.command("status llama-ft-7b")
        assert status == 200 and seconds < 3
        assert ack["response_type"] == "ephemeral" and "Diagnosing `llama-ft-7b`" in ack["text"]
        slack_app.work()

        parent, card = parent_and_card(slack_app)
        assert f"<@{ALICE}>" in parent["text"] and "`/tau status llama-ft-7b`" in parent["text"]
        assert card["thread_ts"] == parent["ts"]
        text = card_text(card["blocks"])
        assert "🔎 llama-ft-7b · Job" in text
        assert "workspace `vision`" in text
        assert "✅ Done: Submitted" in text
        assert "⏳ *First incomplete: Kueue admission* (pending) — 0/1 admitted queue=team-a reason=Pending" in text
        assert "layer 4: Queue admission and quota" in text
        assert "Waiting behind it: ⏳ Scheduling" in text
        # When it may start (issue 35, SPEC §5b): clip-eval-2's 4 h limit frees its 16 GPUs by 13:00. It
        # takes the first screen's room from Kueue's message, which moves to *Details*.
        assert "*Start:* at the latest 13:00 UTC (the holders' time limits)" in text
        assert "*Owner:* queue-owner" in text
        assert "*Next:* The queue has no free quota" in text
        assert "`tau run status llama-ft-7b`" in text
        # Moved to *Details* (issue 27): the full tree, what layer 4 does not prove, and — Alice
        # passes the cluster-wide access review — the operator commands.
        more = details_of(slack_app, card)
        assert "✅ *Submitted*" in more and "⏳ *Pod scheduling* — no pods yet" in more
        assert "⏳ *Kueue admission* — 0/1 admitted queue=team-a reason=Pending" in more
        assert "insufficient unused quota for nvidia.com/gpu" in more
        assert "admitted is not running" in more
        assert "kubectl get workload -n team-vision" in more
        assert_impersonated_alice(emu)
        reviews = [r for r in emu.requests if r.path.endswith("/selfsubjectaccessreviews")]
        assert any(r.body["spec"]["resourceAttributes"] == {
            "verb": "list", "resource": "workloads", "group": "kueue.x-k8s.io"} for r in reviews)


def test_crash_looping_rayjob_with_hostile_pod_message(slack_app: SlackApp) -> None:
    """The crash message of the head pod carries mentions and a link: the card shows them inert."""
    hostile = "boom <!channel> <@U123> <https://evil.example|click here> @here"
    objects = json.loads(json.dumps(example_objects("l5-rayjob-head-crashloop")).replace(
        "No module named 'flash_attn'", hostile.replace('"', '\\"')))
    with cluster(slack_app, objects) as emu:
        assert slack_app.command("status ray-pretrain-13b --workspace vision --run-profile")[0] == 200
        slack_app.work()

        _, card = parent_and_card(slack_app)
        text = card_text(card["blocks"])
        assert "🔎 ray-pretrain-13b · RayJob" in text
        assert "✅ Done: Submitted · Admission" in text
        assert "⚠️ *First incomplete: RayCluster* (warning)" in text and "layer 5:" in text
        assert "⚠️ Start" in text
        assert "CrashLoopBackOff" in text
        assert "*Owner:* researcher" in text and "*Transient:* no" in text
        assert "/tau logs ray-pretrain-13b --previous" in text
        # No dcgm-exporter runs in this emulated cluster: the profile says so, never a zero.
        assert "GPU run profile in *Details*" in text and "`gpu_utilization`: unavailable" in text
        more = details_of(slack_app, card)  # moved to *Details* (issue 27)
        assert "⚠️ *RayCluster*" in more and "◀ *first incomplete*" in more
        assert "⚠️ *Container start*" in more and "✅ *Kueue admission*" in more
        assert "a Running pod means containers started, not progress" in more
        assert "*GPU run profile*" in more and "`cuda_compute_process`: unavailable" in more
        raw = json.dumps(card["blocks"], ensure_ascii=False) + card["text"]
        for message in slack_app.fake.thread(CHANNEL, card["thread_ts"]):  # the card and its Details
            raw += json.dumps(message.get("blocks"), ensure_ascii=False) + str(message.get("text"))
        for markup in ("<!channel>", "<@U123>", "<https://", "<!here>"):
            assert markup not in raw
        assert "&lt;!channel&gt;" in more and "@\u200bhere" in more  # shown, inert, in full in Details
        assert_impersonated_alice(emu)


def test_unknown_workspace_is_a_layer_one_card_not_a_failure(slack_app: SlackApp) -> None:
    with cluster(slack_app, []):
        slack_app.command("status r --workspace nosuch")
        slack_app.work()
        _, card = parent_and_card(slack_app)
        text = card_text(card["blocks"])
        assert "*First incomplete: Workspace connection*" in text
        assert 'no workspace connection named "nosuch"' in text
        assert "*Owner:* researcher" in text
        assert "Layers 2–8 were not checked" in text


def test_failing_job_posts_error_card_in_the_thread(slack_app_factory: Callable[..., SlackApp]) -> None:
    """A diagnosis slower than the job timeout: rq kills the job, the failure callback tells the user
    at once — retries are for outages, and a timeout would only repeat."""
    slack_app = slack_app_factory(job_timeout_seconds=1, job_retries=2)
    with cluster(slack_app, example_objects("l4-job-waiting-for-quota")) as emu:
        emu.latency = 3
        slack_app.command("status llama-ft-7b")
        job_id = slack_app.queue.job_ids[0]
        slack_app.work()

        _, card = parent_and_card(slack_app)
        text = card_text(card["blocks"])
        assert "taubot could not finish this command" in text
        assert "`/tau status llama-ft-7b` failed after 1 attempt." in text
        assert "longer than the job timeout" in text
        assert job_id in text
        assert job_id in FailedJobRegistry(queue=slack_app.queue).get_job_ids()
        assert job_id not in ScheduledJobRegistry(queue=slack_app.queue).get_job_ids()


def run_due_retry(slack_app: SlackApp, job_id: str) -> None:
    """Make the job's scheduled retry due (as time would) and run it."""
    registry = ScheduledJobRegistry(queue=slack_app.queue)
    assert job_id in registry.get_job_ids()
    registry.schedule(Job.fetch(job_id, connection=slack_app.redis), datetime(2000, 1, 1, tzinfo=UTC))
    slack_app.work(with_scheduler=True)


def test_slack_unreachable_for_minutes_loses_no_command(slack_app_factory: Callable[..., SlackApp]) -> None:
    """Issue 15.13. Slack refuses connections through four attempts (2 + 5 + 15 s of backoff, past
    the ~7 s after which the command used to be dropped); it comes back and the fifth attempt
    answers, once."""
    slack_app = slack_app_factory(job_retries=7)
    with cluster(slack_app, example_objects("l4-job-waiting-for-quota")):
        slack_app.command("status llama-ft-7b", response_id="r1")
        job_id = slack_app.queue.job_ids[0]
        job = Job.fetch(job_id, connection=slack_app.redis)
        assert job.retry_intervals == [2, 5, 15, 30, 60, 60, 60]  # 232 s before giving up
        slack_app.fake.down()
        slack_app.work()
        for _ in range(3):
            run_due_retry(slack_app, job_id)
        assert Job.fetch(job_id, connection=slack_app.redis).retries_left == 3
        slack_app.fake.up()
        run_due_retry(slack_app, job_id)
        _, card = parent_and_card(slack_app)
        assert "*First incomplete: Kueue admission*" in card_text(card["blocks"])
        assert slack_app.fake.responses("r1") == []


def test_giving_up_on_slack_tells_the_user_through_response_url(
    slack_app_factory: Callable[..., SlackApp],
) -> None:
    """Every attempt meets a Slack error: after the last retry the user hears it privately."""
    slack_app = slack_app_factory(job_retries=3)
    with cluster(slack_app, []):
        slack_app.fake.fail_next("chat.postMessage", error="fatal_error", times=8)
        slack_app.command("status r", response_id="r1")
        job_id = slack_app.queue.job_ids[0]
        slack_app.work()
        for _ in range(3):
            assert slack_app.fake.responses("r1") == []  # nobody told while a retry is pending
            run_due_retry(slack_app, job_id)
        [reply] = slack_app.fake.responses("r1")
        text = card_text(reply["blocks"])
        assert "`/tau status r` failed after 4 attempts." in text
        assert "Slack API error: fatal_error" in text
        assert job_id in FailedJobRegistry(queue=slack_app.queue).get_job_ids()


def test_retry_after_slack_failure_posts_once_and_no_error_card(
    slack_app_factory: Callable[..., SlackApp],
) -> None:
    """Slack refuses the first post; the job is retried (rq Retry with interval) and then succeeds."""
    slack_app = slack_app_factory(job_retries=2)  # rq: the first of 2 retries waits intervals[0]
    with cluster(slack_app, example_objects("l4-job-waiting-for-quota")):
        slack_app.fake.fail_next("chat.postMessage", error="fatal_error")
        slack_app.command("status llama-ft-7b")
        job_id = slack_app.queue.job_ids[0]
        assert Job.fetch(job_id, connection=slack_app.redis).retry_intervals == [2, 5]  # first waits first
        slack_app.work()
        assert job_id in ScheduledJobRegistry(queue=slack_app.queue).get_job_ids()
        assert not slack_app.fake.messages(CHANNEL)  # no error card while a retry is pending
        # The retry waits its interval in rq's ScheduledJobRegistry: make it due, as time would.
        registry = ScheduledJobRegistry(queue=slack_app.queue)
        registry.schedule(Job.fetch(job_id, connection=slack_app.redis), datetime(2000, 1, 1, tzinfo=UTC))
        slack_app.work(with_scheduler=True)
        _, card = parent_and_card(slack_app)
        assert "*First incomplete: Kueue admission*" in card_text(card["blocks"])
        assert len(slack_app.fake.messages(CHANNEL)) == 2


def test_workspace_connection_end_to_end(slack_app: SlackApp) -> None:
    with cluster(slack_app, []) as emu:
        slack_app.command("workspace connection")
        slack_app.work()
        _, card = parent_and_card(slack_app)
        text = card_text(card["blocks"])
        assert "Workspace connection · vision · layer 1 ✅ passed" in text
        assert "✅ *may list workloads*" in text
        assert_impersonated_alice(emu)


def test_bot_not_in_channel_answers_privately(slack_app: SlackApp) -> None:
    """Slack refuses the parent (`not_in_channel`): no retry can fix that, so the card goes to
    the requester through response_url, with a note on how to get threaded answers."""
    with cluster(slack_app, example_objects("l4-job-waiting-for-quota")):
        slack_app.fake.fail_next("chat.postMessage", error="not_in_channel")
        slack_app.command("status llama-ft-7b", response_id="private")
        slack_app.work()
        [reply] = slack_app.fake.responses("private")
        assert reply["response_type"] == "ephemeral"
        text = card_text(reply["blocks"])
        assert "*First incomplete: Kueue admission*" in text
        assert "taubot cannot post in this channel" in text
        assert not slack_app.fake.messages(CHANNEL)


def test_failure_when_slack_refuses_the_channel_too_reaches_response_url(
    slack_app_factory: Callable[..., SlackApp],
) -> None:
    """The job fails (Slack error on the parent) and the error card cannot go to the channel
    either: it reaches the user through the command's response_url."""
    slack_app = slack_app_factory()
    with cluster(slack_app, []):
        slack_app.fake.fail_next("chat.postMessage", error="fatal_error", times=2)
        slack_app.command("status r", response_id="r1")
        slack_app.work()
        [reply] = slack_app.fake.responses("r1")
        assert reply["response_type"] == "ephemeral"
        text = card_text(reply["blocks"])
        assert "taubot could not finish this command" in text
        assert "Slack API error: fatal_error" in text


def test_killed_work_horse_retry_answers_under_the_one_parent(
    slack_app_factory: Callable[..., SlackApp],
) -> None:
    """Issue 15.12. `taubot worker` (forking rq Worker) posts the parent, then its first cluster
    read hangs and rq's `kill-horse` command SIGKILLs the work horse. The worker retries the job
    from its own copy (whose meta predates the parent), and the retry must find the parent in
    Redis: one parent, the card in its thread, no error card."""
    slack_app = slack_app_factory(job_retries=2)
    slack_app.redis.delete(RQScheduler.get_locking_key(slack_app.queue.name))
    with cluster(slack_app, example_objects("l4-job-waiting-for-quota")) as emu:
        emu.hang(1)
        slack_app.command("status llama-ft-7b")
        with taubot_worker():
            assert emu.hung.wait(60), "the worker never reached the cluster"
            parents = [c for c in slack_app.fake.calls_to("chat.postMessage")
                       if not c.params.get("thread_ts")]
            assert len(parents) == 1  # posted before the read that hangs
            busy = [w for w in Worker.all(connection=slack_app.redis) if w.get_state() == "busy"]
            assert len(busy) == 1
            send_kill_horse_command(slack_app.redis, busy[0].name)
            slack_app.fake.wait_for("chat.postMessage", count=2, timeout=60)
        _, card = parent_and_card(slack_app)
        assert "*First incomplete: Kueue admission*" in card_text(card["blocks"])
        assert len(slack_app.fake.messages(CHANNEL)) == 2
