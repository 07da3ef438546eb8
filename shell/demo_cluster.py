"""The demo cluster: the bundled example dumps, served in process by the Kubernetes API emulator.

Each demo run is one bundled example reduced to the objects really linked to
its run (the same linkage `evaluate()` uses; the examples' distractor
objects would collide between examples) and renamed so every run name is
unique. One run changes while watched: it waits for quota, then runs, then
succeeds — three bundled examples played in turn as the demo clock passes.
The clock starts at the examples' own judging time, so every "since" reads
as the example meant it. The workspace descriptor, identity file and owner
routes are written to a temporary directory that the demo's settings name.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from workers.diagnosis.linkage import find_run, meta

from .kube_emulator import KubeEmulator, running_emulator

START = datetime(2026, 11, 30, 10, 30, tzinfo=UTC)  # the examples' `taugrid.io/example-now`
NAMESPACE = "team-vision"
CHANNEL = "C0DEMO"
USER = "U0DEMO"
IDENTITY = {"user": "alice@example.com", "groups": ["team-vision"]}
OWNERS = {
    "queue-owner": {"channel": "C0QUEUE", "usergroup": "S0QUEUE"},
    "platform": {"channel": "C0PLATFORM", "usergroup": "S0PLATFORM"},
    "node-pool-owner": {"channel": "C0NODEPOOL", "usergroup": "S0NODEPOOL"},
    "image-owner": {"channel": "C0IMAGES"},
}


@dataclass(frozen=True)
class DemoRun:
    name: str
    layer: int
    what: str
    example: str
    example_run: str


RUNS: tuple[DemoRun, ...] = (
    DemoRun("llama-ft-queued", 4, "waiting for quota in its ClusterQueue",
            "l4-job-waiting-for-quota", "llama-ft-7b"),
    DemoRun("ray-pretrain-huge", 4, "asks for more GPUs than the queue can ever grant",
            "l4-rayjob-exceeds-max-quota", "ray-pretrain-13b"),
    DemoRun("llama-ft-nogpu", 5, "admitted, but no node has a free GPU",
            "l5-job-unschedulable-gpu", "llama-ft-7b"),
    DemoRun("vit-pretrain", 5, "image pull unauthorized", "l5-job-imagepull-unauthorized", "vit-pretrain"),
    DemoRun("llama-ft-oom", 5, "OOMKilled in a crash loop", "l5-job-oomkilled", "llama-ft-7b"),
    DemoRun("ray-pretrain-crash", 5, "the Ray head crash-loops", "l5-rayjob-head-crashloop",
            "ray-pretrain-13b"),
    DemoRun("ray-pretrain-live", 7, "running: layer 7 is next", "l7-rayjob-running", "ray-pretrain-13b"),
    DemoRun("ray-data-prep", 7, "the Ray job failed", "l7-rayjob-failed-submission", "ray-data-prep"),
)
MISSING_RUN = DemoRun("llama-ft-typo", 3, "does not exist (layer 3: run not found)", "", "")
WATCHED = "resnet-watch"
# (seconds after START, example, its run): the watched run's life, one example per stage.
WATCHED_STAGES: tuple[tuple[int, str, str], ...] = (
    (0, "l4-job-waiting-for-quota", "llama-ft-7b"),
    (40, "l7-job-running-healthy", "resnet-sweep-3"),
    (100, "l7-job-succeeded", "clip-eval-2"),
)


def example_objects(example: str) -> list[dict[str, Any]]:
    text = (resources.files("workers") / "examples" / f"{example}.json").read_text(encoding="utf-8")
    return list(json.loads(text)["items"])


def run_objects(example: str, example_run: str, name: str) -> list[dict[str, Any]]:
    """The example's run and the objects linked to it (with its events), renamed to ``name``.

    Uids are renamed too: examples built from one fixture share them, and Kueue links a
    Workload to its job by uid (`kueue.x-k8s.io/job-uid`).
    """
    raw = example_objects(example)
    text = json.dumps(raw).replace(example_run, name)
    for uid in {meta(o).get("uid") for o in raw} - {None, ""}:
        text = text.replace(str(uid), str(uuid.uuid5(uuid.NAMESPACE_URL, f"{name}/{uid}")))
    objects = json.loads(text)
    linked = find_run(objects, name, NAMESPACE)
    keep = [o for o in (linked.run, linked.raycluster, linked.submitter_job) if o is not None]
    keep += linked.workloads + linked.pods + list(linked.claims.values())
    names = {meta(o).get("name") for o in keep}
    for obj in objects:
        if obj.get("kind") == "Event":
            ref = obj.get("involvedObject") or obj.get("regarding") or {}
            if ref.get("name") in names:
                keep.append(obj)
    return keep


def platform_objects() -> list[dict[str, Any]]:
    text = (resources.files("shell") / "demo_platform.json").read_text(encoding="utf-8")
    return list(json.loads(text)["items"])


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    m = meta(obj)
    return (str(obj.get("kind")), str(m.get("namespace") or ""), str(m.get("name")))


@dataclass
class DemoCluster:
    """The emulator with the demo runs, and the files that point taubot at it."""

    emulator: KubeEmulator
    directory: Path
    stage: int = 0
    _watched: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def workspaces_dir(self) -> Path:
        return self.directory / "workspaces"

    @property
    def identity_file(self) -> Path:
        return self.directory / "identity.yaml"

    def _play_stage(self, index: int) -> None:
        for kind, ns, name in self._watched:
            self.emulator.delete(kind, ns or None, name)
        _, example, example_run = WATCHED_STAGES[index]
        objects = run_objects(example, example_run, WATCHED)
        for obj in objects:
            self.emulator.upsert(obj)
        self._watched = [_key(o) for o in objects]
        self.stage = index

    def advance(self, now: datetime) -> None:
        """Play the watched run's stages that are due by ``now``."""
        while self.stage + 1 < len(WATCHED_STAGES) and \
                now >= START + timedelta(seconds=WATCHED_STAGES[self.stage + 1][0]):
            self._play_stage(self.stage + 1)

    def write_files(self) -> None:
        self.workspaces_dir.mkdir(parents=True, exist_ok=True)
        descriptor = {
            "apiVersion": "taugrid.io/v1alpha1", "kind": "WorkspaceConnection",
            "metadata": {"name": "vision"},
            "spec": {"cluster": {"server": self.emulator.base_url}, "namespace": NAMESPACE,
                     "workspace": "vision", "localQueue": "team-a", "slack": {"channels": [CHANNEL]},
                     "owners": OWNERS},
        }
        (self.workspaces_dir / "vision.yaml").write_text(yaml.safe_dump(descriptor, sort_keys=False))
        self.identity_file.write_text(yaml.safe_dump({"users": {USER: IDENTITY}, "map_by_email": False}))


@contextlib.contextmanager
def demo_cluster() -> Iterator[DemoCluster]:
    """The demo cluster served on a loopback port for as long as the block runs."""
    objects = platform_objects()
    for run in RUNS:
        objects += run_objects(run.example, run.example_run, run.name)
    with tempfile.TemporaryDirectory(prefix="taubot-demo-") as tmp, running_emulator(objects) as emu:
        cluster = DemoCluster(emulator=emu, directory=Path(tmp))
        cluster._play_stage(0)
        cluster.write_files()
        yield cluster


def run_table() -> list[str]:
    """The demo runs as lines for the shell's banner."""
    lines = [f"  {r.name:<20} layer {r.layer}: {r.what}" for r in RUNS]
    lines.append(f"  {MISSING_RUN.name:<20} layer 3: {MISSING_RUN.what}")
    lines.append(f"  {WATCHED:<20} changes while watched: queued → running → succeeded")
    return lines


__all__ = ["CHANNEL", "RUNS", "START", "USER", "WATCHED", "DemoCluster", "demo_cluster", "run_table"]
