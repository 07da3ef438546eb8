"""Container failure evidence shared by Init containers and Container start.

Both phases read the same kubelet shapes — `CrashLoopBackOff` with
`lastState.terminated`, `CreateContainerConfigError`, a non-zero exit,
`OOMKilled` — and both hand them to the researcher; only the label differs
(`Init:fetch-data` as kubectl prints it, or the container's own name).
"""

from __future__ import annotations

from ..models import Finding, PhaseState
from ..patterns import CONFIG_ACTION, CRASH_ACTION, OOM_ACTION
from ..podfacts import ContainerView, containers, describe_exit, exit_failed, where
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
    # Running again after a crash is judged by its current state (SPEC §3): it has recovered,
    # and the summary keeps its restarts (`restart_note`); Ready says whether it is ready.
    return None


def restart_note(pods: list[dict]) -> str:
    """`; 1 restart, last exit 137 (OOMKilled)` for containers that run again after crashing."""
    notes = []
    for pod in pods:
        for c in containers(pod, init=False):
            if c.running and c.restarts and c.last_terminated:
                last = c.last_terminated
                notes.append(f"{c.restarts} restart{'s' if c.restarts != 1 else ''}, last exit "
                             f"{last.get('exitCode')} ({last.get('reason') or 'Error'})")
    if not notes:
        return ""
    return f"; {notes[0]}" + (f" (+{len(notes) - 1} more containers)" if len(notes) > 1 else "")
