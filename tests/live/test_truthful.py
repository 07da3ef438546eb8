"""Truthful under faults (issue 15): a read that failed is never "not found", never "none exist".

Through the emulator with per-user 403s and injected 5xx; shapes from tests/fixtures/k8s.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.fixtures import k8s
from workers.render.cards import build_phase_card, render_phase_card

from .test_live_diagnosis import run_live


def submitter_job_of(rj: dict) -> dict:
    """KubeRay's submitter Job: the RayJob's name, owned by it (kuberay rayjob_controller.go)."""
    j = k8s.job(rj["metadata"]["name"], queue=None, active=1)
    j["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": rj["metadata"]["name"],
                                         "uid": rj["metadata"]["uid"], "controller": True}]
    return j


async def test_a_403_on_rayjobs_never_diagnoses_the_submitter_job_as_the_run(tmp_path: Path) -> None:
    from tests.live.conftest import workspace_objects

    rj = k8s.rayjob("ray-pretrain-13b")
    objs = workspace_objects() + [rj, submitter_job_of(rj)]
    result, _ = await run_live(objs, tmp_path, "ray-pretrain-13b",
                               setup=lambda emu: emu.forbid("get", "rayjobs", user="alice@example.com"))
    d = result.diagnosis
    assert d.run.kind is None and d.first_incomplete == "Submitted"
    assert d.phase("Submitted").summary == "permission denied (get rayjobs)"
    assert not any("run not found" in p.summary for p in d.phases)
    assert d.first_incomplete is not None and d.phase("RayJob status").summary.startswith("not checked")
    card = render_phase_card(build_phase_card(d, workspace="vision", operator_hints_allowed=False))
    assert "not found" not in card.blocks[0]["text"]["text"]  # the header
    assert "every phase done" not in str(card.blocks)


async def test_a_5xx_on_the_tauworkspace_reads_unreachable_not_not_found(tmp_path: Path) -> None:
    from tests.live.conftest import workspace_objects

    j = k8s.job("train", active=1)
    objs = workspace_objects() + [j]
    result, _ = await run_live(objs, tmp_path, "train", setup=lambda emu: emu.fail("tauworkspaces", 503))
    d = result.diagnosis
    assert d.first_incomplete == "Workspace connection" and d.layer == 1
    card = render_phase_card(build_phase_card(d, workspace="vision", operator_hints_allowed=False))
    header = card.blocks[0]["text"]["text"]
    assert "not found" not in header and "not read (layer 1 failed)" in header
