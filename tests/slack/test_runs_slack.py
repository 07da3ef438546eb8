"""`/tau runs` and the App Home tab end to end (issue 37): signed requests to the real app, real
Redis and rq, the Kubernetes API emulator and the fake Slack (`views.publish` as Slack documents
it: docs.slack.dev/reference/methods/views.publish).

The `app_home_opened` event is the Events API's `event_callback` envelope
(docs.slack.dev/reference/events/app_home_opened: `{user, channel, tab, event_ts}`); a press on
the Home tab is a `block_actions` payload whose container is the view (no channel, no
response_url: docs.slack.dev/reference/interaction-payloads/block_actions-payload).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

from shell.demo_cluster import run_objects
from tests.fakes.kube_api import KubeEmulator, running_emulator
from tests.fakes.slack_signing import block_action_payload, signed_headers
from tests.fixtures.blocks import card_text
from tests.live.conftest import workspace_objects, write_descriptor
from workers.contracts.ids import HOME_REFRESH_ACTION, OPEN_STATUS_ACTION
from workers.diagnosis.linkage import SUBMITTED_BY_ANNOTATION
from workers.flows.home import PUBLISHES_PER_MINUTE
from workers.records import keys

from .conftest import ALICE, ALICE_IDENTITY, CHANNEL, SECRET, SlackApp
from .test_escalation import (
    app,  # noqa: F401 - the fixture: Alice and Bob mapped, owner routes
    press,
    status_card,
)

RUNS = (("l4-job-waiting-for-quota", "llama-ft-7b", "llama-ft-queued"),
        ("l5-job-oomkilled", "llama-ft-7b", "llama-ft-oom"),
        ("l7-rayjob-running", "ray-pretrain-13b", "ray-pretrain-live"))


def alices_runs() -> list[dict[str, Any]]:
    objects = []
    for example, run, name in RUNS:
        for obj in run_objects(example, run, name):
            if obj.get("kind") in ("Job", "RayJob") and obj["metadata"]["name"] == name:
                obj["metadata"].setdefault("annotations", {})[SUBMITTED_BY_ANNOTATION] = ALICE_IDENTITY["user"]
            objects.append(obj)
    return objects


@contextmanager
def cluster(slack: SlackApp) -> Iterator[KubeEmulator]:
    with running_emulator([*workspace_objects(), *alices_runs()]) as emu:
        write_descriptor(slack.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        yield emu


def home_opened(slack: SlackApp, user: str = ALICE) -> int:
    body = json.dumps({"token": "gIkuvaNzQIHg97ATvDxqgjtO", "team_id": "T0TAUGRID", "api_app_id": "A0TAUBOT",
                       "event": {"type": "app_home_opened", "user": user, "channel": "D0ALICEDM", "tab": "home",
                                 "event_ts": "1764498600.000100"},
                       "type": "event_callback", "event_id": f"Ev0{len(slack.fake.calls)}HOME",
                       "event_time": 1764498600})
    status, _, _ = slack.post(body, headers=signed_headers(SECRET, body, content_type="application/json"))
    return status


def home_press(action_id: str, value: str, view: dict[str, Any], user: str = ALICE) -> str:
    """A press on the Home tab: the container is the view, with no channel and no response_url."""
    payload = {"type": "block_actions", "user": {"id": user, "username": "alice", "team_id": "T0TAUGRID"},
               "api_app_id": "A0TAUBOT", "token": "gIkuvaNzQIHg97ATvDxqgjtO",
               "container": {"type": "view", "view_id": view["id"]}, "trigger_id": "1.2.3",
               "team": {"id": "T0TAUGRID", "domain": "taugrid"}, "view": view,
               "actions": [{"action_id": action_id, "block_id": "b", "type": "overflow",
                            "selected_option": {"text": {"type": "plain_text", "text": "x"}, "value": value},
                            "action_ts": "1764498601.000200"}]}
    return urlencode({"payload": json.dumps(payload)})


def overflow_options(blocks: list[dict[str, Any]]) -> list[str]:
    return [o["value"] for b in blocks if (b.get("accessory") or {}).get("action_id") == OPEN_STATUS_ACTION
            for o in b["accessory"]["options"]]


def test_tau_runs_posts_the_list_in_a_thread_and_a_menu_option_opens_the_status(slack_app: SlackApp) -> None:
    with cluster(slack_app) as emu:
        status, ack, seconds = slack_app.command("runs")
        assert status == 200 and seconds < 3 and "Listing your runs" in ack["text"]
        slack_app.work()
        [parent] = [p for p in slack_app.fake.calls_to("chat.postMessage") if not p.params.get("thread_ts")]
        [card] = slack_app.fake.thread(CHANNEL, parent.response["ts"])
        text = card_text(card["blocks"])
        assert "Your runs in vision" in text
        order = [text.index(f"`{name}`") for name in ("llama-ft-oom", "llama-ft-queued", "ray-pretrain-live")]
        assert order == sorted(order)  # stuck, then waiting, then running
        assert "*Kueue admission* (pending)" in text and "logs not read" in text
        assert "9 requests" in text
        for request in emu.requests:
            assert request.header_values("Impersonate-User") == [ALICE_IDENTITY["user"]], request.path
        assert overflow_options(card["blocks"]) == ["llama-ft-oom|vision", "llama-ft-queued|vision",
                                                    "ray-pretrain-live|vision"]
        slack_app.fake.clear()
        press = _overflow_press(CHANNEL, card, "llama-ft-oom|vision", slack_app.fake.response_url("press"))
        assert slack_app.post(press)[0] == 200
        slack_app.work()
        posts = [p for p in slack_app.fake.calls_to("chat.postMessage") if p.response.get("ok")]
        assert "`/tau status llama-ft-oom --workspace vision`" in posts[0].params["text"]
        assert "*First incomplete: Container start*" in card_text(posts[1].params["blocks"])


def _overflow_press(channel: str, card: dict[str, Any], value: str, response_url: str) -> str:
    """A press on the card's overflow menu: `block_action_payload`'s message press, with the
    overflow's `selected_option` in place of a button's value."""
    payload = block_action_payload(OPEN_STATUS_ACTION, "", channel_id=channel, message_ts=card["ts"],
                                   thread_ts=card.get("thread_ts"), response_url=response_url)
    payload["actions"][0] = {"action_id": OPEN_STATUS_ACTION, "block_id": "b", "type": "overflow",
                             "selected_option": {"text": {"type": "plain_text", "text": "x"}, "value": value},
                             "action_ts": "1764498601.000200"}
    return urlencode({"payload": json.dumps(payload)})


def test_app_home_publishes_the_list_once_a_minute_and_a_line_opens_its_status_in_a_dm(
        slack_app: SlackApp) -> None:
    with cluster(slack_app) as emu:
        assert home_opened(slack_app) == 200
        slack_app.work()
        view = slack_app.fake.home_view(ALICE)
        assert view is not None and view["type"] == "home"
        text = card_text(view["blocks"])
        assert "Your runs in vision" in text and "Your watches" in text and "Your recent escalations" in text
        assert len(overflow_options(view["blocks"])) == 3
        [refresh] = [e for b in view["blocks"] if b["type"] == "actions" for e in b["elements"]]
        assert refresh["action_id"] == HOME_REFRESH_ACTION
        reads = len(emu.requests)
        assert home_opened(slack_app) == 200  # a second visit within the minute: the cached view stands
        slack_app.work()
        assert len(slack_app.fake.calls_to("views.publish")) == 1 and len(emu.requests) == reads
        assert slack_app.post(home_press(HOME_REFRESH_ACTION, refresh["value"], view))[0] == 200
        slack_app.work()
        assert len(slack_app.fake.calls_to("views.publish")) == 2 and len(emu.requests) == 2 * reads
        slack_app.fake.clear()
        assert slack_app.post(home_press(OPEN_STATUS_ACTION, "llama-ft-queued|vision", view))[0] == 200
        slack_app.work()
        [opened] = slack_app.fake.calls_to("conversations.open")
        dm = opened.response["channel"]["id"]
        posts = [p for p in slack_app.fake.calls_to("chat.postMessage") if p.response.get("ok")]
        assert [p.params["channel"] for p in posts] == [dm, dm]
        assert "*First incomplete: Kueue admission*" in card_text(posts[1].params["blocks"])


def test_an_unmapped_users_home_tab_says_why(slack_app: SlackApp) -> None:
    with cluster(slack_app) as emu:
        assert home_opened(slack_app, user="U0STRANGER") == 200
        slack_app.work()
        view = slack_app.fake.home_view("U0STRANGER")
        assert view is not None and "cannot list your runs" in card_text(view["blocks"])
        assert emu.requests == []


def test_the_home_tab_lists_the_users_watch_and_escalation(app: SlackApp) -> None:  # noqa: F811
    """An escalation Alice pressed and a watch she started, as Redis holds them, on her Home tab."""
    with cluster(app):
        parent, card = status_card(app, "llama-ft-queued")
        press(app, parent, card)  # Escalate to queue-owner (the fixture's default route)
        assert app.command("status llama-ft-oom --watch")[0] == 200
        app.work()
        assert home_opened(app) == 200
        app.work()
        view = app.fake.home_view(ALICE)
        assert view is not None
        text = card_text(view["blocks"])
        watches = text[text.index("Your watches"):text.index("Your recent escalations")]
        assert "`llama-ft-oom` in vision" in watches
        escalations = text[text.index("Your recent escalations"):]
        assert "`llama-ft-queued` layer 4 → queue-owner" in escalations


def test_past_the_workspaces_tier_4_budget_a_visit_publishes_nothing(slack_app: SlackApp) -> None:
    minute = int(slack_app.clock.now().timestamp()) // 60
    with cluster(slack_app) as emu:
        slack_app.redis.set(keys.home_budget_key(minute), PUBLISHES_PER_MINUTE)
        assert home_opened(slack_app) == 200
        slack_app.work()
        assert slack_app.fake.calls_to("views.publish") == [] and emu.requests == []
        slack_app.redis.delete(keys.home_budget_key(minute))  # the next minute
        assert home_opened(slack_app) == 200  # not cached: the skipped visit published nothing
        slack_app.work()
        assert slack_app.fake.home_view(ALICE) is not None
