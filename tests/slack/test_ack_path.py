"""What a `/tau` ack costs the services behind it: the enqueue and nothing else (issue 36).

An ack is CPU-bound and a burst of commands shares its front end, so every call the ack path
makes is paid again by each command behind it. Counted where they land: Redis's own command
statistics (`INFO commandstats` of the suite's private server) and the fake Slack's log.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

import pytest
from redis import Redis

from bot.app import build_app
from bot.serve import EVENTS_PATH, BackgroundServer
from tests.fakes.slack_signing import signed_headers, slash_command_body
from workers.contracts.ids import OPEN_STATUS_ACTION

from .conftest import ALICE, CHANNEL, SECRET, SlackApp
from .test_runs_slack import home_press

# What rq's enqueue writes (the job's hash, the queue's registration, the push), all in one
# MULTI/EXEC: one round trip.
ENQUEUE = {"multi": 1, "hset": 2, "sadd": 1, "rpush": 1, "exec": 1}


def commands_run(conn: Redis) -> dict[str, int]:
    """How many times Redis has run each command so far (`INFO commandstats`), by name."""
    stats: dict[str, Any] = conn.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(fields["calls"]) for name, fields in stats.items()}


def ran_during(conn: Redis, before: dict[str, int]) -> dict[str, int]:
    """The commands Redis ran since ``before`` (the reading itself left out)."""
    after = commands_run(conn)
    ran = {name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name, 0)}
    ran.pop("info", None)
    return ran


@pytest.mark.parametrize("text", ["status llama-ft-7b", "status llama-ft-7b --watch", "logs llama-ft-7b",
                                  "workspace status vision"])
def test_a_command_ack_is_one_enqueue_and_no_slack_call(slack_app: SlackApp, text: str) -> None:
    before, slack_calls = commands_run(slack_app.redis), len(slack_app.fake.calls)
    status, ack, _ = slack_app.command(text)
    ran = ran_during(slack_app.redis, before)
    assert ran == ENQUEUE, json.dumps(ran)
    assert len(slack_app.fake.calls) == slack_calls
    assert status == 200 and ack["response_type"] == "ephemeral" and slack_app.queue.count == 1


@pytest.mark.parametrize("text", ["help", "help status", "status My_Run", "statsu llama-ft-7b"])
def test_help_and_usage_answers_touch_neither_redis_nor_slack(slack_app: SlackApp, text: str) -> None:
    before, slack_calls = commands_run(slack_app.redis), len(slack_app.fake.calls)
    status, ack, _ = slack_app.command(text)
    assert ran_during(slack_app.redis, before) == {}
    assert len(slack_app.fake.calls) == slack_calls
    assert status == 200 and ack["text"] and slack_app.queue.count == 0


def test_an_unmapped_user_is_refused_without_redis_or_slack(slack_app: SlackApp) -> None:
    before, slack_calls = commands_run(slack_app.redis), len(slack_app.fake.calls)
    _, ack, _ = slack_app.command("status llama-ft-7b", user_id="U0STRANGER")
    assert ran_during(slack_app.redis, before) == {}
    assert len(slack_app.fake.calls) == slack_calls
    assert "not mapped to a Kubernetes identity" in ack["text"] and slack_app.queue.count == 0


def test_another_slash_command_and_slacks_ssl_check_are_not_taken_for_tau(slack_app: SlackApp) -> None:
    """Only a signed `/tau` is acked as one: Slack's SSL check (a POST with `ssl_check=1`, the
    slash command's URL) is answered 200 and queues nothing; an app's other slash command is
    not this app's to run (Bolt: 404)."""
    other = slash_command_body(command="/deploy", text="status llama-ft-7b", user_id=ALICE)
    assert slack_app.post(other)[0] == 404
    ssl_check = "ssl_check=1&token=gIkuvaNzQIHg97ATvDxqgjtO"  # api.slack.com/interactivity/slash-commands
    status, body, _ = slack_app.post(ssl_check)
    assert status == 200 and b"Diagnosing" not in body
    assert slack_app.queue.count == 0


def test_a_tau_command_signed_for_another_body_is_refused(slack_app: SlackApp) -> None:
    """The signature covers the body: a `/tau` whose text was changed after signing is 401."""
    signed = slash_command_body(text="status llama-ft-7b", user_id=ALICE)
    changed = slash_command_body(text="status llama-ft-7b --watch", user_id=ALICE)
    status, _, _ = slack_app.post(changed, headers=signed_headers(SECRET, signed, timestamp=int(time.time())))
    assert status == 401 and slack_app.queue.count == 0


def post(url: str, body: str) -> dict[str, Any]:
    request = urllib.request.Request(url + EVENTS_PATH, data=body.encode(), headers=signed_headers(SECRET, body),
                                     method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
    return json.loads(raw) if raw else {}


def test_a_press_waiting_on_slack_does_not_hold_a_command_ack(slack_app: SlackApp) -> None:
    """*Status of <run>* pressed on the Home tab opens the presser's DM (`conversations.open`)
    before the press is answered; with Slack holding that call, the press holds its dispatch
    thread. A `/tau` sent meanwhile is acked with its own answer at once, not "still working"
    once its budget is spent: commands have a thread of their own (bot/serve.py SLASH_THREADS)."""
    front = build_app(slack_app.settings, queue=slack_app.queue)
    with BackgroundServer(front, threads=1) as server:  # one thread for presses: one press fills it
        slack_app.fake.hang_next("conversations.open")
        press = threading.Thread(target=post, args=(server.url, home_press(
            OPEN_STATUS_ACTION, "llama-ft-7b|vision", {"id": "V0HOME", "type": "home"})), daemon=True)
        press.start()
        try:
            assert slack_app.fake.hung.wait(10), "the press never reached conversations.open"
            ack = post(server.url, slash_command_body(text="status llama-ft-7b", user_id=ALICE,
                                                      channel_id=CHANNEL))
            queued = slack_app.queue.count  # the command's job; the press's is still held
        finally:
            slack_app.fake.release_hang()
            press.join(10)
    assert "Diagnosing `llama-ft-7b`" in ack["text"] and queued == 1


def test_a_press_is_answered_before_its_work_waits_on_slack(slack_app: SlackApp) -> None:
    """Slack reads nothing in a press's answer but waits at most 3 s for it: the press is answered
    first and its work — here the presser's DM opened (`conversations.open`, held at Slack) before
    the status it asked for is queued — runs after (bot/after_ack.py)."""
    slack_app.fake.hang_next("conversations.open")
    answer = post(slack_app.server.url, home_press(OPEN_STATUS_ACTION, "llama-ft-7b|vision",
                                                   {"id": "V0HOME", "type": "home"}))
    try:
        assert answer == {}  # answered (200, empty) …
        assert slack_app.fake.hung.wait(10)
        assert slack_app.queue.count == 0  # … while its work still waits on Slack
    finally:
        slack_app.fake.release_hang()
    assert slack_app.front.after_ack.wait_idle(10)
    [job] = slack_app.queue.jobs
    assert job.args[0]["command"]["run"] == "llama-ft-7b" and job.args[0]["channel"].startswith("D")
