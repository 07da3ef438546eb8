"""Every step a card advises works (issue 38, Build item 1).

Each bundled example (`workers/examples/*.json`, the dumps `bench/make_examples.py` writes) is
judged and rendered as Slack gets it — the first screen and *Details*, operator commands
included — and every command the text suggests is checked: a `/tau …` line parses with the
grammar the bot and the shell use, a `tau …` line is one of the TauGrid guide's own commands
(`../shared/seed/troubleshooting-by-lifecycle-layer.md`), and no template placeholder
(`<cluster-queue-name>`, `<N>`) is left for the reader to guess.
"""

from __future__ import annotations

import html
import re
from datetime import datetime
from pathlib import Path

import pytest

from bench.make_examples import EXAMPLES, NOW
from workers.collect.dumps import load_snapshot_file, with_queue_position
from workers.contracts.grammar import CommandError, parse
from workers.diagnosis.evaluate import evaluate
from workers.render.cards import build_phase_card, card_texts, render_details, render_phase_card

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "workers" / "examples"
JUDGED = datetime.fromisoformat(NOW.replace("Z", "+00:00"))
SUGGESTED = re.compile(r"`((?:/tau|tau|taubot|kubectl) [^`]+)`")
PLACEHOLDER = re.compile(r"<[A-Za-z][A-Za-z-]*>")
# The TauGrid CLI's commands as the troubleshooting guide names them (nothing else exists).
GUIDE_COMMANDS = ("tau run status", "tau run validate", "tau run get", "tau workspace connection",
                  "tau workspace status", "tau workspace check", "tau cluster validate nodes",
                  "tau cluster validate topology", "tau logs", "taugrid-portal experiment status",
                  "taugrid-portal experiment list")


def card_suggestions(file: str, run: str) -> list[str]:
    d = with_queue_position(evaluate(load_snapshot_file(EXAMPLES_DIR / file), run, JUDGED))
    context = build_phase_card(d, workspace="vision", operator_hints_allowed=True)
    texts = card_texts(render_phase_card(context).blocks) + card_texts(render_details(context.details).blocks)
    found: list[str] = []
    for text in texts:
        plain = html.unescape(text)
        found += SUGGESTED.findall(plain)
        for block in re.findall(r"```\n?(.*?)```", plain, re.DOTALL):  # operator commands: one a line
            found += [line.strip() for line in block.splitlines() if line.strip().startswith("kubectl ")]
    return found


@pytest.mark.parametrize(("file", "run"), [(ex.file, ex.run) for ex, _ in EXAMPLES],
                         ids=[ex.file for ex, _ in EXAMPLES])
def test_every_suggested_command_runs_as_shown(file: str, run: str) -> None:
    suggestions = card_suggestions(file, run)
    for line in suggestions:
        assert not PLACEHOLDER.search(line), f"{file}: a placeholder is left in {line!r}"
        for command in (part.strip() for part in line.split(" · ")):
            if command.startswith("/tau "):
                try:
                    parse(command.removeprefix("/tau "))
                except CommandError as exc:
                    pytest.fail(f"{file}: the card suggests {command!r}, which /tau refuses: {exc}")
            elif command.startswith(("tau ", "taugrid-portal ")):
                assert command.startswith(GUIDE_COMMANDS), f"{file}: {command!r} is no TauGrid command"


def test_the_crash_card_suggests_the_previous_log() -> None:
    """The crash-looping head's card names the log command with `--previous`, and it parses."""
    suggestions = card_suggestions("l5-rayjob-head-crashloop.json", "ray-pretrain-13b")
    assert "/tau logs ray-pretrain-13b --previous" in suggestions


def test_a_run_not_found_points_at_a_command_that_exists() -> None:
    suggestions = card_suggestions("l3-job-not-found.json", "llama-ft-7b")
    assert "/tau runs" in " ".join(suggestions) and "tau run list" not in " ".join(suggestions)


@pytest.mark.parametrize("selector", [
    "kubernetes.io/hostname in (aks-a100-38141759-vmss000008,aks-a100-38141759-vmss000009)",
    "kubernetes.io/hostname in (a, b)",
    "taugrid.io/gpu-class=a100,kubernetes.io/hostname notin (bad-node)",
    "taugrid.io/gpu-class!=v100",
    "!node.kubernetes.io/unschedulable",
])
def test_set_based_selectors_parse(selector: str) -> None:
    """The node-validation button's line (`--selector kubernetes.io/hostname in (…)`) as typed."""
    command = parse(f"cluster validate nodes --selector {selector} --min-healthy 1")
    assert command.selector == selector and command.min_healthy == 1


@pytest.mark.parametrize("selector", ["a in b", "a=b;rm", "a in (b", "in (a)"])
def test_a_malformed_selector_is_refused(selector: str) -> None:
    with pytest.raises(CommandError, match="invalid selector|unexpected argument"):
        parse(f"cluster validate nodes --selector {selector}")
