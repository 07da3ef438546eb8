"""Failure text classified by small, named patterns, each with its owner and fix.

Kept as data (Robusta-style) so a new registry or scheduler message is one row,
not a new branch. The order of a table matters: the first match wins, so the
more specific pattern comes first (Docker's "pull access denied, repository
does not exist or may require authorization" is an authorization failure even
though it says "does not exist").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .models import Finding


@dataclass(frozen=True)
class Pattern:
    label: str
    regex: re.Pattern[str]
    finding: Finding


def _p(label: str, reason: str, regex: str, owner: str, transient: bool | None, action: str) -> Pattern:
    return Pattern(label, re.compile(regex, re.IGNORECASE), Finding(
        reason=reason, owner=owner, transient=transient, next_action=action))  # type: ignore[arg-type]


def first_match(table: tuple[Pattern, ...], text: str) -> Pattern | None:
    for pattern in table:
        if pattern.regex.search(text):
            return pattern
    return None


# Image pull failure messages (kubelet `Failed to pull image "X": <runtime error>`;
# containerd/docker texts from robusta imagepull_utils.py, see reference/pod-failure-shapes.md).
IMAGE_PULL: tuple[Pattern, ...] = (
    _p(
        "unauthorized",
        "image.unauthorized",
        r"pull access denied|may require authorization|unauthorized|authorization failed|"
        r"insufficient_scope|access denied|forbidden|\b40[13]\b|authentication required|denied:",
        "image-owner",
        False,
        "The registry refused the pull: check the namespace's imagePullSecrets and the "
        "registry grant, or ask the image's owning team for access.",
    ),
    _p(
        "not found",
        "image.not_found",
        r"manifest unknown|not found|invalidimagename|invalid reference format|"
        r"couldn't parse image|repository name must|no such image",
        "researcher",
        False,
        "The image or tag does not exist: fix the image reference (name and pinned tag) in "
        "the run config and resubmit.",
    ),
    _p(
        "network",
        "image.network",
        r"i/o timeout|dial tcp|tls handshake|timeout|timed out|connection refused|"
        r"connection reset|no route to host|no such host|deadline exceeded|\beof\b|"
        r"temporary failure|network is unreachable|x509",
        "platform",
        True,
        "The node could not reach the registry (network, DNS or TLS): usually transient — "
        "retry; if it persists the platform checks node egress to the registry.",
    ),
)

IMAGE_PULL_UNKNOWN = Finding(
    reason="image.unclassified",
    owner="image-owner",
    transient=False,
    next_action="Verify the image name, tag and registry credentials; the pull error did not "
    "say which of them failed.",
)

# Per-node reasons in a scheduler `0/N nodes are available: …` message
# (kube-scheduler; examples in reference/pod-failure-shapes.md).
CLAIM_REASONS = re.compile(
    r"cannot allocate all claims|resourceclaim|timed out trying to allocate devices|"
    r"cannot schedule extended resource claim",
    re.IGNORECASE,
)

SCHEDULING: tuple[Pattern, ...] = (
    _p(
        "insufficient resources",
        "sched.insufficient",
        r"insufficient [\w./-]+",
        "node-pool-owner",
        False,
        "No node has the free capacity this pod requests: the node pool is full or too small "
        "for the request — node-pool owner adds capacity, or request fewer resources.",
    ),
    _p(
        "untolerated taint",
        "sched.taint",
        r"untolerated taint",
        "node-pool-owner",
        False,
        "The nodes carry a taint the pod does not tolerate: the node pool's taints and the "
        "workload profile's tolerations disagree — node-pool owner reconciles them.",
    ),
    _p(
        "node affinity/selector mismatch",
        "sched.affinity",
        r"didn't match (pod's )?node affinity|didn't match node selector|node affinity/selector",
        "node-pool-owner",
        False,
        "No node matches the pod's node selector/affinity: the requested GPU class or pool "
        "has no nodes — node-pool owner checks the pool's labels against the profile.",
    ),
    _p(
        "volume",
        "sched.volume",
        r"volume node affinity conflict|unbound immediate persistentvolumeclaims|"
        r"persistentvolumeclaim .* not found",
        "platform",
        False,
        "A volume the pod mounts cannot be placed: the platform checks the claim "
        "(e.g. PVC blob-training) and its storage class.",
    ),
)

SCHEDULING_UNKNOWN = Finding(
    reason="sched.unschedulable",
    owner="node-pool-owner",
    transient=False,
    next_action="The scheduler cannot place the pod: read its message and check the node pool.",
)

DRA_UNALLOCATED = Finding(
    reason="dra.unallocated",
    owner="node-pool-owner",
    transient=False,
    next_action="No matching device could be allocated: check ResourceSlice availability for "
    "the pool (kubectl get resourceslices) and the claim's device class and selectors.",
)

# Terminated/waiting container reasons and what they mean for the run.
CRASH_ACTION = (
    "The application crashes before it is ready: read the crashed container's log "
    "(`/tau logs <run> --previous`) and fix the code or config; resubmitting unchanged reproduces it."
)
OOM_ACTION = (
    "The container ran out of memory (OOMKilled): raise its memory limit in the run config "
    "or reduce batch size/workers, then resubmit."
)
CONFIG_ACTION = (
    "The container could not be created from its spec (missing Secret/ConfigMap or bad "
    "reference): fix the run config's env/volume references."
)

