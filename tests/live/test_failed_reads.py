"""A read that failed is named on the card's first screen, in one line (SPEC §7, issue 36).

Through the Kubernetes API emulator over real HTTP: the waiting run of the bundled example
`l4-job-waiting-for-quota` (workers/examples/README.md) with the API answering 500 (or 403) to
its pods read. Before, the card said only `Waiting behind it: ⚠️ Scheduling`; now its first
screen says `Could not read: pods (HTTP 500)`, within SPEC §7's bounds, and a card whose reads
all succeeded has no such line.
"""

from __future__ import annotations

from pathlib import Path

from tests.fakes.kube_api import KubeEmulator
from tests.slack.conftest import EXAMPLE_NOW, example_objects
from workers.collect.investigate import diagnose_live
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity
from workers.render.cards import (
    FIRST_SCREEN_CHARS,
    FIRST_SCREEN_LINES,
    build_phase_card,
    card_texts,
    render_phase_card,
    screen_size,
)

from .conftest import workspace_objects, write_descriptor

ALICE = Identity(user="alice@example.com", groups=("team-vision", "gpu-users", "researchers"))
RUN = "llama-ft-7b"


async def first_screen(tmp_path: Path, setup=None) -> tuple[list[str], tuple[int, int], dict]:  # noqa: ANN001
    async with KubeEmulator([*workspace_objects(), *example_objects("l4-job-waiting-for-quota")]) as emu:
        if setup is not None:
            setup(emu)
        write_descriptor(tmp_path, emu.base_url)
        result = await diagnose_live(load_descriptors(tmp_path), run=RUN, identity=ALICE, now=EXAMPLE_NOW,
                                     workspace="vision")
        assert any(r.path.endswith("/pods") for r in emu.requests), "the pods were read"
    card = render_phase_card(build_phase_card(result.diagnosis, workspace="vision",
                                              operator_hints_allowed=False, requests=result.requests))
    return card_texts(card.blocks), screen_size(card.blocks), dict(result.diagnosis.read_gaps)


async def test_a_500_on_the_pods_read_is_said_on_the_first_screen(tmp_path: Path) -> None:
    texts, (chars, lines), gaps = await first_screen(tmp_path, lambda emu: emu.fail("pods", 500))
    assert gaps == {"pods": "HTTP 500"}
    said = [t for t in texts if "Could not read" in t]
    assert said == ["⚠️ Could not read: pods (HTTP 500)"], texts
    assert chars <= FIRST_SCREEN_CHARS and lines <= FIRST_SCREEN_LINES


async def test_several_failed_reads_are_one_line(tmp_path: Path) -> None:
    def faults(emu: KubeEmulator) -> None:
        emu.fail("pods", 500)
        emu.forbid("list", "workloads")

    texts, (chars, lines), gaps = await first_screen(tmp_path, faults)
    assert set(gaps) == {"pods", "workloads"}
    said = [t for t in texts if "Could not read" in t]
    assert len(said) == 1 and "\n" not in said[0], texts
    assert "pods (HTTP 500)" in said[0] and "workloads (permission denied)" in said[0]
    assert chars <= FIRST_SCREEN_CHARS and lines <= FIRST_SCREEN_LINES


async def test_a_card_whose_reads_all_succeeded_has_no_such_line(tmp_path: Path) -> None:
    texts, _, gaps = await first_screen(tmp_path)
    assert gaps == {}
    assert not any("Could not read" in t for t in texts), texts
