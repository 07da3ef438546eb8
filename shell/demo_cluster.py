"""The demo cluster: the bundled example dumps, served in process by the Kubernetes API emulator.

Each demo run is one bundled example reduced to the objects really linked to
its run (the same linkage `evaluate()` uses; the examples' distractor
objects would collide between examples) and renamed so every run name is
unique. One run changes while watched: it waits for quota, then runs, then
succeeds — three bundled examples played in turn as the demo clock passes.
The clock starts at the examples' own judging time, so every "since" reads
as the example meant it. The workspace descriptor, identity file and owner
routes are written to a temporary directory that the demo's settings name.

Beside the objects, the demo serves what a live status and `/tau logs` read
(generated with the examples by `python -m bench.make_examples` into
`demo_platform.json`, real shapes): the Nodes the runs' pods are bound to
(one with a hardware XID), dcgm-exporter pods and their `/metrics` through
`pods/proxy`, timestamped pod logs (progress, an OOM crash loop, an NCCL
hang), the Ray driver logs through the head services' `services/proxy`, and
an MLflow tracking server (`shell/mlflow_emulator.py`) with the runs' records.
A kubelet (`shell/demo_kubelet.py`) runs the pods created on a node, so
*Validate these nodes* answers as it would on a cluster.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from workers.diagnosis.linkage import find_run, meta

from .demo_kubelet import DemoKubelet
from .kube_emulator import KubeEmulator, running_emulator
from .mlflow_emulator import MlflowEmulator, running_mlflow

START = datetime(2026, 11, 30, 10, 30, tzinfo=UTC)  # the examples' `taugrid.io/example-now`
NAMESPACE = "team-vision"
# The workspace's LocalQueue, as SPEC §8, the README and `taubot config init` name it (<workspace>-default);
# the bundled examples' runs, built on tests/fixtures/k8s.py's, carry EXAMPLE_QUEUE and are renamed to it.
LOCAL_QUEUE = "vision-default"
EXAMPLE_QUEUE = "team-a"
CHANNEL = "C0DEMO"
USER = "U0DEMO"
IDENTITY = {"user": "alice@example.com", "groups": ["team-vision"]}
OWNERS = {
    "queue-owner": {"channel": "C0QUEUE", "usergroup": "S0QUEUE"},
    "platform": {"channel": "C0PLATFORM", "usergroup": "S0PLATFORM"},
    "node-pool-owner": {"channel": "C0NODEPOOL", "usergroup": "S0NODEPOOL"},
    "image-owner": {"channel": "C0IMAGES"},
}


GPU_NODE = "aks-a100-38141759-vmss{:06d}"  # the examples' GPU node pool (bench/make_examples.py)
FAULTY_NODE = GPU_NODE.format(8)  # XIDErrors: Xid 79, the GPU has fallen off the bus


@dataclass(frozen=True)
class DemoRun:
    name: str
    layer: int
    what: str
    example: str
    example_run: str
    # Nodes for the run's GPU pods, in order (empty: the example's): one run's pods per node, so
    # each GPU on a node is attributed to one pod, as dcgm-exporter does.
    nodes: tuple[str, ...] = ()
    # Other objects of the example the demo serves too (by name): a preemptor's Job and Workload,
    # which the user may read, so the card can name what took the run's place.
    also: tuple[str, ...] = ()


RUNS: tuple[DemoRun, ...] = (
    DemoRun("llama-ft-queued", 4, "waiting for quota in its ClusterQueue",
            "l4-job-waiting-for-quota", "llama-ft-7b"),
    DemoRun("ray-pretrain-huge", 4, "asks for more GPUs than the queue can ever grant",
            "l4-rayjob-exceeds-max-quota", "ray-pretrain-13b"),
    DemoRun("ray-sweep-preempted", 4, "preempted by a higher-priority run (which it names), requeued",
            "l4-rayjob-preempted", "ray-sweep-lr", also=("urgent-eval", "job-urgent-eval-")),
    DemoRun("llama-ft-nogpu", 5, "admitted, but no node has a free GPU",
            "l5-job-unschedulable-gpu", "llama-ft-7b"),
    DemoRun("vit-pretrain", 5, "image pull unauthorized", "l5-job-imagepull-unauthorized", "vit-pretrain"),
    DemoRun("llama-ft-oom", 5, "OOMKilled in a crash loop", "l5-job-oomkilled", "llama-ft-7b"),
    DemoRun("ray-pretrain-crash", 5, "the Ray head crash-loops", "l5-rayjob-head-crashloop",
            "ray-pretrain-13b"),
    DemoRun("ray-pretrain-live", 7, "running and progressing (driver log, GPUs, experiment record)",
            "l7-rayjob-running", "ray-pretrain-13b"),
    DemoRun("ray-data-prep", 7, "the Ray job failed", "l7-rayjob-failed-submission", "ray-data-prep",
            (GPU_NODE.format(2), GPU_NODE.format(3))),
    DemoRun("resnet-hang", 7, "running, but hung in an NCCL collective", "l7-job-running-healthy",
            "resnet-sweep-3", (GPU_NODE.format(6), GPU_NODE.format(7))),
    DemoRun("llama-ft-xid", 6, "running on a node whose GPU fell off the bus (Xid 79)",
            "l7-job-running-healthy", "resnet-sweep-3", (FAULTY_NODE, GPU_NODE.format(9))),
)
MISSING_RUN = DemoRun("llama-ft-typo", 3, "does not exist (layer 3: run not found)", "", "")
WATCHED = "resnet-watch"
# (seconds after START, example, its run): the watched run's life, one example per stage.
WATCHED_STAGES: tuple[tuple[int, str, str], ...] = (
    (0, "l4-job-waiting-for-quota", "llama-ft-7b"),
    (40, "l7-job-running-healthy", "resnet-sweep-3"),
    (100, "l7-job-succeeded", "clip-eval-2"),
)
WATCHED_NODES = (GPU_NODE.format(4), GPU_NODE.format(5))


def example_objects(example: str) -> list[dict[str, Any]]:
    text = (resources.files("workers") / "examples" / f"{example}.json").read_text(encoding="utf-8")
    return list(json.loads(text)["items"])


def _gpu_pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == "Pod" and any(
        "nvidia.com/gpu" in ((c.get("resources") or {}).get("limits") or {})
        for c in (o.get("spec") or {}).get("containers") or [])]


def run_objects(example: str, example_run: str, name: str,
                nodes: tuple[str, ...] = (), also: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The example's run and the objects linked to it (with its events), renamed to ``name``.

    Uids are renamed too: examples built from one fixture share them, and Kueue links a
    Workload to its job by uid (`kueue.x-k8s.io/job-uid`); so is the LocalQueue, to the
    workspace's (a quoted name only: queue-name labels, queueName). ``nodes``: where its GPU pods run.
    """
    raw = example_objects(example)
    text = json.dumps(raw).replace(example_run, name).replace(f'"{EXAMPLE_QUEUE}"', f'"{LOCAL_QUEUE}"')
    for uid in {meta(o).get("uid") for o in raw} - {None, ""}:
        text = text.replace(str(uid), str(uuid.uuid5(uuid.NAMESPACE_URL, f"{name}/{uid}")))
    objects = json.loads(text)
    linked = find_run(objects, name, NAMESPACE)
    keep = [o for o in (linked.run, linked.raycluster, linked.submitter_job) if o is not None]
    keep += linked.workloads + linked.pods + list(linked.claims.values())
    keep += [o for o in objects if o.get("kind") in ("Job", "Workload")
             and any((meta(o).get("name") or "").startswith(prefix) for prefix in also)]
    names = {meta(o).get("name") for o in keep}
    for obj in objects:
        if obj.get("kind") == "Event":
            ref = obj.get("involvedObject") or obj.get("regarding") or {}
            if ref.get("name") in names:
                keep.append(obj)
    for pod, node in zip(_gpu_pods(keep), nodes, strict=False):
        pod["spec"]["nodeName"] = node
    return keep


# The demo's one ClusterQueue tells a true queue (issue 35): its reservation is what the Workloads
# admitted to it hold (bench/make_examples.py `demo_queue` sums them into demo_platform.json) and its
# quota leaves FREE_GPUS unreserved — fewer than the preempted run's 16, so Kueue really keeps it and
# llama-ft-queued waiting (BestEffortFIFO admits whatever fits). Kueue's own messages say the same
# numbers (flavorassigner.go: "insufficient unused quota for <resource> in flavor <f>, <n> more
# needed"; "… current podset request (<n>) > maximum capacity (<m>)").
FREE_GPUS = 8
# Time limits (the job label `kueue.x-k8s.io/max-exec-time-seconds`, which Kueue copies into the
# Workload's spec.maximumExecutionTimeSeconds): with urgent-eval's own 2 h, what frees the queue's
# GPUs by when, so llama-ft-queued's start has a `latest`; ray-pretrain-live's training ETA (its
# driver log, bench/make_examples.py) lands between them, and gives the `earliest` once read.
TIME_LIMITS = {"resnet-hang": 4 * 3600, "llama-ft-xid": 6 * 3600}
HUGE_WORKERS = 20  # ray-pretrain-huge's GPU workers (8 GPUs each): more than the quota could ever grant


def _queue_words(name: str, quota: int) -> tuple[tuple[str, str], ...]:
    """The numbers in a demo run's Kueue messages, as Kueue writes them for the demo's queue."""
    return {
        "llama-ft-queued": (("8 more needed", f"{32 - FREE_GPUS} more needed"),),
        WATCHED: (("8 more needed", f"{32 - FREE_GPUS} more needed"),),
        "ray-sweep-preempted": (("4 more needed", f"{16 - FREE_GPUS} more needed"),),
        "ray-pretrain-huge": (("current podset request (48)", f"current podset request ({HUGE_WORKERS * 8})"),
                              ("maximum capacity (40)", f"maximum capacity ({quota})")),
    }.get(name, ())


def kueue_story(name: str, objects: list[dict[str, Any]], quota: int | None = None) -> list[dict[str, Any]]:
    """A demo run's objects as the demo's Kueue holds them (see `FREE_GPUS`): its messages' numbers,
    its time limit, and ray-pretrain-huge's size. ``quota``: the ClusterQueue's nominal GPUs."""
    words = _queue_words(name, quota if quota is not None else cluster_queue_quota())
    if words:
        text = json.dumps(objects)
        for old, new in words:
            text = text.replace(old, new)
        objects = json.loads(text)
    for obj in objects:
        limit = TIME_LIMITS.get(name)
        if limit and obj.get("kind") == "Job":
            obj["metadata"].setdefault("labels", {})["kueue.x-k8s.io/max-exec-time-seconds"] = str(limit)
        if limit and obj.get("kind") == "Workload":
            obj["spec"]["maximumExecutionTimeSeconds"] = limit
        if name == "ray-pretrain-huge" and obj.get("kind") == "RayJob":
            for group in obj["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
                group.update(replicas=HUGE_WORKERS, minReplicas=HUGE_WORKERS, maxReplicas=HUGE_WORKERS)
        if name == "ray-pretrain-huge" and obj.get("kind") == "Workload":
            for pod_set in obj["spec"]["podSets"]:
                if pod_set["name"] == "gpu-workers":
                    pod_set["count"] = HUGE_WORKERS
    return objects


def demo_run_objects(run: DemoRun, quota: int | None = None) -> list[dict[str, Any]]:
    """A demo run's objects as the demo cluster serves them."""
    objects = run_objects(run.example, run.example_run, run.name, run.nodes, run.also)
    return kueue_story(run.name, objects, quota)


def watched_objects(index: int) -> list[dict[str, Any]]:
    """The watched run at one stage of its life, told as one run: the creation time of its first
    stage throughout, its own nodes, and in the end the pod that succeeded (the succeeded
    example's earlier OOMKilled attempt belongs to another story)."""
    _, example, example_run = WATCHED_STAGES[index]
    objects = run_objects(example, example_run, WATCHED, WATCHED_NODES if index else ())
    _, first_example, first_run = WATCHED_STAGES[0]
    created = next(meta(o)["creationTimestamp"] for o in run_objects(first_example, first_run, WATCHED)
                   if o.get("kind") == "Job")
    kept = []
    for obj in objects:
        if obj.get("kind") == "Job":
            obj["metadata"]["creationTimestamp"] = created
            if index == len(WATCHED_STAGES) - 1:
                obj["status"].pop("failed", None)
        if obj.get("kind") == "Pod" and (obj.get("status") or {}).get("phase") == "Failed":
            continue
        kept.append(obj)
    return kueue_story(WATCHED, kept) if index == 0 else kept


def _platform() -> dict[str, Any]:
    return dict(json.loads((resources.files("shell") / "demo_platform.json").read_text(encoding="utf-8")))


def platform_objects() -> list[dict[str, Any]]:
    return list(_platform()["items"])


def cluster_queue_quota() -> int:
    """The demo ClusterQueue's nominal GPUs (demo_platform.json)."""
    cq = next(o for o in platform_objects() if o.get("kind") == "ClusterQueue")
    return int(cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"])


PROFILE, FLAVOR = "a100-8x", "a100"  # the ClusterQueue's flavor (demo_platform.json)


def topology_objects() -> list[dict[str, Any]]:
    """What `cluster validate topology` reads, for the demo's GPU pool: a TauCluster (SPEC §8,
    cluster-scoped) whose one ready profile lists the ClusterQueue's ResourceFlavor, and that
    flavor (Kueue v1beta2 `resourceflavor_types.go`) selecting the pool by AKS's agentpool label
    and tolerating its `sku=gpu:NoSchedule` taint, as Kueue then adds to admitted pods."""
    created = "2026-10-31T10:00:00Z"  # with the workspace's other platform objects
    return [
        {"apiVersion": "taugrid.io/v1alpha1", "kind": "TauCluster",
         "metadata": {"name": "aks-east", "creationTimestamp": created, "generation": 4},
         "status": {"profileSetRevision": "r42",
                    "profiles": [{"name": PROFILE, "ready": True, "resourceFlavors": [FLAVOR]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": FLAVOR, "creationTimestamp": created, "generation": 1},
         "spec": {"nodeLabels": {"kubernetes.azure.com/agentpool": "a100"}, "tolerations": [
             {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}},
    ]


def serve_demo_io(emulator: KubeEmulator, mlflow: MlflowEmulator) -> None:
    """What the demo serves besides objects (the ``demo`` part of demo_platform.json)."""
    io = _platform().get("demo") or {}
    for log in io.get("podLogs") or []:
        key = (log["namespace"], log["pod"], log["container"])
        emulator.pod_logs[key] = log["text"]
        if log.get("previous") is not None:
            emulator.previous_logs[key] = log["previous"]
    for proxy in io.get("proxies") or []:
        emulator.register_proxy(proxy["kind"], proxy["namespace"], proxy["name"], proxy["port"],
                                proxy["path"], proxy["body"], content_type=proxy["contentType"])
    for record in io.get("mlflow") or []:
        mlflow.add_run(record["run_id"], {"taugrid.io/run": record["run"]}, record["metrics"])


def _key(obj: dict[str, Any]) -> tuple[str, str, str]:
    m = meta(obj)
    return (str(obj.get("kind")), str(m.get("namespace") or ""), str(m.get("name")))


@dataclass
class DemoCluster:
    """The emulator with the demo runs, and the files that point taubot at it."""

    emulator: KubeEmulator
    directory: Path
    mlflow_uri: str = ""
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
        objects = watched_objects(index)
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
                     "workspace": "vision", "localQueue": LOCAL_QUEUE, "slack": {"channels": [CHANNEL]},
                     "owners": OWNERS, "experiments": {"mlflow": {"uri": self.mlflow_uri}}},
        }
        (self.workspaces_dir / "vision.yaml").write_text(yaml.safe_dump(descriptor, sort_keys=False))
        self.identity_file.write_text(yaml.safe_dump({"users": {USER: IDENTITY}, "map_by_email": False}))


@contextlib.contextmanager
def demo_cluster(now: Callable[[], datetime] = lambda: START) -> Iterator[DemoCluster]:
    """The demo cluster served on a loopback port for as long as the block runs; ``now`` is the
    demo's clock (its kubelet stamps the pods it runs with it)."""
    objects = platform_objects() + topology_objects()
    quota = cluster_queue_quota()
    for run in RUNS:
        objects += demo_run_objects(run, quota)
    with tempfile.TemporaryDirectory(prefix="taubot-demo-") as tmp, running_emulator(objects) as emu, \
            running_mlflow() as mlflow:
        emu.kubelet_log_states = True  # a container that never started says why, as the kubelet does
        serve_demo_io(emu, mlflow)
        DemoKubelet(emu, now).attach()  # runs the pods created on a node (`cluster validate nodes`)
        cluster = DemoCluster(emulator=emu, directory=Path(tmp), mlflow_uri=mlflow.base_url)
        cluster._play_stage(0)
        cluster.write_files()
        yield cluster


def run_table() -> list[str]:
    """The demo runs as lines for the shell's banner."""
    lines = [f"  {r.name:<20} layer {r.layer}: {r.what}" for r in RUNS]
    lines.append(f"  {MISSING_RUN.name:<20} layer 3: {MISSING_RUN.what}")
    lines.append(f"  {WATCHED:<20} changes while watched: queued → running → succeeded")
    return lines


__all__ = ["CHANNEL", "FAULTY_NODE", "FLAVOR", "PROFILE", "RUNS", "START", "USER", "WATCHED",
           "WATCHED_STAGES", "DemoCluster", "DemoRun", "cluster_queue_quota", "demo_cluster",
           "demo_run_objects", "kueue_story", "run_objects", "run_table", "topology_objects",
           "watched_objects"]
