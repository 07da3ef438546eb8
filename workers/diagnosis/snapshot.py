"""A run snapshot as objects: the shape of `kubectl get -o json` output (SPEC §1), pure.

Decoding text (JSON, YAML, several outputs pasted together) is `workers/collect/dumps.py`.
"""

from __future__ import annotations

from typing import Any


class SnapshotError(ValueError):
    """The dump cannot be read as Kubernetes objects; the message is one line for the user."""


def flatten_into(doc: Any, out: list[dict], where: str) -> None:
    if doc is None:
        return
    if isinstance(doc, list):
        for item in doc:
            flatten_into(item, out, where)
        return
    if not isinstance(doc, dict):
        raise SnapshotError(f"{where}: expected Kubernetes objects, found {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            flatten_into(item, out, where)
        return
    if not isinstance(kind, str) or "metadata" not in doc:
        raise SnapshotError(f"{where}: an object without kind and metadata is not a Kubernetes object")
    out.append(doc)


def flatten(doc: list | dict, source: str = "snapshot") -> list[dict]:
    """Objects of an already-decoded dump (a List, one object, or a list of either)."""
    out: list[dict] = []
    flatten_into(doc, out, source)
    return out


def as_kube_list(objects: list[dict]) -> dict:
    """Wrap objects the way `kubectl get -o json` does, so a saved snapshot is a valid dump."""
    return {"apiVersion": "v1", "kind": "List", "items": objects, "metadata": {"resourceVersion": ""}}
