"""Synthetic run snapshots of any size, for benchmarks and scale tests.

``synthetic_snapshot(n_pods)`` builds a kubectl List with the same shapes as the fixtures
(``tests.fixtures.k8s``): the run, its Workload, (for a RayJob) its RayCluster, ``n_pods`` pods
spread over ``ceil(n_pods / 8)`` GPU nodes with 8 GPUs each, a few events per failing pod, and
about 10 % unrelated objects (another run's Job, Workload, pods and events) that must not be linked.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from tests.fixtures import k8s
from tests.fixtures.k8s import Obj

RUN_NAME = "synth-run"
OTHER_RUN = "synth-other"


def _node(i: int) -> str:
    return f"aks-a100-55120934-vmss{i:06d}"


def synthetic_snapshot(
    n_pods: int,
    kind: Literal["RayJob", "Job"] = "RayJob",
    failing_pod_index: int | None = None,
) -> Obj:
    """A healthy running run of ``n_pods`` pods (one GPU per pod slot, 8 per node); the pod at
    ``failing_pod_index`` crash-loops (OOMKilled) and carries BackOff events.

    For a RayJob pod 0 is the head and the rest are workers of group ``gpu-workers``; for a Job
    every pod is a ``main`` pod. The asked run is ``RUN_NAME``.
    """
    if n_pods < 1:
        raise ValueError("n_pods must be >= 1")
    nodes = max(1, math.ceil(n_pods / 8))
    items: list[Obj] = []
    seen: set[str] = set()
    if kind == "RayJob":
        workers = max(n_pods - 1, 0)
        rj = k8s.rayjob(RUN_NAME, worker_groups=[("gpu-workers", workers, 1)] if workers else [])
        rc = k8s.raycluster(rayjob=rj, state="ready")
        cluster = rc["metadata"]["name"]
        rj["status"]["rayClusterStatus"] = {"state": "ready", "readyWorkerReplicas": workers}
        items += [rj, k8s.workload(rj, pods_ready=True), rc]
        for i in range(n_pods):
            node_type: Literal["head", "worker"] = "head" if i == 0 else "worker"
            cname = "ray-head" if i == 0 else "ray-worker"
            kw: Obj = {"node": _node(i % nodes), "gpus": 0 if i == 0 else 1, "created": 10}
            if i == failing_pod_index:
                kw["containers"] = [
                    k8s.crash_loop(cname, image=k8s.RAY_IMAGE, exit_code=137, reason="OOMKilled")
                ]
            kw["name"] = _unique(
                seen, lambda a, i=i, t=node_type: k8s.ray_pod_name(cluster, t, "gpu-workers", f"/{i}/{a}")
            )
            p = k8s.ray_pod(rc, node_type, index=i, **kw)
            items.append(p)
            if i == failing_pod_index:
                items += _failing_events(p, cname)
    else:
        j = k8s.job(RUN_NAME, parallelism=n_pods, active=n_pods, ready=n_pods, gpus=1)
        items += [j, k8s.workload(j, pods_ready=True)]
        for i in range(n_pods):
            kw = {"node": _node(i % nodes), "created": 10}
            if i == failing_pod_index:
                kw["containers"] = [k8s.crash_loop("trainer", exit_code=137, reason="OOMKilled")]
            kw["name"] = _unique(seen, lambda a, i=i: f"{RUN_NAME}-{k8s.suffix5(f'{RUN_NAME}/{i}/{a}')}")
            p = k8s.job_pod(j, i, **kw)
            items.append(p)
            if i == failing_pod_index:
                items += _failing_events(p, "trainer")
    items += _unrelated(max(1, len(items) // 10))
    return k8s.kube_list(*items)


def _unique(seen: set[str], make: Callable[[int], str]) -> str:
    """Generated 5-char suffixes collide at scale; retry like the API server's generateName."""
    attempt = 0
    while (name := make(attempt)) in seen:
        attempt += 1
    seen.add(name)
    return name


def _failing_events(p: Obj, container: str) -> list[Obj]:
    return [
        k8s.ev_backoff_restart(p, container),
        k8s.event_v1(
            p,
            "Pulled",
            f'Container image "{p["spec"]["containers"][0]["image"]}" already present on machine',
            type="Normal",
            count=6,
            first=60,
            last=1500,
            field_path=f"spec.containers{{{container}}}",
            host=p["spec"].get("nodeName"),
        ),
        k8s.event_v1_events(
            p,
            "BackOff",
            f"Back-off restarting failed container {container} in pod {p['metadata']['name']}",
            count=12,
            first=200,
            last=1500,
            field_path=f"spec.containers{{{container}}}",
            host=p["spec"].get("nodeName"),
        ),
    ]


def _unrelated(n: int) -> list[Obj]:
    """About ``n`` objects of another run: its Job, Workload, pods and a warning per pod."""
    pods = max(1, (n - 2) // 2)
    j = k8s.job(OTHER_RUN, parallelism=pods, active=pods, ready=pods, gpus=1, at=-600)
    out: list[Obj] = [j, k8s.workload(j, pods_ready=True, at=-599)]
    for i in range(pods):
        p = k8s.job_pod(j, i, node=_node(i), created=-590)
        out += [p, k8s.ev_unhealthy(p, "trainer", count=2, first=100, last=200)]
    return out
