"""Where a stalled RayJob's driver waits (issue 40, SPEC §5c), against the real Ray 2.60 head.

The `ray-workers-hang` job (tests/real/jobs/train.py) prints progress from a Ray actor, then its
driver blocks in `ray_workers_then_hang` polling a file that appears only at teardown. Two
statuses 30 minutes apart (the same first-sighting store, as the bot's Redis) make the unchanged,
untimed driver log a stall; the second reads the driver's stack through the emulator's
`services/proxy` from the real dashboard's `GET /worker/traceback` (real py-spy on the real
driver process), after the user's access reviews, and *Details* shows the blocking frame.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.fakes.kube_api import KubeEmulator
from tests.fixtures.blocks import card_text
from workers.collect.investigate import diagnose_live
from workers.config.workspaces import load_descriptors
from workers.render.cards import build_phase_card, render_details, render_phase_card

from .test_ray_dashboard import ALICE, NOW, cluster  # noqa: F401 - the fixture


class Seen:
    """The first-sighting store's two calls (Redis `get`/`set`), in memory."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def set(self, name: str, value: str, ex: int | None = None) -> bool:
        self.values[name] = value
        return True




async def test_a_stalled_rayjobs_details_show_where_its_driver_blocks(cluster: KubeEmulator,  # noqa: F811
                                                                      tmp_path: Path) -> None:
    seen = Seen()
    registry = load_descriptors(tmp_path)
    first = (await diagnose_live(registry, run="ray-workers-hang", identity=ALICE, now=NOW, workspace="vision",
                                 seen=seen)).diagnosis
    assert first.phase("Runtime progress").driver_stack == []  # not stalled yet: no stack read
    cluster.clear_requests()
    later = NOW + timedelta(minutes=30)
    d = (await diagnose_live(registry, run="ray-workers-hang", identity=ALICE, now=later, workspace="vision",
                             seen=seen)).diagnosis
    check = d.phase("Runtime progress")
    assert check.state.value == "warning", check.summary
    assert check.driver_stack, check.evidence
    assert any("ray_workers_then_hang (train.py:" in frame for frame in check.driver_stack), check.driver_stack
    traceback = [r for r in cluster.requests if r.path.endswith("/proxy/worker/traceback")]
    assert len(traceback) == 1 and traceback[0].query["pid"].isdigit()
    reviews = [r.body["spec"]["resourceAttributes"] for r in cluster.requests
               if r.path.endswith("/selfsubjectaccessreviews")]
    assert {"subresource": "proxy"}.items() <= next(a for a in reviews if a.get("resource") == "services").items()
    assert all(r.header_values("Impersonate-User") == ["alice@example.com"] for r in cluster.requests)
    context = build_phase_card(d, workspace="vision", operator_hints_allowed=False)
    assert "*Driver waits in:*" in card_text(render_phase_card(context).blocks)
    assert "ray_workers_then_hang (train.py:" in card_text(render_details(context.details).blocks)  # type: ignore[arg-type]
    print(f"stalled RayJob status: {len(cluster.requests)} requests, {cluster.rounds()} rounds")
