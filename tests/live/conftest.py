"""Live-collection fixtures: a descriptor directory pointing at the Kubernetes API emulator."""

from __future__ import annotations

from pathlib import Path

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
