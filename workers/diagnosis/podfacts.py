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
PULL_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


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


@dataclass(frozen=True, slots=True)
class PodSummary:
    """What one pass over a pod tells every pod-level phase.

    `settled`: the pod is Running and scheduled, its init containers are done (`Initialized`),
    and every main container runs, is ready and has never restarted, with every image present.
    Each pod-level phase judges such a pod done with no evidence (a test holds every phase to
    that), so phases judge only the pods that are not settled: a 5,000-pod run that is healthy
    but for one pod costs one pass, not one per phase (`bench/bench_evaluate.py`).
    """

    settled: bool
    images: frozenset[str]


def _started(st: dict) -> bool:
    state = st.get("state") or {}
    return bool(state.get("running") or state.get("terminated")
                or (st.get("lastState") or {}).get("terminated") or st.get("imageID"))


def _images(spec: list[dict], statuses: list[dict], into: set[str]) -> set[str]:
    """Adds the images `containers()` would show — the spec's, and a status's for a container
    the spec does not name — and returns the spec's container names."""
    names = set()
    for c in spec:
        names.add(c.get("name"))
        into.add(c.get("image") or "")
    for st in statuses:
        if st.get("name") not in names:
            into.add(st.get("image") or "")
    return names


def _main_settled(statuses: list[dict], spec_names: set) -> bool:
    """Every main container has a status, runs, is ready and has never restarted."""
    seen = set()
    for st in statuses:
        state = st.get("state") or {}
        if (st.get("ready") is not True or st.get("restartCount") or not state.get("running")
                or state.get("terminated") or state.get("waiting")):
            return False
        seen.add(st.get("name"))
    return bool(statuses) and len(seen) == len(statuses) and spec_names <= seen


def _init_settled(statuses: list[dict], spec_names: set) -> bool:
    """Every init container has a status and has pulled its image."""
    seen = set()
    for st in statuses:
        waiting = (st.get("state") or {}).get("waiting") or {}
        if not _started(st) or waiting.get("reason") in PULL_ERRORS:
            return False
        seen.add(st.get("name"))
    return spec_names <= seen


def summarize(pod: dict) -> PodSummary:
    """One read of the pod's raw fields (no container views built): see `PodSummary`."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    main = status.get("containerStatuses") or []
    init = status.get("initContainerStatuses") or []
    images: set[str] = set()
    main_names = _images(spec.get("containers") or [], main, images)
    init_names = _images(spec.get("initContainers") or [], init, images)
    images.discard("")
    settled = False
    if status.get("phase") == "Running":
        # `is_scheduled` and the `Initialized` condition, in one scan of the conditions
        scheduled: bool | None = None
        initialized = False
        for cond in status.get("conditions") or []:
            ctype = cond.get("type")
            if ctype == "PodScheduled" and scheduled is None:
                scheduled = cond.get("status") == "True"
            elif ctype == "Initialized" and not initialized:
                initialized = cond.get("status") == "True"
        if scheduled is None:
            scheduled = bool(spec.get("nodeName"))
        settled = (scheduled and _main_settled(main, main_names)
                   and (not (init_names or init) or (initialized and _init_settled(init, init_names))))
    return PodSummary(settled=settled, images=frozenset(images))


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
