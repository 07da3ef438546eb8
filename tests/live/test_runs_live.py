"""`/tau runs` read live through the Kubernetes API emulator (issue 37).

The namespace holds every bundled example's run at once (each renamed to its example's file
name, as the demo cluster renames them: `shell/demo_cluster.py` `run_objects`; the namespace is
`bench/bench_runs.py`'s, which the benchmark measures), with the workspace's platform objects. Each line's verdict must be that run's own status's; a user who
may list Jobs but not RayJobs sees the Jobs and "RayJobs: permission denied"; 500 runs cost the
same fixed requests in at most two rounds, and the card stays within Block Kit's limits.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from bench.bench_runs import WITH_RUN, every_example, many_runs
from tests.fakes.kube_api import KubeEmulator
from tests.fakes.slack_api import block_errors
from tests.fixtures import k8s
from workers.collect.investigate import diagnose_live
from workers.collect.runs import LISTS
from workers.config.workspaces import load_descriptors
from workers.diagnosis.linkage import SUBMITTED_BY_ANNOTATION
from workers.diagnosis.registry import PHASE_NAMES
from workers.flows.runs import live_runs
from workers.kube.client import Identity, KubeClients
from workers.render.cards import MAX_BLOCKS, MAX_SECTION_TEXT, card_texts
from workers.render.runs_card import build_runs_card, render_runs_card

from .conftest import write_descriptor

NOW = k8s.T0 + timedelta(minutes=30)  # the examples' judging time (workers/examples/README.md)
# Every request is answered this long after it arrives, so the requests a read sends together arrive
# within one answer's wait even on a loaded machine: the emulator numbers a request's round by the
# answers that came before it (`RecordedRequest.round`).
ROUND_LATENCY = 0.25
ALICE = Identity(user="alice@example.com", groups=("team-vision",))
async def runs(emu: KubeEmulator, tmp_path: Path, **kw):  # noqa: ANN201
    write_descriptor(tmp_path, emu.base_url)
    return await live_runs(load_descriptors(tmp_path), KubeClients(), ALICE, NOW, workspace="vision", **kw)


async def test_each_line_is_its_runs_own_status_verdict(tmp_path: Path) -> None:
    async with KubeEmulator(every_example()) as emu:
        listed = await runs(emu, tmp_path)
        by_run = {line.run: line for line in listed.lines}
        assert sorted(by_run) == sorted(name for name, _ in WITH_RUN), listed.gaps
        assert listed.gaps == {}
        for name, _ in WITH_RUN:
            d = (await diagnose_live(load_descriptors(tmp_path), run=name, identity=ALICE, now=NOW,
                                     workspace="vision")).diagnosis
            line = by_run[name]
            if d.first_incomplete is None or d.first_incomplete in PHASE_NAMES:
                assert (line.first_incomplete, line.state) == (
                    d.first_incomplete, d.phase(d.first_incomplete).state.value if d.first_incomplete
                    else "done"), name
                assert (line.layer, line.owner) == (d.layer, d.owner), name
            else:  # a layer-6/7 check of the status (nodes, log): the list says what the lists prove
                lifecycle = next((p for p in d.phases if not p.state.finished), None)
                assert line.first_incomplete == (lifecycle.name if lifecycle else None), name
                assert "not read" in line.summary, (name, line.summary)
    groups = [line.group for line in listed.lines]
    order = ("stuck", "failed", "waiting", "running", "finished")
    assert groups == sorted(groups, key=order.index)
    assert {"stuck", "waiting", "running", "finished"} <= set(groups)


async def test_only_the_callers_runs_unless_all_and_a_hint_when_none_is_marked(tmp_path: Path) -> None:
    objects = every_example(owner=None)
    mine = next(o for o in objects if o.get("kind") == "Job"
                and o["metadata"]["name"] == "l5-job-oomkilled")
    mine["metadata"]["annotations"] = {SUBMITTED_BY_ANNOTATION: ALICE.user}
    async with KubeEmulator(objects) as emu:
        listed = await runs(emu, tmp_path)
        assert [line.run for line in listed.lines] == ["l5-job-oomkilled"]
        assert listed.others == len(WITH_RUN) - 1
        everyone = await runs(emu, tmp_path, everyone=True)
        assert len(everyone.lines) == len(WITH_RUN)
        stuck = await runs(emu, tmp_path, everyone=True, stuck_only=True)
        assert stuck.lines and {line.group for line in stuck.lines} <= {"stuck", "failed"}
    async with KubeEmulator(every_example(owner=None)) as emu:
        unmarked = await runs(emu, tmp_path)
        assert unmarked.lines == [] and unmarked.suggest_all
        card = render_runs_card(build_runs_card(unmarked, command="/tau runs", now=NOW))
        assert any("/tau runs --all" in t for t in card_texts(card.blocks))


async def test_a_user_who_may_not_list_rayjobs_sees_the_jobs_and_permission_denied(tmp_path: Path) -> None:
    async with KubeEmulator(every_example()) as emu:
        emu.forbid("list", "rayjobs", user=ALICE.user)
        listed = await runs(emu, tmp_path)
        kinds = {line.kind for line in listed.lines}
        assert kinds == {"Job"}
        assert {line.run for line in listed.lines} == {n for n, _ in WITH_RUN if "-job-" in n}
        assert listed.gaps == {"RayJobs": "permission denied (list rayjobs)"}
        card = render_runs_card(build_runs_card(listed, command="/tau runs", now=NOW))
        assert any("RayJobs: permission denied (list rayjobs)" in t for t in card_texts(card.blocks))


async def test_500_runs_cost_the_same_requests_in_at_most_two_rounds_and_fit_a_card(tmp_path: Path) -> None:
    async with KubeEmulator(many_runs(500), latency=ROUND_LATENCY) as emu:
        listed = await runs(emu, tmp_path, everyone=True)
        assert len(listed.lines) == 500
        requests = len(emu.requests)
        assert requests == 1 + len(LISTS) == listed.requests  # the TauWorkspace and the LISTs: 9
        assert emu.rounds() <= 2
    card = render_runs_card(build_runs_card(listed, command="/tau runs --all", now=NOW))
    assert len(card.blocks) <= MAX_BLOCKS and block_errors(card.blocks) == []
    assert all(len(b["text"]["text"]) <= MAX_SECTION_TEXT for b in card.blocks if b["type"] == "section")
    assert any("and 450 more" in t for t in card_texts(card.blocks))
    async with KubeEmulator(many_runs(5), latency=ROUND_LATENCY) as emu:
        await runs(emu, tmp_path, everyone=True)
        assert len(emu.requests) == requests  # 5 runs or 500: the same requests


async def test_a_cluster_serving_workloads_only_at_v1beta1_costs_one_more_request_and_round(
        tmp_path: Path) -> None:
    async with KubeEmulator(every_example(), latency=ROUND_LATENCY) as emu:
        emu.serve_versions("kueue.x-k8s.io", ["v1beta1"])
        listed = await runs(emu, tmp_path)
        assert len(emu.requests) == 2 + len(LISTS) and emu.rounds() == 2
        queued = next(line for line in listed.lines if line.run == "l4-job-waiting-for-quota")
        assert (queued.first_incomplete, queued.state) == ("Kueue admission", "pending")


async def test_pods_that_could_not_be_read_are_unavailable_never_none(tmp_path: Path) -> None:
    async with KubeEmulator(every_example()) as emu:
        emu.fail("pods", status=503)
        listed = await runs(emu, tmp_path)
        assert listed.gaps["pods"].startswith("unavailable")
        oom = next(line for line in listed.lines if line.run == "l5-job-oomkilled")
        assert oom.state == "warning" and "unavailable" in oom.summary, oom
        card = render_runs_card(build_runs_card(listed, command="/tau runs", now=NOW))
        assert any(t.startswith("Could not read: pods: unavailable") for t in card_texts(card.blocks))
