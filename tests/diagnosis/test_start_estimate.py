"""When will a waiting run start, and can it ever fit (issue 35, SPEC §5b).

The walk (`start_estimate`) is pure; the object-level cases build ClusterQueues and Workloads in
Kueue v1beta2's shapes (tests/fixtures/k8s.py `cluster_queue`, `workload`; `spec.cohortName`,
`borrowingLimit` and `spec.maximumExecutionTimeSeconds` as apis/kueue/v1beta2 declares them, the
release bound as workload_controller.go reconcileMaxExecutionTime computes it — see
docs/reference/kueue-verified.md) and Nodes as `kubectl get node -o json` prints them.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import timedelta

from tests.fixtures import k8s
from workers.diagnosis.start_estimate import (
    Holder,
    Pool,
    Waiting,
    build_pool,
    estimate_text,
    never_fits,
    next_starts,
    soonest,
    start_estimate,
)

from .helpers import NOW, diagnose

GPU = "nvidia.com/gpu"
PHASE = "Kueue admission"


def at(minutes: float):
    return NOW + timedelta(minutes=minutes)


def pool(*holders: Holder, nominal: float = 16, queue_cap: float | None = None, pool_cap: float | None = None,
         **kw) -> Pool:
    return Pool(resource=GPU, flavor="h100", cluster_queue="h100-shared", nominal=nominal,
                queue_cap=queue_cap if queue_cap is not None else nominal,
                pool_cap=pool_cap if pool_cap is not None else nominal, holders=list(holders), **kw)


def held(key: str, amount: float, *, deadline: float | None = None, eta: float | None = None,
         cq: str = "h100-shared") -> Holder:
    return Holder(key=key, amount=amount, cluster_queue=cq, admitted_at=NOW - timedelta(hours=1),
                  deadline=at(deadline) if deadline is not None else None,
                  limit_seconds=3600 + deadline * 60 if deadline is not None else None,
                  eta=at(eta) if eta is not None else None)


def iso(minutes: float) -> str:
    return at(minutes).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_time_limits_only_give_a_latest_and_no_earliest() -> None:
    est = start_estimate(pool(held("a/llama-a", 8, deadline=90), held("a/llama-b", 8, deadline=240)), 8, [], NOW)
    assert est.latest == iso(90) and est.earliest is None
    assert any("a/llama-a's time limit frees 8" in line for line in est.basis)
    assert "at the latest 12:00 UTC (the holders' time limits)" in estimate_text(est, NOW)
    assert "no earlier estimate" in estimate_text(est, NOW)


def test_etas_only_give_an_earliest_and_no_latest() -> None:
    est = start_estimate(pool(held("a/llama-a", 8, eta=60), held("a/llama-b", 8, eta=120)), 8, [], NOW)
    assert est.earliest == iso(60) and est.latest is None
    assert est.earliest_because == "when a/llama-a's ETA frees 8 GPUs"
    assert est.basis[0] == "a/llama-a's ETA frees 8 nvidia.com/gpu at 11:30"
    assert estimate_text(est, NOW).startswith("earliest ≈ 11:30 UTC (when a/llama-a's ETA frees 8 GPUs)")


def test_mixed_an_eta_for_the_earliest_and_a_limit_for_the_latest() -> None:
    est = start_estimate(pool(held("a/llama-a", 8, eta=30, deadline=300), held("b/bert", 8, deadline=120)),
                         8, [], NOW)
    assert (est.earliest, est.latest) == (iso(30), iso(120))
    text = estimate_text(est, NOW)
    assert "earliest ≈ 11:00 UTC (when a/llama-a's ETA frees 8 GPUs)" in text
    assert "at the latest 12:30 UTC (the holders' time limits)" in text
    assert text.endswith("preemption, fair sharing and borrowing can change it")


def test_a_holder_without_limit_or_eta_is_unknown_and_no_time_is_given() -> None:
    est = start_estimate(pool(held("c/forever", 16)), 8, [], NOW)
    assert est.earliest is None and est.latest is None
    assert est.unknown == ["c/forever holds 16 nvidia.com/gpu: no time limit and no readable ETA"]
    assert estimate_text(est, NOW) == ("unknown: c/forever holds 16 nvidia.com/gpu: no time limit and no "
                                       "readable ETA")


def test_a_workload_ahead_takes_the_first_release() -> None:
    est = start_estimate(pool(held("a/llama-a", 8, deadline=60), held("a/llama-b", 8, deadline=180)), 8,
                         [Waiting("d/ahead", 8)], NOW)
    assert est.latest == iso(180)
    assert any("d/ahead (ahead of you) takes 8" in line for line in est.basis)


def test_the_run_next_in_line_with_quota_free_now_starts_now() -> None:
    est = start_estimate(pool(held("a/llama-a", 8, deadline=60)), 8, [], NOW)
    assert est.earliest == est.latest == iso(0)
    assert est.basis == ["8 nvidia.com/gpu of flavour h100 free now"]


def test_the_run_next_in_line_waits_for_the_first_release() -> None:
    est = start_estimate(pool(held("a/llama-a", 8, deadline=60), held("a/llama-b", 8, deadline=120)), 8, [], NOW)
    assert est.latest == iso(60)


def test_strict_fifo_head_blocks_what_is_behind_it() -> None:
    p = pool(held("a/llama-a", 8, deadline=60), held("a/llama-b", 8, deadline=120), strategy="StrictFIFO")
    est = start_estimate(p, 8, [Waiting("d/big", 16)], NOW)
    assert est.latest is None  # d/big takes all 16 at 12:30 and holds them with no known end


def test_an_eta_after_a_time_limit_gives_the_earliest_its_basis_the_eta() -> None:
    """The earliest walk takes a time-limited holder's limit as its release (it has certainly ended by
    then) and gives a time when the release that lets the run in is an ETA: a/bert's limit frees 8 at
    11:00, b/llama-a's ETA the other 8 at 12:00."""
    est = start_estimate(pool(held("a/bert", 8, deadline=30), held("b/llama-a", 8, eta=90)), 16, [], NOW)
    assert (est.earliest, est.latest) == (iso(90), None)
    assert est.earliest_because == "when b/llama-a's ETA frees 8 GPUs"
    assert est.basis == ["a/bert's time limit frees 8 nvidia.com/gpu by 11:00 (admitted 09:30 + 5,400 s)",
                         "b/llama-a's ETA frees 8 nvidia.com/gpu at 12:00"]
    # b/llama-a has no time limit: nothing bounds the start
    assert est.card == ("earliest ≈ 12:00 UTC (when b/llama-a's ETA frees 8 GPUs) — preemption, fair sharing "
                        "and borrowing can change it")


def test_a_time_limit_that_lets_the_run_in_gives_no_earliest_though_an_eta_came_before() -> None:
    est = start_estimate(pool(held("a/llama-a", 8, eta=30, deadline=200), held("b/bert", 8, deadline=90)),
                         16, [], NOW)
    assert (est.earliest, est.latest) == (None, iso(200))
    assert est.card == ("at the latest 13:50 UTC (the holders' time limits) — preemption, fair sharing and "
                        "borrowing can change it")


def test_the_cards_start_line_counts_what_is_missing_and_the_long_form_lists_it_bounded() -> None:
    holders = [held(f"c/run-{i}", 2) for i in range(7)]
    est = start_estimate(pool(*holders), 8, [], NOW)
    assert est.card == "unknown: 7 holders have no time limit and no readable ETA"
    text = estimate_text(est, NOW)
    assert text.count("no time limit and no readable ETA") == 5 and text.endswith("; +2 more")
    one = start_estimate(pool(held("c/forever", 16)), 8, [], NOW)
    assert one.card == "unknown: 1 holder has no time limit and no readable ETA"


# ----------------------------------------------------------------------- from objects


def cq(name: str, *, nominal: int, used: int, cohort: str | None = None, borrowing: int | None = None) -> dict:
    q = k8s.cluster_queue(name, gpu_quota=nominal, gpu_used=used, flavor="h100")
    if cohort:
        q["spec"]["cohortName"] = cohort
        if borrowing is not None:
            q["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = borrowing
    return q


def admitted(name: str, ns: str, cq_name: str, *, limit: int | None = None, gpus: int = 8) -> dict:
    j = k8s.job(name, ns=ns, gpus=gpus, at=-3600)
    wl = k8s.workload(j, cluster_queue=cq_name, flavor="h100", at=-3600)
    if limit:
        wl["spec"]["maximumExecutionTimeSeconds"] = limit
    return wl


def test_borrowing_in_a_cohort_counts_the_lenders_holders() -> None:
    """h100-shared (nominal 8, may borrow 8) and research-h100 (nominal 8) share cohort research:
    the run's 8 come back when research-h100's holder ends (its limit), not only its own."""
    own = cq("h100-shared", nominal=8, used=8, cohort="research", borrowing=8)
    lender = cq("research-h100", nominal=8, used=8, cohort="research")
    holders = [admitted("own-run", "team-a", "h100-shared", limit=4 * 3600),
               admitted("lender-run", "research", "research-h100", limit=2 * 3600)]
    p = build_pool(own, "h100", GPU, cohort_queues=[own, lender], admitted=holders, etas={})
    assert p is not None and (p.queue_cap, p.pool_cap) == (16, 16)
    est = start_estimate(p, 8, [], NOW)
    # admitted at 09:00:02 (the fixture's Admitted lastTransitionTime) + 2 h
    assert est.latest == "2026-11-30T11:00:02Z"
    assert any("research/" in line and "time limit" in line for line in est.basis)


def test_a_cohort_whose_other_queues_were_not_read_is_said() -> None:
    own = cq("h100-shared", nominal=8, used=8, cohort="research", borrowing=8)
    p = build_pool(own, "h100", GPU, cohort_queues=[own], admitted=[admitted("own-run", "team-a", "h100-shared",
                                                                             limit=3600)], etas={})
    assert p is not None
    assert any("cohort research's other ClusterQueues were not read" in u
               for u in start_estimate(p, 8, [], NOW).unknown)


def test_quota_held_by_workloads_the_user_could_not_read_is_unknown_and_no_latest() -> None:
    own = cq("h100-shared", nominal=16, used=16)
    p = build_pool(own, "h100", GPU, cohort_queues=[own],
                   admitted=[admitted("mine", "team-a", "h100-shared", limit=3600)], etas={})
    assert p is not None and p.unread_held == 8
    est = start_estimate(p, 16, [], NOW)
    assert est.latest is None
    assert "8 reserved nvidia.com/gpu in flavour h100 are held by no Workload you could read" in est.unknown


def test_never_fits_by_the_queue_limit_says_the_numbers() -> None:
    own = cq("h100-shared", nominal=8, used=0, cohort="research", borrowing=4)
    lender = cq("research-h100", nominal=32, used=0, cohort="research")
    p = build_pool(own, "h100", GPU, cohort_queues=[own, lender], admitted=[], etas={})
    run = k8s.workload(k8s.job("train", parallelism=2, gpus=8, suspend=True), state="waiting_for_quota")
    why, owner = never_fits([run], p, []) or ("", "")
    assert owner == "queue-owner"
    assert why == ("asks for 16 nvidia.com/gpu; ClusterQueue h100-shared can grant at most 12 in flavour h100 "
                   "(nominal 8 + borrowing limit 4)")


def node(name: str, gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.azure.com/agentpool": "h100"}},
            "status": {"allocatable": {"cpu": "95", "memory": "1730000000Ki", GPU: str(gpus), "pods": "110"}}}


def test_never_fits_by_node_size_is_the_researchers_and_warns() -> None:
    """16 GPUs per pod; the largest node of flavour h100 (ResourceFlavor nodeLabels) has 8."""
    j = k8s.job("train", gpus=16, suspend=True)
    wl = k8s.workload(j, state="waiting_for_quota", flavor="h100")
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "h100"},
              "spec": {"nodeLabels": {"kubernetes.azure.com/agentpool": "h100"}}}
    objects = [j, wl, k8s.local_queue("team-a"), cq("cluster-queue", nominal=64, used=0), flavor,
               node("aks-h100-0", 8), node("aks-h100-1", 8)]
    d = diagnose(objects, "train")
    p = d.phase(PHASE)
    assert p.state.value == "warning" and d.owner == "researcher" and d.transient is False
    assert p.forecast is not None
    assert p.forecast.never_fits == ("each main pod asks for 16 nvidia.com/gpu; the largest node of flavour "
                                     "h100 has 8 (aks-h100-0)")
    assert "reason=NeverFits" in p.summary


def test_offline_json_carries_start_estimate_and_never_fits(tmp_path) -> None:
    """`taubot diagnose --from-file` of a dump holding the ClusterQueue, its Workloads and the Nodes."""
    j = k8s.job("train", parallelism=2, gpus=8, suspend=True, at=60)
    wl = k8s.workload(j, state="waiting_for_quota", flavor="h100", at=61)
    holder = admitted("llama-a", k8s.NS, "cluster-queue", limit=3 * 3600)
    objects = [j, wl, holder, k8s.local_queue("team-a"), cq("cluster-queue", nominal=16, used=8),
               node("aks-h100-0", 8)]
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(k8s.kube_list(*copy.deepcopy(objects))))
    out = subprocess.run([sys.executable, "-m", "workers.cli", "diagnose", "train", "--from-file", str(dump),
                          "--now", NOW.isoformat(), "--format", "json"], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    qp = json.loads(out.stdout)["queue_position"]
    assert qp["never_fits"] is None
    assert qp["start_estimate"]["latest"] == "2026-11-30T12:00:02Z"
    assert qp["start_estimate"]["earliest"] is None
    assert set(qp["start_estimate"]) >= {"earliest", "latest", "basis", "unknown"}
    assert qp["position_in_cluster_queue"] == 1


def _waiting(name: str, at: float, gpus: int = 8) -> dict:
    j = k8s.job(name, gpus=gpus, suspend=True, at=at)
    return k8s.workload(j, state="waiting_for_quota", cluster_queue="h100-shared", flavor="h100", at=at)


def test_a_groups_next_start_is_its_soonest_members_with_its_basis() -> None:
    """The stall monitor's grouped post (issue 35): of the runs waiting in h100-shared, the soonest start
    one of them has — an ETA gives `earliest` (≈), a time limit only `latest`; a smaller run behind a
    bigger one (BestEffortFIFO) may start first."""
    queue = cq("h100-shared", nominal=16, used=16)
    queue["status"]["pendingWorkloads"] = 2
    big, small = _waiting("sweep-big", 60, gpus=16), _waiting("sweep-small", 61)
    holders = [admitted("llama-a", k8s.NS, "h100-shared", limit=3 * 3600),
               admitted("bert", k8s.NS, "h100-shared", limit=2 * 3600)]
    lqs = [k8s.local_queue("team-a", cluster_queue="h100-shared")]
    common = {"workloads": [*holders, big, small], "local_queues": lqs, "cluster_queues": [queue], "now": NOW}

    def next_start(**more: object):  # noqa: ANN202
        starts = next_starts(queue, **common, **more)  # type: ignore[arg-type]
        return None if starts is None else soonest(starts.values())

    est = next_start()
    # sweep-small's 8 come back when bert's 2 h limit runs out (admitted 09:00:02): before sweep-big's 16.
    assert est is not None and (est.earliest, est.latest) == (None, "2026-11-30T11:00:02Z")
    eta = NOW + timedelta(minutes=5)
    with_eta = next_start(etas={f"{k8s.NS}/{holders[1]['metadata']['name']}": eta})
    assert with_eta is not None and with_eta.earliest == f"{eta:%Y-%m-%dT%H:%M:%SZ}"
    # A pending Workload the reader cannot see could be ahead of both: no time at all.
    queue["status"]["pendingWorkloads"] = 3
    assert next_starts(queue, **common) is None  # type: ignore[arg-type]
    assert next_starts(queue, **common, limit=1) is None  # type: ignore[arg-type]
