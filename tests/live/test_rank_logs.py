"""Every rank's log in a live status (issue 40, SPEC §5c): one round, bounded, impersonated.

Through the emulator (real HTTP, kubernetes_asyncio, the real collection code). The ranks'
lines are LlamaFactory#7396's watchdog pair (tests/diagnosis/test_ranks.py `lagging`, values set
there), one pod per rank of an Indexed Job. The emulator answers every request after
`LATENCY`, so a request's round is how many round trips the status waited for before sending it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.diagnosis.test_node_health import node
from tests.diagnosis.test_ranks import indexed_job, lagging, pod_names, stamped
from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from workers.collect.investigate import diagnose_live
from workers.collect.logs.ranks import MAX_PODS, RANK_BYTES, RANK_LINES
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity

from .conftest import workspace_objects, write_descriptor

NOW = k8s.T0 + timedelta(minutes=60)
ALICE = Identity(user="alice@example.com", groups=("team-vision",))
LATENCY = 0.2  # long enough that 32 concurrent reads leave within one answer time, even on a busy runner


def served(emu: KubeEmulator, objs: list[dict], per_rank: dict[int, list[str]]) -> None:
    for i, name in enumerate(pod_names(objs)):
        lines = ["step=4500 loss=1.91"] * 600 + per_rank.get(i, [])  # more than the 500-line bound
        emu.pod_logs[(k8s.NS, name, "trainer")] = "".join(f"{t} {text}\n" for t, text in stamped(lines))


def cluster(objs: list[dict]) -> list[dict]:
    """The workspace, the run's objects and the Nodes its pods run on (gpu-a0 …)."""
    names = sorted({o["spec"]["nodeName"] for o in objs if o["kind"] == "Pod"})
    return [*workspace_objects(), *objs, *(node(**{"metadata.name": n}) for n in names)]


async def status(emu: KubeEmulator, tmp_path: Path):  # noqa: ANN201
    write_descriptor(tmp_path, emu.base_url)
    return await diagnose_live(load_descriptors(tmp_path), run="llama-ft-7b", identity=ALICE, now=NOW,
                               workspace="vision")


async def test_a_healthy_32_rank_run_reads_no_rank_log(tmp_path: Path) -> None:
    objs = indexed_job(32)
    async with KubeEmulator(cluster(objs), latency=LATENCY) as emu:
        served(emu, objs, {})
        d = (await status(emu, tmp_path)).diagnosis
        assert d.phase("Runtime progress").culprit is None
        assert len([r for r in emu.requests if r.path.endswith("/log")]) == 1 and emu.rounds() == 3


async def test_a_32_rank_status_reads_every_rank_in_one_more_round_and_names_the_culprit(tmp_path: Path) -> None:
    objs = indexed_job(32)
    async with KubeEmulator(cluster(objs), latency=LATENCY) as emu:
        served(emu, objs, lagging(32, 17))
        d = (await status(emu, tmp_path)).diagnosis
        check = d.phase("Runtime progress")
        assert check.culprit is not None and check.culprit.rank == 17 and check.culprit.node == "gpu-a17"
        requests = list(emu.requests)
        logs = [r for r in requests if r.path.endswith("/log")]
        # The run's main log read, and the 31 other ranks' tails, each bounded in lines and bytes;
        # rank 0's tail is the main read's own (its last 500 lines, `ranks.tail_of`), not read twice.
        assert len(logs) == len({r.path for r in logs}) == 32, len(logs)
        ranks = [r for r in logs if r.query.get("limitBytes")]
        assert len(ranks) == 31
        assert all(r.query["tailLines"] == str(RANK_LINES + 1) and r.query["limitBytes"] == str(RANK_BYTES)
                   for r in ranks)
        # The run's log in round 3 (as before); every rank's tail together in one more round — on a
        # first sighting of the hang (tests/live/test_rounds_every_case.py: the next status, 3 rounds).
        [main] = [r for r in logs if not r.query.get("limitBytes")]
        [rank_round] = {r.round for r in ranks}  # one round for all 31 …
        assert rank_round == main.round + 1 and emu.rounds() == 4, (main.round, rank_round, emu.rounds())
        assert all(r.header_values("Impersonate-User") == ["alice@example.com"] for r in requests)
        print(f"32-rank status: {len(requests)} requests, {emu.rounds()} rounds, {len(logs)} log reads")


async def test_more_pods_than_the_bound_are_sampled_and_the_answer_says_so(tmp_path: Path) -> None:
    objs = indexed_job(80)
    async with KubeEmulator(cluster(objs), latency=LATENCY) as emu:
        served(emu, objs, lagging(80, 17))
        d = (await status(emu, tmp_path)).diagnosis
        logs = [r for r in emu.requests if r.path.endswith("/log")]
        # rank 0 (sampled first) is the main read's pod: its tail comes from that read
        assert len([r for r in logs if r.query.get("limitBytes")]) == MAX_PODS - 1
        assert len({r.path for r in logs}) == MAX_PODS
        assert f"{MAX_PODS} of 80 pods read" in d.phase("Runtime progress").summary


async def test_a_rank_log_the_user_may_not_read_is_said_never_empty(tmp_path: Path) -> None:
    objs = indexed_job(4)
    async with KubeEmulator(cluster(objs), latency=LATENCY) as emu:
        served(emu, objs, lagging(4, 2))
        emu.forbid("get", "pods", user="alice@example.com", subresource="log")
        d = (await status(emu, tmp_path)).diagnosis
        check = d.phase("Runtime progress")
        assert check.culprit is None
        assert "permission denied" in check.summary
