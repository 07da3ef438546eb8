"""The demo shell, in process, on what its cards advise (issue 38): each answer read as printed.

One demo session (`workers.cli.shell.demo_session`, the path `taubot shell --demo` runs) serves
the module's tests: a line is typed with `Demo.answer`, and what the shell printed for it comes
back. The demo cluster is the bundled one (`shell/demo_cluster.py`), served over real HTTP by the
Kubernetes API emulator in process.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from shell.demo_cluster import MISSING_RUN
from workers.cli.shell import demo_session
from workers.services import install


@dataclass
class Demo:
    shell: Any
    printed: list[str] = field(default_factory=list)

    def answer(self, line: str) -> str:
        """What the shell printed for one typed line (a command or a button's number)."""
        install(self.shell.services)  # the suite uninstalls Services around each test (conftest)
        start = len(self.printed)
        self.shell.line(line)
        return "".join(self.printed[start:])


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    printed: list[str] = []
    with demo_session(printed.append) as shell:
        yield Demo(shell, printed)


def test_a_run_that_does_not_exist_gets_no_word_about_its_annotations(demo: Demo) -> None:
    """Issue 38.6: there is no run, so there is no submitter to miss: the card says the run was not
    found and what to check, and nothing about a `taugrid.io/submitted-by` annotation."""
    card = demo.answer(f"/tau status {MISSING_RUN.name}")
    assert f"run {MISSING_RUN.name} not found in namespace team-vision" in card
    assert "submitted-by" not in card and "cannot tell who submitted" not in card


def test_help_shows_a_real_code_block_that_pastes_back_as_a_command(demo: Demo) -> None:
    """Issue 38.8: `/tau help` showed look-alike backticks (U+02CB) inside a code span, so its
    example could not be pasted. The list has no fence at all now; `/tau help validate` shows its
    example's manifest in a real ``` block, and typing the example as shown validates it."""
    listing = demo.answer("/tau help")
    assert "\u02cb" not in listing and "`/tau validate [--workspace W] <manifest in a code block>" in listing
    explained = demo.answer("/tau help validate")
    assert "\u02cb" not in explained
    [command] = re.findall(r"^Example: `(/tau validate[^`]*)`$", explained, re.M)
    [block] = re.findall(r"^```\n.*?^```$", explained, re.S | re.M)
    assert "kind: Job" in block
    answer = demo.answer(f"{command}\n{block}")
    assert "Manifest validation · Job team-vision/llama-ft-7b" in answer
    assert "no manifest" not in answer and "Usage" not in answer
