"""What took a preempted run's place: Kueue's `Preempted` event and `Evicted` condition as data.

Kueue writes one message per preemption (`preemptionMessage`,
pkg/scheduler/preemption/preemption.go; format verified in docs/reference/kueue-verified.md):

    Preempted to accommodate a workload (UID: <uid>, JobUID: <job-uid>) due to <reason text>;
    preemptor path: /<cohort…>/<cq>; preemptee path: /<cohort…>/<cq>

into the preemptee's `Evicted` condition (reason `Preempted`) and `Preempted` condition (reason
the token: `InClusterQueue`, `InCohortReclamation`, `InCohortFairSharing`,
`InCohortReclaimWhileBorrowing`), and the same text plus `; preemptor effective priority: N
(base: N, boost: N); preemptee effective priority: N (base: N, boost: N)` into a `Preempted`
event on the preemptee Workload. Events expire (an hour by default); the conditions stay. Older
Kueue wrote the message without the paths (Kueue's preemption.md, 2025) or as "Preempted to
accommodate a higher priority Workload" (troubleshooting_jobs.md, 2024): then only what it says
is returned.

Pure: the caller hands in the run's Workload, its events and the Workloads the user could read;
the preemptor is named only when it is among those (SPEC §3: "only when the user's own read of
it succeeds").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel, Field

from workers.outside.text import Outside

from .linkage import Event, meta

# HumanReadablePreemptionReasons (preemption.go): the text after "due to", back to its token. The
# longer text first: "reclamation within the cohort while borrowing" starts like the shorter one.
REASON_TEXT: tuple[tuple[str, str], ...] = (
    ("reclamation within the cohort while borrowing", "InCohortReclaimWhileBorrowing"),
    ("reclamation within the cohort", "InCohortReclamation"),
    ("Fair Sharing within the cohort", "InCohortFairSharing"),
    ("prioritization in the ClusterQueue", "InClusterQueue"),
)
REASON_WORDS = {token: text for text, token in REASON_TEXT}

_MESSAGE = re.compile(
    r"Preempted to accommodate a workload \(UID: (?P<uid>[^,()]*), JobUID: (?P<job_uid>[^()]*)\)"
    r"(?: due to (?P<why>[^;]*))?"
    r"(?:; preemptor path: (?P<preemptor_path>[^;]*))?"
    r"(?:; preemptee path: (?P<preemptee_path>[^;]*))?"
    r"(?:; preemptor effective priority: (?P<preemptor_priority>-?\d+)[^;]*)?"
    r"(?:; preemptee effective priority: (?P<preemptee_priority>-?\d+))?")
_OLD = re.compile(r"Preempted to accommodate a higher priority Workload")


class Preemption(BaseModel):
    """One preemption of the run's Workload as Kueue told it (SPEC §5b `preemption`)."""

    reason: str | None = Field(default=None, description="InClusterQueue, InCohortReclamation, … (the "
                               "Preempted condition's reason, else from the message's text)")
    reason_text: Outside | None = Field(default=None, description="Kueue's words after `due to`")
    preemptor_path: Outside | None = Field(default=None, description="/<cohort>/<cq> of the preemptor")
    preemptee_path: Outside | None = None
    preemptor_priority: int | None = Field(default=None, description="effective priority, from the event "
                                           "only (the condition does not carry it)")
    preemptee_priority: int | None = Field(default=None, description="from the event, else the run's own "
                                           "Workload spec.priority")
    preemptor: Outside | None = Field(default=None, description="namespace/name of the preemptor Workload, "
                                      "only when the user could read it")
    preemptor_job: Outside | None = Field(default=None, description="kind/name of its job, from that read")
    preemptor_unavailable: Outside | None = Field(default=None, description="why the preemptor is not named "
                                                  "when a live read of it failed (permission denied, …)")
    preemptor_uid: Outside | None = Field(default=None, description="the Workload UID in the message "
                                          "(`UNKNOWN` when Kueue did not know it)")
    preemptor_job_uid: Outside | None = None
    source: str = Field(default="condition", description="`event` (with priorities) or `condition`")
    at: datetime | None = None

    def contract(self) -> dict:
        """The `--format json` object of SPEC §5b (its six keys first, then what else was read)."""
        return self.model_dump(mode="json")


def _token(why: str | None) -> str | None:
    if not why:
        return None
    for text, token in REASON_TEXT:
        if why.strip().startswith(text):
            return token
    return None


def parse_message(message: str) -> dict | None:
    """The parts of one Preempted/Evicted message; None when it is no preemption message."""
    match = _MESSAGE.search(message or "")
    if match is None:
        return {"why": None} if _OLD.search(message or "") else None
    parts = {k: (v.strip() if isinstance(v, str) else v) for k, v in match.groupdict().items()}
    for key in ("preemptor_priority", "preemptee_priority"):
        parts[key] = int(parts[key]) if parts.get(key) is not None else None
    return parts


def _condition(wl: dict, ctype: str) -> dict | None:
    for cond in (wl.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return cond
    return None


def _named(uid: str | None, readable: Iterable[dict]) -> tuple[str | None, str | None]:
    """(namespace/name, kind/name of its job) of the readable Workload whose uid is ``uid``."""
    if not uid or uid == "UNKNOWN":
        return None, None
    for wl in readable:
        md = meta(wl)
        if md.get("uid") == uid:
            owner = next((r for r in md.get("ownerReferences") or [] if r.get("controller")),
                         (md.get("ownerReferences") or [None])[0])
            job = f"{owner.get('kind')}/{owner.get('name')}" if owner else None
            annotations = md.get("annotations") or {}
            if job is None and annotations.get("kueue.x-k8s.io/job-owner-name"):
                job = annotations["kueue.x-k8s.io/job-owner-name"]
            return f"{md.get('namespace')}/{md.get('name')}", job
    return None, None


def preemption_of(wl: dict, events: Iterable[Event], readable: Iterable[dict]) -> Preemption | None:
    """The latest preemption of ``wl``: the `Preempted` event when one is in ``events`` (newest,
    with priorities), else the `Evicted`/`Preempted` condition; None when it was not preempted."""
    evicted = _condition(wl, "Evicted")
    preempted = _condition(wl, "Preempted")
    if evicted is not None and evicted.get("reason") != "Preempted":
        return None  # evicted for another reason since (a stopped queue, a timeout): not this
    cond = evicted or preempted
    found = sorted((e for e in events if e.reason == "Preempted" and parse_message(e.message)),
                   key=lambda e: e.last.timestamp() if e.last else 0.0)
    event = found[-1] if found else None
    if cond is None and event is None:
        return None
    parts = parse_message(event.message) if event is not None else None
    source = "event" if parts else "condition"
    if parts is None:
        parts = parse_message((cond or {}).get("message") or "") or {"why": None}
    token = (preempted or {}).get("reason") or _token(parts.get("why"))
    own_priority = (wl.get("spec") or {}).get("priority")
    preemptee_priority = parts.get("preemptee_priority")
    if preemptee_priority is None and isinstance(own_priority, int):
        preemptee_priority = own_priority
    uid = parts.get("uid")
    name, job = _named(uid, readable)
    at = event.last if event is not None and source == "event" else None
    return Preemption(
        reason=token, reason_text=parts.get("why"), preemptor_path=parts.get("preemptor_path"),
        preemptee_path=parts.get("preemptee_path"), preemptor_priority=parts.get("preemptor_priority"),
        preemptee_priority=preemptee_priority, preemptor=name, preemptor_job=job,
        preemptor_uid=uid, preemptor_job_uid=parts.get("job_uid"), source=source, at=at)


def preemption_text(p: Preemption) -> str:
    """`preempted by Job/urgent-eval in /research/h100-shared, priority 1000 over yours 100 (its
    Workload default/job-urgent-eval-0d3f2), due to prioritization in the ClusterQueue` — or, unread,
    `preempted by a workload in /research/h100-shared, priority 1000 over yours 100, …` (SPEC §3). Who,
    where and the priorities first: a card that must cut the line keeps them (issue 35)."""
    who = (p.preemptor_job or p.preemptor) if p.preemptor else "a workload"
    where = f" in {p.preemptor_path}" if p.preemptor_path and p.preemptor_path != "UNKNOWN" else ""
    if p.preemptor_priority is not None and p.preemptee_priority is not None:
        prio = f", priority {p.preemptor_priority} over yours {p.preemptee_priority}"
    elif p.preemptee_priority is not None:
        prio = f", yours priority {p.preemptee_priority} (the preemptor's is not in the condition)"
    else:
        prio = ""
    workload = f" (its Workload {p.preemptor})" if p.preemptor and p.preemptor_job else ""
    why = REASON_WORDS.get(p.reason or "", p.reason_text or p.reason or "")
    return f"preempted by {who}{where}{prio}{workload}" + (f", due to {why}" if why else "")


__all__ = ["REASON_TEXT", "Preemption", "parse_message", "preemption_of", "preemption_text"]
