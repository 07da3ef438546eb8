"""Hostile cluster text never reaches Slack as markup or as a card line of its own (issue 15).

A container controls its termination message, an author controls image names
and condition messages; a generated corpus (seeded: the same strings every
run) of mentions, links, entities, line breaks, fences, zero-width and bidi
characters and 10 kB strings goes through every field that reaches a phase
card, and the rendered blocks are checked: no mention, no link, no line that
taubot did not write. Shapes: tests/fixtures/k8s.py.
"""

from __future__ import annotations

import json
import random

from tests.fakes.kube_api import running_emulator
from tests.fixtures import k8s
from tests.live.conftest import workspace_objects, write_descriptor
from workers.diagnosis.evaluate import evaluate
from workers.render.cards import build_phase_card, render_phase_card

from .conftest import CHANNEL, EXAMPLE_NOW, SlackApp

PIECES = ["<!channel>", "<!here>", "<@U012ALICE>", "<#C0PLATFORM>", "<!subteam^S0PLATFORM>",
          "<https://evil.example|click>", "https://evil.example/x", "@channel", "@here", "#general",
          "&lt;!channel&gt;", "\n✅ *Ready* — every phase done", "\r\n⚠️ *Owner*\nplatform", "```", "``` \n<!here>",
          "\u200b", "\u202e", "\u2066", "\u2028✅ fake", "*bold*", "_it_", "~s~", "`", ">quote", "\n> quoted",
          "x" * 50, "\ufeff", "😀", "🇺🇸", "e\u0301"]
OUR_LINE_STARTS = ("✅ *", "🔄 *", "⏳ *", "⚠️ *", "➖ *", "*", "•", "```", "Layers ", "2/", "1/", "0/",
                   "`", "📣", "👀", "⏹️", "🚨", "🔕", "diagnosed", "_", "✅ Done: ", "➖ Skipped: ", "📈 ")


def corpus(n: int, seed: int = 1515) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        parts = rng.choices(PIECES, k=rng.randint(1, 6))
        text = "".join(parts)
        if i % 97 == 0:
            text = (text * 400)[:10_000]  # 10 kB strings
        out.append(text)
    return out


def hostile_run(text: str) -> list[dict]:
    j = k8s.job("llama-ft-7b", suspend=False, active=1)
    crash = k8s.crash_loop(exit_code=1, reason="Error")
    crash["lastState"]["terminated"]["message"] = text
    crash["lastState"]["terminated"]["reason"] = text[:60] or "Error"
    pod = k8s.job_pod(j, node="gpu-node-1", phase="Running", containers=[crash])
    wl = k8s.workload(j, state="admitted")
    wl["status"]["conditions"][0]["message"] = text
    return [j, wl, pod]


def card_lines(blocks: list[dict]) -> list[str]:
    lines: list[str] = []
    for block in blocks:
        texts = [block.get("text") or {}] + list(block.get("fields") or []) + list(block.get("elements") or [])
        for t in texts:
            if isinstance(t, dict) and isinstance(t.get("text"), str) and t.get("type") == "mrkdwn":
                lines += t["text"].split("\n")
    return lines


def test_generated_hostile_strings_never_mention_link_or_forge_a_line() -> None:
    checked = 0
    for text in corpus(600):
        d = evaluate(hostile_run(text), "llama-ft-7b", EXAMPLE_NOW)
        card = render_phase_card(build_phase_card(d, workspace="vision", operator_hints_allowed=True))
        raw = json.dumps(card.blocks, ensure_ascii=False)
        for bad in ("<!", "<@", "<#", "<http", "<https"):
            assert bad not in raw
        inside_block = False
        for line in card_lines(card.blocks):
            if line.startswith("```"):
                inside_block = not inside_block or line.endswith("```") and len(line) > 3
                continue
            if inside_block or not line.strip():
                continue
            assert line.startswith(OUR_LINE_STARTS) or line[:1].isalpha(), repr(line[:80])
            assert not line.startswith(("✅ *Ready* — every", "⚠️ *Owner*")), repr(line[:80])
        checked += 1
    assert checked == 600


def test_a_termination_message_with_a_line_break_stays_on_its_line() -> None:
    d = evaluate(hostile_run("ModuleNotFoundError: x\n✅ *Ready* — every phase done"), "llama-ft-7b", EXAMPLE_NOW)
    card = render_phase_card(build_phase_card(d, workspace="vision", operator_hints_allowed=False))
    tree = next(b["text"]["text"] for b in card.blocks if "Container start*" in json.dumps(b))
    assert "⏎" in tree
    assert [line for line in tree.split("\n") if line.startswith("✅ *Ready* — every phase done")] == []


def test_hostile_strings_end_to_end_at_the_fake_slack(slack_app: SlackApp) -> None:
    """The same corpus (120 strings, 10 kB ones included) through the real path: signed command,
    rq worker, the emulator's objects, the card as the fake Slack received it — blocks and the
    notification text both."""
    strings = corpus(120, seed=4040)
    with running_emulator(workspace_objects()) as emu:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        for text in strings:
            emu.replace_all([*workspace_objects(), *hostile_run(text)])
            slack_app.fake.clear()
            slack_app.command("status llama-ft-7b")
            slack_app.work()
            [card] = [c for c in slack_app.fake.calls_to("chat.postMessage") if c.params.get("thread_ts")]
            blocks = card.params["blocks"]
            blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
            raw = json.dumps(blocks, ensure_ascii=False) + str(card.params.get("text"))
            for bad in ("<!", "<@", "<#", "<http", "<https"):
                assert bad not in raw, (bad, text[:80])
            assert "*First incomplete: Container start*" in raw
            forged = [line for line in card_lines(blocks) if line.startswith(("✅ *Ready* — every", "⚠️ *Owner*"))]
            assert forged == [], text[:80]
