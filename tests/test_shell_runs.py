"""`/tau runs` in `taubot shell --demo` (issue 37): the list of the demo cluster's runs, and a run's
menu option pressed by its number opens its status, through the same listener as Slack's."""

from __future__ import annotations

import re

from tests.test_shell import taubot


def test_the_runs_list_in_the_shell_and_its_menu_opens_a_status() -> None:
    done = taubot("shell", "--demo", stdin="/tau runs --all --stuck\n")
    assert done.returncode == 0, done.stderr
    assert "Everyone's runs in vision" in done.stdout and "9 requests" in done.stdout
    number = re.search(r"\[(\d+)\] Status of llama-ft-oom", done.stdout)
    assert number, done.stdout
    pressed = taubot("shell", "--demo", stdin=f"/tau runs --all --stuck\n{number.group(1)}\n")
    out = pressed.stdout
    assert f"▶ pressed [{number.group(1)}] Status of llama-ft-oom" in out
    assert "asked `/tau status llama-ft-oom --workspace vision`" in out
    assert "⚠️ First incomplete: Container start (warning)" in out
    assert "Traceback" not in out + pressed.stderr
