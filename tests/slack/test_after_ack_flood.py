"""A flood of one person's presses while Slack is slow (bot/after_ack.py): it never holds another
person's press, and what waits is bounded.

Slack slow is the fake Slack holding every `conversations.open`: each Home-tab *Status of <run>*
press opens the presser's DM before it queues the status, so its work holds a thread (in
production until the Web client's 10 s timeout). Before the pool was shared fairly, eight such
presses held all four threads and queued the rest — and everyone else's presses behind them.

Shapes: the Home tab's `block_actions` press and the Events API `app_home_opened` envelope
(tests/slack/test_runs_slack.py, docs.slack.dev).
"""

from __future__ import annotations

import json
import threading
import urllib.request

from bot.after_ack import MAX_WAITING, PER_PRESSER_RUNNING, PER_PRESSER_WAITING, AfterAck
from bot.commands import NoMapping
from bot.presser import Presser
from bot.serve import EVENTS_PATH
from tests.fakes.slack_signing import signed_headers
from workers.contracts.ids import OPEN_STATUS_ACTION
from workers.plumbing.metrics import PRESSES

from .conftest import ALICE, SECRET, SlackApp
from .test_runs_slack import home_press

BOB = "U034BOB"  # not in the test identity file: his Home tab says why (views.publish)


def send(url: str, body: str, content_type: str = "application/x-www-form-urlencoded") -> int:
    request = urllib.request.Request(url + EVENTS_PATH, data=body.encode(), method="POST",
                                     headers=signed_headers(SECRET, body, content_type=content_type))
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def home_opened(user: str) -> str:
    return json.dumps({"token": "gIkuvaNzQIHg97ATvDxqgjtO", "team_id": "T0TAUGRID", "api_app_id": "A0TAUBOT",
                       "event": {"type": "app_home_opened", "user": user, "channel": "D0BOBDM", "tab": "home",
                                 "event_ts": "1764498600.000100"},
                       "type": "event_callback", "event_id": "Ev0FLOODHOME", "event_time": 1764498600})


def test_one_pressers_flood_while_slack_is_slow_does_not_hold_another_persons_press(slack_app: SlackApp) -> None:
    slack_app.fake.hang_every("conversations.open")
    url = slack_app.server.url
    try:
        for _ in range(8):  # Alice presses Status of <run> on her Home tab, again and again
            assert send(url, home_press(OPEN_STATUS_ACTION, "llama-ft-7b|vision",
                                        {"id": "V0HOME", "type": "home"})) == 200
        assert send(url, home_opened(BOB), "application/json") == 200
        # Bob's Home tab is published while every one of Alice's presses still waits on Slack.
        [published] = slack_app.fake.wait_for("views.publish", timeout=8)
        assert published.params["user_id"] == BOB
        assert slack_app.fake.calls_to("conversations.open") == [] and slack_app.queue.count == 0
    finally:
        slack_app.fake.release_hang()
    # Slack answers again: none of Alice's eight was dropped, each queued its status.
    assert slack_app.front.after_ack.wait_idle(10)
    assert slack_app.queue.count == 8


def test_past_its_bounds_a_pressers_work_is_dropped_and_counted_and_others_still_run() -> None:
    pool, gate = AfterAck(threads=PER_PRESSER_RUNNING + 1), threading.Event()
    alice, bob = Presser(NoMapping(), ALICE), Presser(NoMapping(), BOB)
    ran: list[str] = []

    def work(presser: Presser) -> None:
        gate.wait(10)
        ran.append(presser.slack_user)

    dropped = PRESSES.labels("after-ack", "dropped")
    before = dropped._value.get()
    taken = [pool.submit(work, alice) for _ in range(PER_PRESSER_RUNNING + PER_PRESSER_WAITING + 3)]
    assert taken.count(True) == PER_PRESSER_RUNNING + PER_PRESSER_WAITING and taken[-3:] == [False] * 3
    assert dropped._value.get() == before + 3
    assert pool.submit(work, bob)  # another presser is not refused for Alice's flood …
    gate.set()
    assert pool.wait_idle(10)
    # … and everything taken ran, Bob's too
    assert ran.count(ALICE) == PER_PRESSER_RUNNING + PER_PRESSER_WAITING and ran.count(BOB) == 1
    assert MAX_WAITING >= PER_PRESSER_WAITING * 16  # room for many people's presses at once
