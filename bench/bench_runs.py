"""`/tau runs` over 50 and 500 runs: `python -m bench.bench_runs [--rtt-ms 20] [--repeat 5]` (issue 37).

The namespace is every bundled example's run, cloned under new names and uids until it holds N
runs (`many_runs`, also the tests' namespace), served by the Kubernetes API emulator in its own
process (`bench/emulator_process.py`) answering every request after the RTT. We time the whole
answer — the impersonated client, the LISTs, judging every run with `evaluate()`, the card —
and print the requests (counted by the emulator), the rounds (measured with the in-thread
emulator, which numbers them: `KubeEmulator.rounds`), the median and worst wall time, and the
median CPU time of the client's process (the emulator's own work is in its process: on a loaded
machine the wall time moves, the client's CPU much less).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.emulator_process import EmulatorProcess
from bench.make_examples import EXAMPLES
from shell.demo_cluster import run_objects
from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from tests.live.conftest import workspace_objects, write_descriptor
from workers.config.workspaces import load_descriptors
from workers.diagnosis.linkage import SUBMITTED_BY_ANNOTATION
from workers.flows.runs import RunsList, live_runs
from workers.kube.client import Identity, KubeClients
from workers.render.runs_card import build_runs_card, render_runs_card

NOW = k8s.T0 + timedelta(minutes=30)  # the examples' judging time
IDENTITY = Identity(user="alice@example.com", groups=("team-vision",))
# Every bundled example that has a run (the two "not found" ones hold only other runs).
WITH_RUN = [(ex.file.removesuffix(".json"), ex.run) for ex, _ in EXAMPLES if ex.kind is not None]


def every_example(owner: str | None = IDENTITY.user) -> list[dict[str, Any]]:
    """The workspace plus every example's run under its example's name, submitted by ``owner``."""
    objects = workspace_objects()
    for example, run in WITH_RUN:
        for obj in run_objects(example, run, example):
            if obj.get("kind") in ("Job", "RayJob") and obj["metadata"]["name"] == example and owner:
                obj["metadata"].setdefault("annotations", {})[SUBMITTED_BY_ANNOTATION] = owner
            objects.append(obj)
    return objects


def many_runs(count: int) -> list[dict[str, Any]]:
    """``count`` runs cloned round-robin from the examples (new names and uids), all Alice's."""
    base = every_example()
    of_run = {name: [o for o in base if name in str(o["metadata"].get("name", ""))
                     or name in str((o.get("involvedObject") or {}).get("name", ""))] for name, _ in WITH_RUN}
    objects = workspace_objects()
    for i in range(count):
        name, _ = WITH_RUN[i % len(WITH_RUN)]
        clone = f"r{i:04d}-{name}"[:63].rstrip("-")
        text = json.dumps(of_run[name]).replace(name, clone)
        for uid in {o["metadata"].get("uid") for o in of_run[name]} - {None}:
            text = text.replace(uid, str(uuid.uuid5(uuid.NAMESPACE_URL, f"{clone}/{uid}")))
        objects += copy.deepcopy(json.loads(text))
    return objects


async def answer(directory: Path) -> tuple[RunsList, int]:
    """The whole `/tau runs --all` answer; the card's block count."""
    listed = await live_runs(load_descriptors(directory), KubeClients(), IDENTITY, NOW, workspace="vision",
                             everyone=True)
    card = render_runs_card(build_runs_card(listed, command="/tau runs --all", now=NOW))
    return listed, len(card.blocks)


async def rounds_of(objects: list[dict[str, Any]], rtt: float) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        async with KubeEmulator(objects, latency=rtt) as emu:
            write_descriptor(Path(tmp), emu.base_url)
            await answer(Path(tmp))
            return emu.rounds()


def measure(count: int, rtt: float, repeat: int) -> dict[str, Any]:
    objects = many_runs(count)
    rounds = asyncio.run(rounds_of(objects, rtt))
    times: list[float] = []
    cpu: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, EmulatorProcess(objects, rtt) as emu:
        write_descriptor(Path(tmp), emu.base_url)
        before = emu.request_count()
        listed, blocks = asyncio.run(answer(Path(tmp)))  # warm-up: imports, first connection
        requests = emu.request_count() - before
        for _ in range(repeat):
            started, used = time.perf_counter(), time.process_time()
            listed, blocks = asyncio.run(answer(Path(tmp)))
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - used)
    return {"runs": count, "lines": len(listed.lines), "requests": requests, "rounds": rounds,
            "blocks": blocks, "median_s": statistics.median(times), "worst_s": max(times),
            "cpu_s": statistics.median(cpu)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rtt-ms", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--runs", type=int, nargs="*", default=[50, 500])
    args = parser.parse_args()
    print(f"/tau runs --all against the emulator in its own process, RTT {args.rtt_ms:g} ms, "
          f"{args.repeat} timed answers each")
    print(f"{'runs':>6} {'lines':>6} {'requests':>9} {'rounds':>7} {'blocks':>7} {'median':>9} {'worst':>9} "
          f"{'client CPU':>11}")
    for count in args.runs:
        r = measure(count, args.rtt_ms / 1000, args.repeat)
        print(f"{r['runs']:>6} {r['lines']:>6} {r['requests']:>9} {r['rounds']:>7} {r['blocks']:>7} "
              f"{r['median_s'] * 1000:>7.0f}ms {r['worst_s'] * 1000:>7.0f}ms {r['cpu_s'] * 1000:>9.0f}ms")


if __name__ == "__main__":
    main()
