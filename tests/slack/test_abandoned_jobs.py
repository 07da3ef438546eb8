"""Issue 26.8: the whole `taubot worker` killed mid-job (its pod SIGKILLed, its node gone).

rq finds such a job when another worker's maintenance sees its heartbeat entry
expired (`StartedJobRegistry.cleanup`), and calls the failure callback with
`AbandonedJobError`. A plain status is read-only and finds the parent it
already posted, so it is run once more; any other job keeps the error card.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from rq.exceptions import AbandonedJobError
from rq.job import Job
from rq.registry import StartedJobRegistry

from workers.jobs import META_ABANDONED_RERUN, on_job_failure
from workers.rq_worker import HEARTBEAT_MARGIN_SECONDS, JOB_MONITORING_INTERVAL_SECONDS
from workers.services import install

from .conftest import CHANNEL, SlackApp, example_objects, taubot_worker
from .test_cards import card_text
from .test_end_to_end import cluster, parent_and_card


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc: the worker's scheduler, and its work horse, which
    rq moves to a process group of its own (so killing the worker's group misses it)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def kill_whole_worker(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker, its scheduler and its horse at once, as the kubelet does to a pod."""
    below = descendants(proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in below:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_status_whose_whole_worker_was_killed_is_run_once_more_under_its_parent(
        slack_app_factory: Callable[..., SlackApp]) -> None:
    slack_app = slack_app_factory(job_retries=2)
    with cluster(slack_app, example_objects("l4-job-waiting-for-quota")) as emu:
        emu.hang(1)
        slack_app.command("status llama-ft-7b")
        [job_id] = slack_app.queue.job_ids
        with taubot_worker() as worker:
            assert emu.hung.wait(60), "the worker never reached the cluster"
            kill_whole_worker(worker)
        job = Job.fetch(job_id, connection=slack_app.redis)
        assert job.get_status() == "started" and job.last_heartbeat is not None  # nobody will finish it
        registry = StartedJobRegistry(queue=slack_app.queue)
        [(_, expires)] = slack_app.redis.zrange(registry.key, 0, -1, withscores=True)
        # Found within one beat plus the margin of the horse's last beat (rq's default: 90 s).
        bound = JOB_MONITORING_INTERVAL_SECONDS + HEARTBEAT_MARGIN_SECONDS
        assert expires - job.last_heartbeat.timestamp() <= bound + 1
        # What a surviving worker's maintenance runs once that moment has come (rq's own cleanup,
        # given the moment instead of waiting for it).
        install(slack_app.services)
        registry.cleanup(timestamp=expires + 1)
        assert Job.fetch(job_id, connection=slack_app.redis).meta[META_ABANDONED_RERUN] is True
        with taubot_worker():
            slack_app.fake.wait_for("chat.postMessage", count=2, timeout=60)
    parent, card = parent_and_card(slack_app)  # one parent, the card in its thread
    assert "*First incomplete: Kueue admission*" in card_text(card["blocks"])
    assert len(slack_app.fake.messages(CHANNEL)) == 2  # no error card


def abandoned(slack_app: SlackApp, job: Job) -> None:
    """rq's callback for an abandoned job, as `StartedJobRegistry.cleanup` calls it."""
    on_job_failure(job, slack_app.redis, AbandonedJobError, AbandonedJobError(), None)


def error_cards(slack_app: SlackApp) -> list[str]:
    return [card_text(c.params["blocks"]) for c in slack_app.fake.calls_to("chat.postMessage")
            if c.params.get("blocks") and "could not finish this command" in card_text(c.params["blocks"])]


def test_a_status_is_run_again_only_once_and_other_jobs_keep_the_error_card(
        slack_app_factory: Callable[..., SlackApp]) -> None:
    slack_app = slack_app_factory(job_retries=2)
    install(slack_app.services)
    for text in ("status llama-ft-7b", "status llama-ft-7b --watch", "logs llama-ft-7b"):
        slack_app.command(text)
    status, watch, logs = (Job.fetch(i, connection=slack_app.redis) for i in slack_app.queue.job_ids)
    abandoned(slack_app, status)
    assert status.retries_left and error_cards(slack_app) == []  # rq retries it after the callback
    status.retries_left -= 1  # as rq's retry does
    abandoned(slack_app, status)  # abandoned again: the card this time
    abandoned(slack_app, watch)
    abandoned(slack_app, logs)
    cards = error_cards(slack_app)
    assert len(cards) == 3 and all("AbandonedJobError" in c for c in cards)
    assert (status.retries_left, watch.retries_left, logs.retries_left) == (0, 0, 0)
