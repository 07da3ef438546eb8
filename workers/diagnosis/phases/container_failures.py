"""Container failure evidence shared by Init containers and Container start.

Both phases read the same kubelet shapes — `CrashLoopBackOff` with
`lastState.terminated`, `CreateContainerConfigError`, a non-zero exit,
`OOMKilled` — and both hand them to the researcher; only the label differs
(`Init:fetch-data` as kubectl prints it, or the container's own name).
"""

from __future__ import annotations

from ..models import Finding, PhaseState
from ..patterns import CONFIG_ACTION, CRASH_ACTION, OOM_ACTION
from ..podfacts import ContainerView, describe_exit, exit_failed, where
from .common import PodVerdict, clip

CONFIG_ERRORS = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")

CRASH = Finding(owner="researcher", transient=False, next_action=CRASH_ACTION)
OOM = Finding(owner="researcher", transient=False, next_action=OOM_ACTION)
CONFIG = Finding(owner="researcher", transient=False, next_action=CONFIG_ACTION)


def failure_finding(term: dict) -> Finding:
    return OOM if term.get("reason") == "OOMKilled" else CRASH


def container_failure(pod: dict, c: ContainerView, label: str) -> PodVerdict | None:
    """The container's failure evidence as a warning verdict, or None when it has none."""
    if c.waiting_reason == "CrashLoopBackOff":
        last = c.last_terminated or {}
        detail = describe_exit(last) if last else clip(c.waiting_message, 160)
        return PodVerdict(PhaseState.WARNING, failure_finding(last),
                          f"{label} CrashLoopBackOff, last {detail} ({c.restarts} restarts)",
                          f"{where(pod, c)}: CrashLoopBackOff; last {clip(detail)}")
    if c.waiting_reason in CONFIG_ERRORS:
        return PodVerdict(PhaseState.WARNING, CONFIG, f"{label} {c.waiting_reason}",
                          f"{where(pod, c)}: {c.waiting_reason}: {clip(c.waiting_message)}")
    if exit_failed(c.terminated):
        detail = describe_exit(c.terminated or {})
        return PodVerdict(PhaseState.WARNING, failure_finding(c.terminated or {}),
                          f"{label} {detail}", f"{where(pod, c)}: terminated {clip(detail)}")
    if c.running and exit_failed(c.last_terminated) and c.restarts:
        detail = describe_exit(c.last_terminated or {})
        return PodVerdict(PhaseState.WARNING, failure_finding(c.last_terminated or {}),
                          f"{label} restarted {c.restarts}x, last {detail}",
                          f"{where(pod, c)}: restarted {c.restarts} times; last {clip(detail)}")
    return None
