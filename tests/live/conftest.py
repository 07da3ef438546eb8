"""Live-collection fixtures: a descriptor directory pointing at the Kubernetes API emulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.fixtures import k8s


def write_descriptor(directory: Path, server: str, *, name: str = "vision", namespace: str = k8s.NS,
                     channels: tuple[str, ...] = ("C012VISION",), ca: Path | None = None) -> Path:
    """A WorkspaceConnection (SPEC §8) whose cluster is the emulator's plain-http loopback URL."""
    doc = {
        "apiVersion": "taugrid.io/v1alpha1",
        "kind": "WorkspaceConnection",
        "metadata": {"name": name},
        "spec": {
            "cluster": {"server": server, **({"certificateAuthority": str(ca)} if ca else {})},
            "namespace": namespace,
            "workspace": name,
            "localQueue": "team-a",
            "slack": {"channels": list(channels)},
            "owners": {"platform": {"channel": "C0PLATFORM", "usergroup": "S0PLATFORM"}},
        },
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def workspace_objects(phase: str = "Ready") -> list[dict]:
    """The platform side of the workspace: TauWorkspace, LocalQueue and PVC blob-training."""
    return [k8s.tau_workspace("vision", phase=phase), k8s.local_queue("team-a"), k8s.pvc()]


QUEUE_READS = ("/localqueues/", "/clusterqueues/", "visibility.kueue.x-k8s.io", "/resourceflavors")


def own(requests: list[Any]) -> list[Any]:
    """A status's recorded requests without its queue-position reads (issue 35's, counted by their
    own tests): the queues, and the Workloads listed beyond the run's own (read by its job-uid
    label). What layers 1–3 and 5–8 cost, whatever a process knows of the ClusterQueue."""
    return [r for r in requests if not any(q in r.path for q in QUEUE_READS)
            and not (r.path.endswith("/workloads") and "labelSelector" not in r.query)]


def rounds(requests: list[Any]) -> list[tuple[int, str, str]]:
    """Each recorded request as (its round, method, the path's last two parts): what an assertion
    on rounds prints when it fails."""
    return [(r.round, r.method, r.path.rsplit("/", 2)[-1]) for r in requests]


def proxied(requests: list[Any], tail: str) -> list[Any]:
    """The requests through a `services|pods/proxy` subresource whose path ends with ``tail``."""
    return [r for r in requests if "/proxy/" in r.path and r.path.endswith(tail)]
