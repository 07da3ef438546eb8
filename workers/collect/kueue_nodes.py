"""The nodes of a waiting run's flavour, read live for never-fits by node size (issue 35, SPEC §5b).

SPEC §5b: a run that asks for "more of a resource per pod than the largest node of the flavour
has" can never fit — the researcher's to fix, said with the numbers. A dump with the Nodes answers
it offline (`start_estimate.never_fits`); a live status of a waiting run reads no nodes (it has no
pods), so live and offline disagreed. Here, as the user, only for a run Kueue keeps waiting:

* with the ClusterQueue's reads (round 2): the cluster's ResourceFlavors, one LIST (cluster-scoped,
  few objects; v1beta1 on a Kueue that serves only that) — the flavour's name is known only once
  the ClusterQueue is read, so a GET by name would cost a round of its own;
* then (round 3, beside the GETs of the Workloads ahead): the nodes of the run's flavour, one LIST
  with the flavour's `spec.nodeLabels` as its label selector — the nodes Kueue would place the
  run's pods on (Kueue copies nodeLabels into the pods' node affinity).

Teams often may not list nodes: a 403 says `unavailable: permission denied (list nodes)` and the
answer never claims the run fits; a flavour that selects its nodes by no label is not checked
(listing every node of a cluster for one status is not bounded) and says so. Nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.diagnosis.linkage import meta
from workers.diagnosis.start_estimate import run_flavor
from workers.kube.reader import KubeReader, ReadError, resource_path

KUEUE = ("kueue.x-k8s.io", "v1beta2")
KUEUE_V1BETA1 = ("kueue.x-k8s.io", "v1beta1")
PAGE_SIZE = 500


@dataclass(frozen=True)
class FlavorNodes:
    """The run's flavour and its nodes as the user read them; ``unavailable`` says why the node size
    could not be checked (`unavailable: …`, `not checked (…)`; then no pod is said to be too big)."""

    flavor: dict | None = None
    nodes: list[dict] | None = None
    unavailable: str | None = None


async def read_flavors(reader: KubeReader) -> list[dict] | ReadError:
    """The cluster's ResourceFlavors, as the user may list them."""
    got = await reader.list(resource_path(*KUEUE, "resourceflavors"), limit=PAGE_SIZE)
    if isinstance(got, ReadError) and got.kind == "not_found":  # a Kueue that serves only v1beta1
        got = await reader.list(resource_path(*KUEUE_V1BETA1, "resourceflavors"), limit=PAGE_SIZE)
    return got


def _why(got: ReadError, what: str) -> str:
    """`unavailable: permission denied (list nodes)`, `unavailable (HTTP 500)`, …"""
    if got.kind == "forbidden":
        return f"unavailable: permission denied ({what})"
    said = got.describe()
    return said if said.startswith("unavailable") else f"unavailable: {said}"


def selector(flavor: dict) -> str:
    """The flavour's `spec.nodeLabels` as a label selector (`key=value,…`); '' when it has none."""
    node_labels = (flavor.get("spec") or {}).get("nodeLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(node_labels.items()) if isinstance(v, str))


async def read_flavor_nodes(reader: KubeReader, cluster_queue: dict, run_workloads: list[dict] | ReadError,
                            flavors: list[dict] | ReadError | None) -> FlavorNodes:
    """The nodes of the flavour the run waits for (`run_flavor`), by the flavour's node labels."""
    if not isinstance(run_workloads, list) or not run_workloads:
        return FlavorNodes(unavailable="not checked (the run's Workload could not be read)")
    picked = run_flavor(cluster_queue, run_workloads)
    if picked is None:
        return FlavorNodes(unavailable="not checked (the ClusterQueue offers no flavour for it)")
    name = picked[0]
    if isinstance(flavors, ReadError):
        return FlavorNodes(unavailable=_why(flavors, "list resourceflavors"))
    flavor = next((f for f in flavors or [] if meta(f).get("name") == name), None)
    if flavor is None:
        return FlavorNodes(unavailable=f"not checked (ResourceFlavor {name} was not found)")
    labels = selector(flavor)
    if not labels:
        return FlavorNodes(flavor=flavor,
                           unavailable=f"not checked (flavour {name} selects nodes by no label)")
    nodes = await reader.list(resource_path("", "v1", "nodes"), label_selector=labels, limit=PAGE_SIZE)
    if isinstance(nodes, ReadError):
        return FlavorNodes(flavor=flavor, unavailable=_why(nodes, "list nodes"))
    if not nodes:
        why = f"not checked (no node has flavour {name}'s labels now: {labels}; a node pool may scale up)"
        return FlavorNodes(flavor=flavor, nodes=[], unavailable=why)
    return FlavorNodes(flavor=flavor, nodes=nodes)


__all__ = ["FlavorNodes", "read_flavor_nodes", "read_flavors", "selector"]
