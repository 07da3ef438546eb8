"""The demo shell, in process, on what its cards advise (issue 38): each answer read as printed.

One demo session (`workers.cli.shell.demo_session`, the path `taubot shell --demo` runs) serves
the module's tests: a line is typed with `Demo.answer`, and what the shell printed for it comes
back. The demo cluster is the bundled one (`shell/demo_cluster.py`), served over real HTTP by the
Kubernetes API emulator in process.
"""

from __future__ import annotations

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
