"""Reading a pod's status the way the phases need it, in one place.

Pods are plain dicts from the API server; these helpers name the few
questions every phase asks (is it scheduled? gated by Kueue? what is this
container waiting on?) so the phase modules read like the guide.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .linkage import meta
from .timeutil import parse_time

KUEUE_GATE = "kueue.x-k8s.io/admission"


@dataclass(frozen=True)
class ContainerView:
    """One container's status; `init` tells init containers apart."""

    name: str
    init: bool
    image: str
    status: dict

    @property
    def state(self) -> dict:
        return self.status.get("state") or {}

    @property
    def waiting(self) -> dict | None:
        return self.state.get("waiting")

    @property
    def running(self) -> dict | None:
        return self.state.get("running")

    @property
    def terminated(self) -> dict | None:
        return self.state.get("terminated")

    @property
    def last_terminated(self) -> dict | None:
        return (self.status.get("lastState") or {}).get("terminated")

    @property
    def waiting_reason(self) -> str:
        return (self.waiting or {}).get("reason") or ""

    @property
    def waiting_message(self) -> str:
        return (self.waiting or {}).get("message") or ""

    @property
    def ready(self) -> bool:
        return bool(self.status.get("ready"))

    @property
    def restarts(self) -> int:
        return int(self.status.get("restartCount") or 0)

    @property
    def has_started(self) -> bool:
        """The image was present and the container ran at least once."""
        return bool(
            self.running or self.terminated or self.last_terminated or self.status.get("imageID")
        )

    @property
    def sidecar(self) -> bool:
        return self.init and self.status.get("_restartPolicy") == "Always"


def pod_name(pod: dict) -> str:
    return meta(pod).get("name") or "?"


def pod_created(pod: dict) -> datetime | None:
    return parse_time(meta(pod).get("creationTimestamp"))


def condition(obj: dict, ctype: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return cond
    return None


def pod_phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def is_terminal(pod: dict) -> bool:
    return pod_phase(pod) in ("Succeeded", "Failed")


_SCHEDULED: dict[int, tuple[dict, bool]] = {}


def is_scheduled(pod: dict) -> bool:
    """Every phase asks this of every pod (scanning its conditions each time was a fifth of
    `evaluate` at 5,000 pods); kept per pod object like the container views below."""
    hit = _SCHEDULED.get(id(pod))
    if hit is not None and hit[0] is pod:
        return hit[1]
    cond = condition(pod, "PodScheduled")
    if cond is not None:
        scheduled = cond.get("status") == "True"
    else:
        scheduled = bool((pod.get("spec") or {}).get("nodeName"))
    if len(_SCHEDULED) >= _VIEWS_MAX:
        _SCHEDULED.clear()
    _SCHEDULED[id(pod)] = (pod, scheduled)
    return scheduled


def kueue_gated(pod: dict) -> bool:
    """Kueue's admission gate holds the pod: queued, not failing (SPEC §4)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return any(g.get("name") == KUEUE_GATE for g in gates)


_VIEWS: dict[tuple[int, bool], tuple[dict, list[ContainerView]]] = {}
_VIEWS_MAX = 150_000  # bounded: two views per pod of a 75,000-pod cache


def clear_cache() -> None:
    """Forget every cached entry (a long-lived worker calls this after each job)."""
    _VIEWS.clear()
    _SCHEDULED.clear()


def containers(pod: dict, *, init: bool) -> list[ContainerView]:
    """Spec and status merged, so a container with no status yet still shows up.

    Every phase asks for the same pod's containers; the views are built once per
    pod object (keyed by identity, checked against the object itself, so a new
    object with a recycled id is never served another's views).
    """
    key = (id(pod), init)
    hit = _VIEWS.get(key)
    if hit is not None and hit[0] is pod:
        return hit[1]
    views = _build_containers(pod, init=init)
    if len(_VIEWS) >= _VIEWS_MAX:
        _VIEWS.clear()
    _VIEWS[key] = (pod, views)
    return views


def _build_containers(pod: dict, *, init: bool) -> list[ContainerView]:
    spec_key, status_key = (
        ("initContainers", "initContainerStatuses") if init else ("containers", "containerStatuses")
    )
    spec = (pod.get("spec") or {}).get(spec_key) or []
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get(status_key) or []}
    views = []
    for c in spec:
        st = dict(statuses.get(c.get("name"), {}))
        if init and c.get("restartPolicy") == "Always":
            st["_restartPolicy"] = "Always"
        views.append(ContainerView(c.get("name") or "?", init, c.get("image") or "", st))
    known = {c.get("name") for c in spec}
    for name, st in statuses.items():
        if name not in known:
            views.append(ContainerView(name or "?", init, st.get("image") or "", st))
    return views


def all_containers(pod: dict) -> list[ContainerView]:
    return containers(pod, init=True) + containers(pod, init=False)


def where(pod: dict, c: ContainerView | None = None) -> str:
    """`pod-name` or `pod-name/container` for evidence lines."""
    return f"{pod_name(pod)}/{c.name}" if c else pod_name(pod)


def exit_failed(term: dict | None) -> bool:
    return bool(term) and int(term.get("exitCode") or 0) != 0


def describe_exit(term: dict) -> str:
    reason = term.get("reason") or "Error"
    code = term.get("exitCode")
    msg = (term.get("message") or "").strip()
    text = f"{reason} (exit {code})"
    return f"{text}: {msg}" if msg else text
