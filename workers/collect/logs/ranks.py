"""Every rank's log tail of a distributed run, in one round (SPEC §5c).

Why one round: the culprit of a hung collective is found by comparing what every rank says
(workers/diagnosis/culprit.py), so the ranks' tails are read together — all GETs of
`pods/{pod}/log` at once, never one after the other — in one more round after the run's own
log, and only when that log calls for it (`needs_ranks`).

Why bounded: a 1,000-pod job must not cost 1,000 requests or megabytes per pod; at most
`MAX_PODS` pods are read, each at most `RANK_LINES` lines (`tailLines`) and `RANK_BYTES`
(`limitBytes`, and the reader's own byte cap; the API server keeps the *first* bytes of the
tail, so a pod cut there is marked truncated). Beyond the pod bound the pods are sampled —
every pod that failed first (a culprit is likelier among them), then evenly across the ranks —
and the evidence says which were read.

Every read goes through the caller's impersonating reader: it is the user's own `get
pods/log`, and a 403 is that pod's "permission denied", never an empty log. Each line is
stripped of control characters and redacted before the engine sees it, as the run's main log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime

from workers.diagnosis.culprit import pod_rank
from workers.diagnosis.linkage import RunObjects, meta
from workers.diagnosis.models import LogEvidence, PhaseState, PodLog
from workers.diagnosis.phases.common import RunContext
from workers.diagnosis.podfacts import containers, pod_name
from workers.diagnosis.progress_checks import runtime_progress
from workers.kube.reader import KubeReader, ReadError, resource_path
from workers.outside.text import redact, strip_controls

from .model import last_lines

RANK_LINES = 500  # lines per pod (SPEC §5c)
RANK_BYTES = 256 * 1024  # bytes per pod (SPEC §5c)
MAX_PODS = 64  # pods per round (SPEC §5c)
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"


def _main_container(pod: dict) -> str | None:
    annotated = (meta(pod).get("annotations") or {}).get(DEFAULT_CONTAINER)
    names = [c.name for c in containers(pod, init=False)]
    return annotated if annotated in names else (names[0] if names else None)


def _started(pod: dict) -> bool:
    """A pod whose main container ran: only such a pod has a log to read (a waiting container
    answers 400 "is waiting to start", a request for nothing)."""
    return any(c.running or c.terminated or c.last_terminated for c in containers(pod, init=False))


def _failed(pod: dict) -> bool:
    if (pod.get("status") or {}).get("phase") == "Failed":
        return True
    return any(int((c.terminated or c.last_terminated or {}).get("exitCode") or 0) != 0
               for c in containers(pod, init=False))


def rank_pods(objs: RunObjects) -> list[dict]:
    """The pods whose logs are the ranks': a Job's pods (the newest attempt of each completion
    index); only pods that started. Fewer than two: not distributed. A RayJob's workers print to
    the driver (Ray forwards each worker's output with its `(Name pid=N, ip=A)` prefix), not to
    their containers' stdout, which holds `ray start`'s own lines: the driver log the status
    already reads is their log, split by that prefix in the engine — no pod is read for it."""
    if objs.kind != "Job":
        return []
    pods = [p for p in objs.pods if not objs.is_ray_pod(p)]
    newest: dict[object, dict] = {}
    for pod in pods:
        key = pod_rank(pod)
        key = key if key is not None else pod_name(pod)
        old = newest.get(key)
        created = meta(pod).get("creationTimestamp") or ""
        if old is None or created > (meta(old).get("creationTimestamp") or ""):
            newest[key] = pod
    chosen = [p for p in newest.values() if _started(p)]
    return chosen if len(chosen) >= 2 else []


def sample(pods: list[dict], bound: int = MAX_PODS) -> tuple[list[dict], str | None]:
    """At most ``bound`` pods: all when they fit; else the failed ones first, then evenly spaced
    over the ranks in order — and the sentence that says so."""
    def order(pod: dict) -> tuple[int, str]:
        rank = pod_rank(pod)
        return (rank if rank is not None else 1 << 30, pod_name(pod))
    ranked = sorted(pods, key=order)
    if len(ranked) <= bound:
        return ranked, None
    failed = [p for p in ranked if _failed(p)][:bound]
    rest = [p for p in ranked if p not in failed]
    room = bound - len(failed)
    step = len(rest) / room if room else 0
    spread = [rest[int(i * step)] for i in range(room)] if room else []
    chosen = sorted(failed + spread, key=order)
    note = (f"{len(chosen)} of {len(ranked)} pods read (bound {bound}: "
            f"{len(failed)} failed, the rest evenly across the ranks)")
    return chosen, note


def _why(error: ReadError, pod: str) -> str:
    if error.kind == "forbidden":
        return f"permission denied ({error.verb} {error.resource})"
    if error.kind == "not_found":
        return "pod not found (deleted since it was listed)"
    return error.message or error.describe()


async def _one(reader: KubeReader, namespace: str, pod: dict) -> PodLog:
    name, container = pod_name(pod), _main_container(pod)
    query: dict[str, str | int | bool] = {"tailLines": RANK_LINES + 1, "timestamps": True,
                                          "limitBytes": RANK_BYTES}
    if container:
        query["container"] = container
    got = await reader.text(resource_path("", "v1", "pods", namespace, name, "log"), query,
                            max_bytes=RANK_BYTES)
    if isinstance(got, ReadError):
        return PodLog(pod=name, unavailable=_why(got, name))
    lines, older = last_lines(got, RANK_LINES, timestamps=True)
    clipped = len(got.encode("utf-8", errors="replace")) >= RANK_BYTES
    kept = [(line.time, "\r".join(redact(strip_controls(part)) for part in line.text.split("\r")))
            for line in lines]
    return PodLog(pod=name, truncated=older or clipped, lines=kept)


def distributed(objs: RunObjects) -> bool:
    """A distributed Job whose ranks' logs a culprit may come from: two or more started pods, none
    of whose containers waits (a crash loop is Container start's answer, read from its pod)."""
    pods = rank_pods(objs)
    if objs.kind != "Job" or len(pods) < 2:
        return False
    # a container waiting (crash loop, image, creation) is layer 5's answer, not a rank's
    return not any(c.waiting_reason for p in pods for c in containers(p, init=False) if not c.terminated)


def needs_ranks(objs: RunObjects, main: LogEvidence, now: datetime, stall_seconds: int) -> bool:
    """Whether the run's own log calls for every rank's: its Runtime progress check (the engine's
    own judgement of that log) is a warning — a hang or crash signature, a failed run, no
    progress past the stall threshold — of a `distributed` Job."""
    return distributed(objs) and stalled(objs, main, now, stall_seconds)


def stalled(objs: RunObjects, main: LogEvidence, now: datetime, stall_seconds: int) -> bool:
    """The engine's Runtime progress check of the run's own log is a warning (hang, crash, stall)."""
    check, _progress = runtime_progress(RunContext(objs=objs, now=now), main, stall_seconds)
    return check is not None and check.state is PhaseState.WARNING


def tail_of(pod: str, lines: list[tuple[str | None, str]], older: bool) -> PodLog:
    """A rank's tail from a longer read of the same pod's log (the run's own log, `tailLines`
    2,000): its last `RANK_LINES` lines, cut after `RANK_BYTES` as the API server's `limitBytes`
    cuts (the first bytes of the tail, so a cut pod is marked truncated). The lines were already
    stripped and redacted by that read."""
    kept, size, clipped = [], 0, False
    for time, text in lines[-RANK_LINES:]:
        size += len(f"{time or ''} {text}\n".encode("utf-8", errors="replace"))
        if size > RANK_BYTES:
            clipped = True
            break
        kept.append((time, text))
    return PodLog(pod=pod, truncated=older or len(lines) > RANK_LINES or clipped, lines=kept)


async def read_rank_logs(reader: KubeReader, objs: RunObjects, *, have: str | None = None,
                         known: Callable[[], Awaitable[PodLog | None]] | None = None
                         ) -> tuple[list[PodLog], str | None]:
    """Every rank's tail in one concurrent round, and the sampling note (None when all were read).
    Not a distributed run (fewer than two started pods): nothing is read. The pod ``have`` is not
    read again when ``known`` gives its tail (`tail_of` the run's own log of it: one request less);
    when that read failed, it is read like the others."""
    pods, note = sample(rank_pods(objs))
    if not pods:
        return [], None
    namespace = objs.namespace or ""

    async def one(pod: dict) -> PodLog:
        if known is not None and pod_name(pod) == have:
            got = await known()
            if got is not None:
                return got
        return await _one(reader, namespace, pod)

    logs = await asyncio.gather(*(one(p) for p in pods))
    return list(logs), note


__all__ = ["MAX_PODS", "RANK_BYTES", "RANK_LINES", "distributed", "needs_ranks", "rank_pods",
           "read_rank_logs", "sample", "stalled", "tail_of"]
