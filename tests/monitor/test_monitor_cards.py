"""Issue 27 / SPEC §7 for the stall monitor's auto-posts: each stuck run's card fits one screen,
keeps fitting once muted, and its *Details* posts the rest in the post's own thread.

The same environment as `test_monitor.py` (the emulator's runs, the fake Slack, a real Redis);
the press jobs are run as a worker would, with the press's channel and message."""

from __future__ import annotations

import json
from typing import Any

from tests.monitor.test_monitor import VISION, Env, env  # noqa: F401 - `env` is the fixture
from workers.contracts.identity import Identity
from workers.contracts.ids import DETAILS_ACTION, MUTE_ACTION
from workers.contracts.requests import DetailsRequest, MuteRequest
from workers.contracts.signing import verify_value
from workers.flows.details import run_details
from workers.flows.mute import run_mute
from workers.render.cards import FIRST_SCREEN_CHARS, FIRST_SCREEN_LINES, card_texts, screen_size

ALICE = Identity(user="alice@example.com")


def blocks(call: Any) -> list[dict[str, Any]]:
    raw = call.params["blocks"]
    return raw if isinstance(raw, list) else json.loads(raw)


def text(call: Any) -> str:
    return "\n".join(card_texts(blocks(call)))


def button(call: Any, action_id: str) -> str:
    [value] = [e["value"] for b in blocks(call) if b["type"] == "actions" for e in b["elements"]
               if e["action_id"] == action_id]
    return value


def fits(call: Any) -> None:
    chars, lines = screen_size(blocks(call))
    assert chars <= FIRST_SCREEN_CHARS and lines <= FIRST_SCREEN_LINES, (chars, lines, text(call))


def test_auto_posts_of_stuck_runs_fit_one_screen_and_details_posts_the_rest(env: Env) -> None:  # noqa: F811
    env.sweep()
    singles = [p for p in env.posts(VISION) if "runs stalled" not in text(p)]
    pull = next(p for p in singles if "vit-pull" in text(p))
    crash = next(p for p in singles if "llama-crash" in text(p))
    for post, phase, owner in ((pull, "Image pull", "image-owner"), (crash, "Container start", "researcher")):
        fits(post)
        assert f"*First incomplete: {phase}*" in text(post) and f"*Owner:* {owner}" in text(post)
        assert "🚨 *Auto-posted by taubot*" in text(post)

    key = env.services.settings.button_key()
    where = {"channel": pull.params["channel"], "message_ts": pull.response["ts"]}
    details_id = verify_value(key, button(pull, DETAILS_ACTION))
    assert details_id is not None
    # Issue 26: a signed value replayed from another channel or on another message posts nothing.
    for elsewhere in ({**where, "channel": "C0OTHERCH"}, {**where, "message_ts": "1764464220.000100"}):
        press = DetailsRequest(record_id=details_id, user="U012ALICE", identity=ALICE, **elsewhere)
        assert run_details(env.services, press) == "elsewhere"
    assert env.fake.thread(VISION, pull.response["ts"]) == []
    press = DetailsRequest(record_id=details_id, user="U012ALICE", identity=ALICE, **where)
    assert run_details(env.services, press) == "posted"
    [reply] = env.fake.thread(VISION, pull.response["ts"])  # the auto-post's own thread
    more = "\n".join(card_texts(reply["blocks"]))
    assert more.startswith("📋 Details · vit-pull")
    assert "What layer 5 proves when done" in more and "What it does not prove" in more
    assert "*Evidence*" in more and "kubectl" not in more  # auto-posts never show operator hints

    mute_id = verify_value(key, button(pull, MUTE_ACTION))
    assert mute_id is not None
    assert run_mute(env.services, MuteRequest(record_id=mute_id, user="U012ALICE", identity=ALICE, **where),
                    now=env.clock.now()) == "muted"
    [edit] = [c for c in env.fake.calls_to("chat.update") if c.params["ts"] == pull.response["ts"]]
    fits(edit)
    assert "🔕 Auto-posts muted by @U012ALICE until" in text(edit)
    assert DETAILS_ACTION in json.dumps(blocks(edit))  # the edit keeps *Details*
