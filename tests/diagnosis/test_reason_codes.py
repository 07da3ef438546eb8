"""Facts are data: code reads reason and cause codes, never a summary (issue 23).

Every bundled example (real Kueue, KubeRay and kubelet shapes, see
workers/examples/README.md) and the monitor's stuck-run builders are judged,
then every summary and evidence line is reworded; the monitor's stall verdict
and groups, the collector's event-read plan and the card's "Kind" must not
change. And only the registry spells out the phase names.
"""

from __future__ import annotations

import ast
import json
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

import pytest

from tests.fixtures import k8s
from workers.collect.investigate import needs_events
from workers.diagnosis import registry
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.linkage import find_run
from workers.diagnosis.models import Diagnosis
from workers.diagnosis.timeutil import parse_time
from workers.monitor.stalls import Thresholds, classify
from workers.render.cards import build_phase_card

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name[:-5] for p in (resources.files("workers") / "examples").iterdir()
                  if p.name.endswith(".json"))


def _example(name: str) -> tuple[list[dict], str, str | None, datetime]:
    doc = json.loads((resources.files("workers") / "examples" / f"{name}.json").read_text())
    notes = doc["metadata"]["annotations"]
    now = parse_time(notes["taugrid.io/example-now"])
    assert now is not None
    return doc["items"], notes["taugrid.io/example-run"], None, now


def reworded(d: Diagnosis) -> Diagnosis:
    """The same facts told in other words: every sentence a person reads is replaced."""
    def other(p):  # noqa: ANN001, ANN202
        return p.model_copy(update={"summary": "(reworded) lorem ipsum: dolor", "evidence": ["(reworded)"]})
    return d.model_copy(update={"phases": [other(p) for p in d.phases], "checks": [other(c) for c in d.checks],
                                "evidence": ["(reworded)"]})


@pytest.mark.parametrize("name", EXAMPLES)
def test_rewording_every_summary_changes_no_decision(name: str) -> None:
    objects, run, ns, now = _example(name)
    d = evaluate(objects, run, now, ns)
    objs = find_run(objects, run, ns)
    other = reworded(d)
    thresholds = Thresholds()
    assert classify(other, objs, now, thresholds) == classify(d, objs, now, thresholds)
    assert needs_events(other) == needs_events(d)
    assert (build_phase_card(other, workspace="vision", operator_hints_allowed=False).header
            == build_phase_card(d, workspace="vision", operator_hints_allowed=False).header)  # "Kind" among them


def test_every_result_carries_a_reason_code_of_the_form_area_what() -> None:
    for name in EXAMPLES:
        objects, run, ns, now = _example(name)
        d = evaluate(objects, run, now, ns)
        for p in [*d.phases, *d.checks]:
            area, dot, what = p.reason.partition(".")
            assert area and dot and what, (name, p.name, p.reason)


NOW = k8s.T0 + timedelta(minutes=60)


def _queued(name: str, queue: str) -> list[dict]:
    job = k8s.job(name, suspend=True, t0=NOW - timedelta(minutes=45), queue=queue)
    return [job, k8s.workload(job, state="pending", t0=NOW - timedelta(minutes=45))]


def test_runs_waiting_in_one_clusterqueue_share_a_cause_and_others_do_not() -> None:
    """Grouping is by the ClusterQueue the LocalQueue points at (Kueue LocalQueue spec.clusterQueue)."""
    shared = [k8s.local_queue("team-a", cluster_queue="h100-shared"),
              k8s.local_queue("team-b", cluster_queue="h100-shared"),
              k8s.local_queue("team-c", cluster_queue="a100-small")]
    stalls = {}
    for run, queue in (("q-1", "team-a"), ("q-2", "team-b"), ("q-3", "team-c")):
        objects = [*shared, *_queued(run, queue)]
        d = evaluate(objects, run, NOW, k8s.NS)
        stalls[run] = classify(reworded(d), find_run(objects, run, k8s.NS), NOW, Thresholds())
    assert {s.reason for s in stalls.values()} == {"quota.waiting"}
    assert all(s.stalled for s in stalls.values())
    assert stalls["q-1"].group == stalls["q-2"].group == "quota:ClusterQueue h100-shared"
    assert stalls["q-3"].group == "quota:ClusterQueue a100-small"


def _string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


# "RayCluster" and "Ready" are also a Kubernetes kind and a condition type, and "Submitted" a
# state word: the test holds the names that are only phase or check names.
UNAMBIGUOUS = [e.name for e in registry.ENTRIES if e.name not in ("RayCluster", "Ready", "Submitted")]


def test_only_the_registry_spells_out_the_phase_and_check_names() -> None:
    spelled = {}
    for top in ("bot", "workers", "shell"):
        for path in (REPO / top).rglob("*.py"):
            if path == REPO / "workers" / "diagnosis" / "registry.py":
                continue
            found = _string_constants(path) & set(UNAMBIGUOUS)
            if found:
                spelled[str(path.relative_to(REPO))] = sorted(found)
    assert spelled == {}
