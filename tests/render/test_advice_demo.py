"""Every step a demo card advises works, end to end (issue 38, Build item 1: "and in the demo").

`test_advice.py` runs each suggestion of every bundled example through the grammar; here each
demo run's card and its *Details* are produced by the demo shell itself (in process, the path
`taubot shell --demo` runs: grammar → identity → job → live collection from the in-process
cluster → render → terminal), and every `/tau …` command they suggest — and every button that
runs a check (*Validate these nodes*) — is then typed or pressed in that shell. None may be a
dead end: no source that answered nothing, no validation that did not finish, no missing
profile, no usage error, no failed job.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from shell.demo import newest_button
from shell.demo_cluster import MISSING_RUN, RUNS, WATCHED
from tests.fixtures.demo_shell import DemoShell, demo_shell
from workers.contracts.ids import DETAILS_ACTION

SUGGESTED = re.compile(r"`(/tau [^`]+)`")
CHECK_BUTTON = re.compile(r"\[(\d+)\] 🩺 Validate (?:this node|these \d+ nodes)")
# A usage error or a refusal is an ephemeral "⚠️" line; a failed job is the shell's "could not finish".
DEAD_ENDS = ("No source answered", "did not finish in time", "not validated", "no ready TauCluster profile",
             "(only you) ⚠️", "could not finish", "internal error")


@pytest.fixture(scope="module")
def demo() -> Iterator[DemoShell]:
    with demo_shell() as shell:
        yield shell


def advice(card: str) -> list[str]:
    """The `/tau …` commands a card's text suggests, one per command (a line may join several)."""
    return sorted({part.strip() for found in SUGGESTED.findall(card) for part in found.split(" · ")
                   if part.strip().startswith("/tau ")})


@pytest.mark.parametrize("run", [r.name for r in RUNS] + [MISSING_RUN.name, WATCHED])
def test_every_command_a_demo_card_advises_answers(demo: DemoShell, run: str) -> None:
    card = demo.answer(f"/tau status {run}")
    card += demo.answer(str(newest_button(demo.shell, DETAILS_ACTION)))
    assert f"🔎 {run} · " in card, card
    steps = [(command, command) for command in advice(card)]
    steps += [(f"[{n}] Validate", n) for n in sorted(set(CHECK_BUTTON.findall(card)))]
    assert steps, f"the {run} card advises nothing to type or press:\n{card}"
    for what, typed in steps:
        answer = demo.answer(typed)
        dead = [marker for marker in DEAD_ENDS if marker in answer]
        assert not dead, f"{run}: {what} is a dead end ({dead}):\n{answer}"
        assert "↳ in thread" in answer, f"{run}: {what} posted no answer:\n{answer}"


def test_the_advice_found_covers_logs_runs_and_node_validation(demo: DemoShell) -> None:
    """The demo's cards do advise the commands issue 38 found broken: the crash card's previous
    log, the missing run's `/tau runs`, the failed Ray job's log, and the Xid card's validation."""
    seen: dict[str, list[str]] = {}
    for run in ("ray-pretrain-crash", "llama-ft-typo", "ray-data-prep", "llama-ft-xid"):
        card = demo.answer(f"/tau status {run}") + demo.answer(str(newest_button(demo.shell, DETAILS_ACTION)))
        seen[run] = advice(card) + [f"[{n}]" for n in set(CHECK_BUTTON.findall(card))]
    assert "/tau logs ray-pretrain-crash --previous" in seen["ray-pretrain-crash"]
    assert "/tau runs" in seen["llama-ft-typo"]
    assert "/tau logs ray-data-prep" in seen["ray-data-prep"]
    assert any(step.startswith("[") for step in seen["llama-ft-xid"])
