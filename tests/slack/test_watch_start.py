"""`--watch` of a waiting run: the start estimate moves as the holders finish (issue 35, SPEC §5b and §7).

Real HTTP to the app, real Redis and rq workers, the Kubernetes API emulator whose objects change
between ticks and the fake Slack, as in test_watch.py; the watch's clock is the app's injected one,
stepped by each tick. Shapes: Kueue v1beta2 Workloads (tests/fixtures/k8s.py, `spec.maximumExecutionTimeSeconds`
as apis/kueue/v1beta2/workload_types.go declares it), a ClusterQueue's `status.flavorsReservation` as
Kueue keeps it (clusterqueue_types.go), and the pending Workload's QuotaReserved message as Kueue's
flavorassigner.go rewrites it on each scheduling attempt ("insufficient unused quota for
nvidia.com/gpu in flavor a100, N more needed").
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fixtures import k8s
from tests.fixtures.blocks import card_text

from .conftest import ALICE_IDENTITY, SlackApp
from .test_watch import RUN, T0, apply, card, cluster, identity_file, start_watch, tick, updates

ADMITTED_AT = 4.5 * 3600  # the holders were admitted at 10:00 (T0 is 05:30; the watch starts at 10:30)


def holder(name: str, limit: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Another run of team-vision holding 8 GPUs of cluster-queue, with a time limit or none."""
    job = k8s.job(name, t0=T0, at=ADMITTED_AT - 1, active=1)
    wl = k8s.workload(job, t0=T0, at=ADMITTED_AT)
    if limit:
        job["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = str(limit)
        wl["spec"]["maximumExecutionTimeSeconds"] = limit
    return job, wl


def waiting_behind_three(needed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """train-a asks for 2 × 8 GPUs of cluster-queue (24, all held): Kueue's message says how many more."""
    job = k8s.job(RUN, suspend=True, parallelism=2, t0=T0)
    wl = k8s.workload(job, state="waiting_for_quota", t0=T0)
    qr = next(c for c in wl["status"]["conditions"] if c["type"] == "QuotaReserved")
    qr["message"] = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in "
                     f"flavor a100, {needed} more needed")
    return job, wl


def start_line(app: SlackApp) -> str:
    _, message = card(app)
    return next(line for line in card_text(message["blocks"]).split("\n") if line.startswith("*Start:*"))


def test_the_watched_cards_start_moves_when_a_holder_finishes_and_an_unchanged_tick_stays_cheap(
        slack_app_factory: Callable[..., SlackApp], tmp_path: Path) -> None:
    """bert (no time limit) holds 8 of the 24 GPUs, llama-a 8 until its 2 h limit (12:00), gpt 8 until its
    3 h (13:00): the run's 16 are free at the latest 13:00. bert finishes; Kueue's bookkeeping gives its 8
    back and rewrites the run's message (8 more needed): at the next tick the card says 12:00 — one edit,
    the same card — and a tick that finds nothing changed reads two objects, as before."""
    app = slack_app_factory(identity_file=identity_file(tmp_path), slack_channel_burst=8)
    job, waiting = waiting_behind_three(16)
    holders = [holder("bert", None), holder("llama-a", 2 * 3600), holder("gpt", 3 * 3600)]
    objects = [k8s.cluster_queue("cluster-queue", gpu_quota=24, gpu_used=24, pending=1, admitted=3), job, waiting,
               *(o for pair in holders for o in pair)]
    with cluster(app, objects) as emu:
        start_watch(app)
        assert start_line(app).startswith("*Start:* at the latest 13:00 UTC (the holders' time limits)")
        ts, _ = card(app)
        emu.clear_requests()
        tick(app)
        unchanged = list(emu.requests)
        assert len(unchanged) == 2 and updates(app) == []  # the run and its Workloads, nothing else
        assert all(r.header_values("Impersonate-User") == [ALICE_IDENTITY["user"]] for r in unchanged)

        bert_wl = holders[0][1]
        emu.delete("Workload", k8s.NS, bert_wl["metadata"]["name"])
        emu.delete("Job", k8s.NS, "bert")
        apply(emu, [k8s.cluster_queue("cluster-queue", gpu_quota=24, gpu_used=16, pending=1, admitted=2),
                    waiting_behind_three(8)[1]])
        tick(app)
        [edit] = updates(app)
        assert edit.params["ts"] == ts  # the card, edited in place
        assert start_line(app).startswith("*Start:* at the latest 12:00 UTC (the holders' time limits)")

        emu.clear_requests()
        tick(app)
        assert len(emu.requests) == 2 and len(updates(app)) == 1
