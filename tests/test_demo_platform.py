"""shell/demo_platform.json is what bench/make_examples.py generates (`write_demo_platform`), byte for
byte: an edit by hand would drift from its generator (the demo's LocalQueue name once did), and the
demo's queue must stay true — its ClusterQueue reserving what the Workloads admitted to it hold."""

from __future__ import annotations

import json
from pathlib import Path

from bench.make_examples import DEMO_PLATFORM, write_demo_platform
from shell import demo_cluster as demo
from workers.diagnosis.start_estimate import holding


def test_the_checked_in_demo_platform_is_what_the_generator_writes(tmp_path: Path) -> None:
    out = tmp_path / "demo_platform.json"
    write_demo_platform(out)
    assert out.read_text() == DEMO_PLATFORM.read_text(), "run: python -c 'import bench.make_examples as m; " \
        "m.write_demo_platform()'"


def test_the_demo_cluster_queue_reserves_what_its_admitted_workloads_hold() -> None:
    """Kueue's bookkeeping (clusterqueue_types.go: flavorsReservation, flavorsUsage): the sum of the
    admitted, unfinished Workloads' podSetAssignments in the queue's flavour; FREE_GPUS are left."""
    items = json.loads(DEMO_PLATFORM.read_text())["items"]
    cq = next(o for o in items if o["kind"] == "ClusterQueue")
    served = [o for run in demo.RUNS for o in demo.demo_run_objects(run)] + demo.watched_objects(0)

    def true(wl: dict, ctype: str) -> bool:
        return any(c["type"] == ctype and c["status"] == "True" for c in wl["status"].get("conditions") or [])

    held = sum(holding(w, demo.FLAVOR, "nvidia.com/gpu") for w in served if w["kind"] == "Workload"
               and true(w, "QuotaReserved") and not true(w, "Finished")
               and w["status"]["admission"]["clusterQueue"] == cq["metadata"]["name"])
    for usage in ("flavorsReservation", "flavorsUsage"):
        [flavor] = cq["status"][usage]
        assert (flavor["name"], float(flavor["resources"][0]["total"])) == (demo.FLAVOR, held)
    nominal = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
    assert nominal - held == demo.FREE_GPUS == demo.cluster_queue_quota() - held
