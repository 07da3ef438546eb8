"""The monitor's grouped post for runs waiting in one ClusterQueue names the next start (issue 35,
SPEC §7b: "6 runs waiting on h100-shared; the next start ≈ 14:20").

Objects: Kueue v1beta2 shapes from tests/fixtures/k8s.py (`cluster_queue`, `workload`), a holder with
`spec.maximumExecutionTimeSeconds` (apis/kueue/v1beta2/workload_types.go); the release bound as
workload_controller.go reconcileMaxExecutionTime computes it (docs/reference/kueue-verified.md).
"""

from __future__ import annotations

from datetime import timedelta

from tests.fixtures import k8s
from workers.diagnosis.evaluate import evaluate
from workers.monitor.posts import start_note
from workers.render.cards import build_group_card

NOW = k8s.T0 + timedelta(minutes=30)


def objects(limit: int | None) -> list[dict]:
    holder_job = k8s.job("llama-a", gpus=8, at=-3600)
    holder = k8s.workload(holder_job, cluster_queue="h100-shared", flavor="h100", at=-3600)
    if limit:
        holder["spec"]["maximumExecutionTimeSeconds"] = limit
    runs = []
    for i, name in enumerate(("sweep-1", "sweep-2")):
        j = k8s.job(name, gpus=8, suspend=True, at=60 + i)
        runs += [j, k8s.workload(j, state="waiting_for_quota", flavor="h100", at=61 + i)]
    return [k8s.local_queue("team-a", cluster_queue="h100-shared"),
            k8s.cluster_queue("h100-shared", gpu_quota=8, gpu_used=8, flavor="h100"),
            holder_job, holder, *runs]


def diagnoses(limit: int | None):
    """The two runs' start estimates as a dump holding their ClusterQueue gives them (the admission
    phase's forecast)."""
    objs = objects(limit)
    forecasts = [evaluate(objs, name, NOW).phase("Kueue admission").forecast for name in ("sweep-1", "sweep-2")]
    return [f.start_estimate if f is not None else None for f in forecasts]


def test_the_group_names_the_next_start_with_its_basis() -> None:
    note = start_note(diagnoses(3 * 3600))  # admitted 09:00:02 + 3 h
    assert note == "; the next start at the latest 12:00 UTC"
    card = build_group_card("waiting for quota in ClusterQueue h100-shared" + note, [
        ("sweep-1", "Kueue admission", "2026-11-30 10:01:01Z"), ("sweep-2", "Kueue admission", "2026-11-30 10:01:02Z")])
    assert card.header == ("🚨 2 runs stalled: waiting for quota in ClusterQueue h100-shared; the next start at "
                           "the latest 12:00 UTC")


def test_no_estimate_no_time() -> None:
    assert start_note(diagnoses(None)) == ""  # the holder has no time limit and no ETA: nothing is said
