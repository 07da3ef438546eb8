"""Every Kueue reason token has a stall rule, or is stalled at once on purpose (issue 35, SPEC §7b).

The Workloads are the token table's own (tests/diagnosis/test_kueue_reasons.py: the
`QuotaReserved=False` condition as Kueue writes it, each message quoted from kubernetes-sigs/kueue
at ff69552e79ad). The monitor dates a wait from the condition's lastTransitionTime
(`stalls._workload_since`), so each case is judged just before and just after its threshold.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.diagnosis.test_kueue_reasons import ROWS, Row, waiting
from workers.config.settings import Settings
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.kueue_reasons import TOKENS
from workers.diagnosis.linkage import find_run
from workers.diagnosis.podfacts import condition
from workers.diagnosis.registry import stall_rule
from workers.diagnosis.timeutil import parse_time
from workers.monitor.stalls import Stall, Thresholds, classify

# token → the minutes a run may wait on it before it is stalled (0: at once, its evidence is a failure)
WAITS = {"WaitingForQuota": 30, "PendingEvaluation": 30, "WaitingForPreemptedWorkloads": 30,
         "AdmissionGated": 30, "WaitingForPodsReady": 45, "OnHold": 0, "Deactivated": 0, "Suspended": 0,
         "Misconfigured": 0, "NoMatchingFlavor": 0, "TopologyPlacementFailed": 0, "ExceedsMaxQuota": 0}


def judged(objects: list[dict], after: timedelta) -> Stall | None:
    [wl] = [o for o in objects if o["kind"] == "Workload"]
    since = parse_time(condition(wl, "QuotaReserved")["lastTransitionTime"])
    assert isinstance(since, datetime)
    now = since + after
    return classify(evaluate(objects, "train", now), find_run(objects, "train", None), now,
                    Thresholds.from_settings(Settings()))


def test_every_token_of_the_table_is_listed_here() -> None:
    assert set(WAITS) == set(TOKENS)


@pytest.mark.parametrize("row", ROWS, ids=[r.token for r in ROWS])
def test_each_token_stalls_after_its_threshold_or_at_once(row: Row) -> None:
    objects = waiting(row.token, row.message, annotations=row.annotations, active=row.active)
    minutes = WAITS[row.token]
    after = judged(objects, timedelta(minutes=minutes))
    assert after is not None and after.stalled, (row.token, after)
    assert stall_rule(after.reason) is not None
    if minutes:
        before = judged(objects, timedelta(minutes=minutes - 1))
        assert before is not None and not before.stalled, (row.token, before)
        assert before.reason == after.reason


def test_the_new_waits_are_settings() -> None:
    """`TAUBOT_STALL_GATED_MINUTES` and `TAUBOT_STALL_PODS_READY_WAIT_MINUTES` move them."""
    gated = next(r for r in ROWS if r.token == "AdmissionGated")
    objects = waiting(gated.token, gated.message, annotations=gated.annotations)
    [wl] = [o for o in objects if o["kind"] == "Workload"]
    since = parse_time(condition(wl, "QuotaReserved")["lastTransitionTime"])
    assert since is not None
    now = since + timedelta(minutes=10)
    d, objs = evaluate(objects, "train", now), find_run(objects, "train", None)
    settings = Settings(stall_gated_minutes=10, stall_pods_ready_wait_minutes=10)
    assert classify(d, objs, now, Thresholds.from_settings(settings)).stalled  # type: ignore[union-attr]
    assert not classify(d, objs, now, Thresholds.from_settings(Settings())).stalled  # type: ignore[union-attr]


def test_an_unknown_token_waits_as_quota_does() -> None:
    """A token taubot does not know is `pending` (SPEC §3): a run on it for 30 min is stalled."""
    objects = waiting("WaitingForQuantumEntanglement", "the scheduler is thinking")
    assert not judged(objects, timedelta(minutes=29)).stalled  # type: ignore[union-attr]
    stall = judged(objects, timedelta(minutes=30))
    assert stall is not None and stall.stalled and stall.reason == "quota.unknown_reason"
