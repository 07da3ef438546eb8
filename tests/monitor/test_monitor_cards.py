"""Issue 27 / SPEC §7 for the stall monitor's auto-posts: each stuck run's card fits one screen,
keeps fitting once muted, and its *Details* posts the rest in the post's own thread.

The same environment as `test_monitor.py` (the emulator's runs, the fake Slack, a real Redis);
the press jobs are run as a worker would, with the press's channel and message."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from tests.fixtures import k8s
from tests.monitor.test_monitor import NOW, VISION, Env, env  # noqa: F401 - `env` is the fixture
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


# A termination message as a crashed trainer writes it to /dev/termination-log (kubelet copies it
# into lastState.terminated.message): its last lines, here an env dump with two credentials.
LEAKY_MESSAGE = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in main\n"
                 "RuntimeError: login failed with HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789\n"
                 "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
LEAKED = ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")


def test_a_crash_loops_termination_message_is_auto_posted_without_its_secrets(env: Env) -> None:  # noqa: F811
    """Issue 34.1: the monitor reads as the bot, so no one's RBAC gates this text; its post and
    *Details* carry the crash, never the credentials."""
    t0 = NOW - timedelta(minutes=45)
    j = k8s.job("llama-leak", suspend=False, active=1, t0=t0)
    pod = k8s.job_pod(j, t0=t0, node="gpu-node-2", phase="Running",
                      containers=[k8s.crash_loop(exit_code=1, reason="Error", message=LEAKY_MESSAGE)])
    for obj in (j, k8s.workload(j, state="admitted", t0=t0), pod):
        env.emu.upsert(obj)
    env.sweep()
    [post] = [p for p in env.posts(VISION) if "llama-leak" in text(p)]
    posted = json.dumps(post.params)
    assert "[redacted]" in posted or "exit 1" in posted.lower()
    assert [s for s in LEAKED if s in posted] == []
    key = env.services.settings.button_key()
    where = {"channel": post.params["channel"], "message_ts": post.response["ts"]}
    details_id = verify_value(key, button(post, DETAILS_ACTION))
    assert run_details(env.services, DetailsRequest(record_id=details_id, user="U012ALICE", identity=ALICE,
                                                    **where)) == "posted"
    thread = json.dumps(env.fake.thread(VISION, post.response["ts"]))
    assert "RuntimeError" in thread or "[redacted]" in thread
    assert [s for s in LEAKED if s in thread] == []
