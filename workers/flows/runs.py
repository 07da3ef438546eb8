"""`/tau runs`, `taubot runs`, the App Home list and the MCP `runs` tool: one line per run.

The reads are `workers/collect/runs.py` (a fixed handful of LISTs as the caller); here every run
of those lists is judged offline with the engine a status uses — `evaluate(…, linked=…)` on the
run's own objects (`workers/monitor/index.py` groups a namespace's objects by run in one pass,
so 500 runs are not 500 scans of the namespace), first without events and then, only when the
answer depends on them, with the events of the pods a status would read (`needs_events`,
`explaining_pods`): the same two steps as a status, so a line's verdict is that run's status's.
What the lists cannot prove — the Nodes (layer 6), the log and experiment record (layer 7) — a
line does not claim: a running run says its log was "not read".

Order: stuck and failed first, then waiting, then running, then finished (the last 24 h only).
"Mine" is the `taugrid.io/submitted-by` annotation the platform writes on a run, matched to the
caller's mapped Kubernetes user; with none marked at all, the answer suggests `--all`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from workers.collect.investigate import explaining_pods, needs_events, uses_dra
from workers.collect.runs import KIND_LABELS, RunsRead, read_runs_as
from workers.collect.workspace import readiness_report, resolution_report, unreachable_report
from workers.config.workspaces import Resolved
from workers.contracts.requests import RunsRequest
from workers.diagnosis.checks import LayerReport
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.gaps import ReadGap
from workers.diagnosis.linkage import SUBMITTED_BY_ANNOTATION, find_run, meta
from workers.diagnosis.phases.common import RunContext
from workers.diagnosis.timeutil import parse_time
from workers.kube.client import Identity, KubeClients
from workers.kube.reader import ReadError
from workers.monitor.index import group_by_run
from workers.outside.text import outside
from workers.render.runs_card import build_runs_card, render_runs_card
from workers.services import Services
from workers.surfaces.base import Failed

from .status import SlackUnavailable, ensure_parent

if TYPE_CHECKING:
    from rq.job import Job

    from workers.config.workspaces import Registry

log = logging.getLogger(__name__)

FINISHED_WINDOW = timedelta(hours=24)
GROUPS = ("stuck", "failed", "waiting", "running", "finished")  # the order lines are listed in
SUMMARY_LIMIT = 300
LOGS_NOT_READ = "logs not read"


@dataclass(frozen=True)
class RunLine:
    """One run, as its line says it: the JSON of `taubot runs --format json` plus where it sorts."""

    run: str
    namespace: str
    kind: str
    first_incomplete: str | None
    state: str
    layer: int
    owner: str
    summary: str
    submitted_by: str | None
    created: datetime | None
    group: str
    finished_at: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        return {"run": self.run, "namespace": self.namespace, "kind": self.kind,
                "first_incomplete": self.first_incomplete, "state": self.state, "layer": self.layer,
                "owner": self.owner, "summary": self.summary, "submitted_by": self.submitted_by,
                "created": self.created.isoformat() if self.created else None, "group": self.group}


@dataclass
class RunsList:
    """Every line of one namespace (sorted, filtered as asked) and what could not be read."""

    workspace: str | None
    namespace: str | None
    lines: list[RunLine] = field(default_factory=list)
    gaps: dict[str, str] = field(default_factory=dict)  # a kind's label → why it could not be read
    layer_report: LayerReport | None = None  # layers 1–2 failed: the list was not read
    requests: int = 0
    everyone: bool = False
    marked: int = 0  # runs carrying the submitted-by annotation at all
    others: int = 0  # runs left out as someone else's (or unmarked)
    old_finished: int = 0  # finished more than 24 h ago, left out

    @property
    def suggest_all(self) -> bool:
        """No run says who submitted it: "mine" cannot be told, so `--all` is the way to see them."""
        return not self.everyone and self.marked == 0 and self.others > 0

    def as_json(self) -> list[dict[str, Any]]:
        return [line.as_json() for line in self.lines]


def _group(state: str, first: str | None, layer: int, terminal: str | None) -> str:
    if terminal == "succeeded":
        return "finished"
    if terminal == "failed":
        return "failed"
    if state == "warning":
        return "stuck"
    if first is not None and layer <= 5:
        return "waiting"
    return "running"


def _finished_at(run: dict) -> datetime | None:
    status = run.get("status") or {}
    return parse_time(status.get("completionTime") or status.get("endTime")) or max(
        (t for c in status.get("conditions") or [] if (t := parse_time(c.get("lastTransitionTime")))),
        default=None)


def submitter(run: dict) -> str | None:
    """Who the platform says submitted the run (`taugrid.io/submitted-by`), if it says."""
    value = (meta(run).get("annotations") or {}).get(SUBMITTED_BY_ANNOTATION)
    return value if isinstance(value, str) and value else None


def judge_runs(objects: list[dict], gaps: dict[str, ReadGap], now: datetime, *,
               namespace: str | None = None, stall_seconds: int | None = None,
               only: Callable[[dict], bool] | None = None) -> list[RunLine]:
    """Every run among ``objects`` (one namespace, or every namespace of a dump), judged offline;
    with ``only``, just the runs whose run object it accepts (the others are never evaluated: a
    caller with 5 runs in a namespace of 500 pays for 5)."""
    by_ns: dict[str, list[dict]] = defaultdict(list)
    for obj in objects:
        ns = (obj.get("metadata") or {}).get("namespace") or ""
        if namespace is None or ns == namespace:
            by_ns[ns].append(obj)
    lines: list[RunLine] = []
    for ns, objs in sorted(by_ns.items()):
        for name, own in group_by_run(objs).items():
            if only is not None and own and not only(own[0]):  # group_by_run puts the run first
                continue
            line = _judge(own, name, ns, gaps, now, stall_seconds)
            if line is not None:
                lines.append(line)
    return lines


def _judge(own: list[dict], name: str, ns: str, gaps: dict[str, ReadGap], now: datetime,
           stall_seconds: int | None) -> RunLine | None:
    """One run: as a status judges it — without events, then with the explaining pods' events."""
    quiet = [o for o in own if o.get("kind") != "Event"]
    linked = find_run(quiet, name, ns)
    if linked.run is None:
        return None
    run_gaps = {k: g for k, g in gaps.items() if k in ("workloads", "pods")
                or (k == "rayclusters" and linked.kind == "RayJob")
                or (k == "resourceclaims" and uses_dra(linked.run))}
    extra: dict[str, Any] = {"stall_seconds": stall_seconds} if stall_seconds else {}
    d = evaluate(quiet, name, now, ns, run_gaps, linked=linked, **extra)
    if needs_events(d):
        if "events" in gaps:
            d = evaluate(quiet, name, now, ns, {**run_gaps, "events": gaps["events"]}, linked=linked, **extra)
        else:
            pods = {meta(p).get("name") for p in explaining_pods(linked, d, now)}
            events = [o for o in own if o.get("kind") == "Event"
                      and ((o.get("involvedObject") or o.get("regarding") or {}).get("name") in pods)]
            if events:
                linked = linked.with_events(events)
                d = evaluate(quiet, name, now, ns, run_gaps, linked=linked, **extra)
    terminal = RunContext(objs=linked, now=now).terminal()
    first = d.phase(d.first_incomplete) if d.first_incomplete else None
    state = first.state.value if first is not None else "done"
    if first is not None:
        summary = first.summary
    elif terminal == "succeeded":
        summary = "succeeded"
    else:
        summary = f"every lifecycle phase is done; {LOGS_NOT_READ} (`/tau status` reads them)"
    if first is not None and d.layer == 7 and terminal is None:
        summary = f"{summary}; {LOGS_NOT_READ}"
    m = meta(linked.run)
    submitted = submitter(linked.run)
    return RunLine(
        run=outside(name, 253), namespace=outside(ns, 253), kind=linked.kind or "?",
        first_incomplete=d.first_incomplete, state=state, layer=d.layer, owner=d.owner,
        summary=outside(summary, SUMMARY_LIMIT, keep_newlines=False),
        submitted_by=outside(submitted, 253) if submitted else None,
        created=parse_time(m.get("creationTimestamp")),
        group=_group(state, d.first_incomplete, d.layer, terminal),
        finished_at=_finished_at(linked.run) if terminal else None)


def arrange(lines: list[RunLine], now: datetime, *, user: str | None, everyone: bool,
            stuck_only: bool = False) -> tuple[list[RunLine], dict[str, int]]:
    """Filter (mine, stuck, finished in the last 24 h) and sort; the counts of what was left out."""
    marked = sum(1 for line in lines if line.submitted_by)
    kept, others, old = [], 0, 0
    for line in lines:
        if not everyone and (user is None or line.submitted_by != user):
            others += 1
            continue
        if line.group == "finished" and line.finished_at and now - line.finished_at > FINISHED_WINDOW:
            old += 1
            continue
        if stuck_only and line.group not in ("stuck", "failed"):
            continue
        kept.append(line)
    oldest = datetime.min.replace(tzinfo=now.tzinfo)
    kept.sort(key=lambda line: (GROUPS.index(line.group), -(line.created or oldest).timestamp(), line.run))
    return kept, {"marked": marked, "others": others, "old_finished": old}


def runs_list(read: RunsRead, now: datetime, *, workspace: str | None, user: str | None, everyone: bool,
              stuck_only: bool = False, ws: Any = None, stall_seconds: int | None = None) -> RunsList:
    """The answer from one read: layers 1–2 first, then every run judged and arranged."""
    out = RunsList(workspace=workspace, namespace=read.namespace, requests=read.requests, everyone=everyone)
    tw = read.tauworkspace
    if ws is not None and tw is not None:
        if isinstance(tw, ReadError):
            out.layer_report = unreachable_report(ws, tw, f"TauWorkspace {ws.spec.workspace}")
            return out
        if isinstance(tw, dict) and (tw.get("status") or {}).get("phase") != "Ready":
            out.layer_report = readiness_report(ws, tw, None)
            return out
    out.gaps = {KIND_LABELS.get(k, k): g.text for k, g in read.gaps.items()}
    judge = {"namespace": read.namespace, "stall_seconds": stall_seconds}
    if everyone:
        lines = judge_runs(read.objects, read.gaps, now, **judge)
    else:  # who submitted each run is on the run itself: only the caller's are judged
        runs = run_objects(read.objects)
        out.marked = sum(1 for o in runs if submitter(o))
        lines = judge_runs(read.objects, read.gaps, now, **judge,
                           only=lambda run: user is not None and submitter(run) == user)
        out.others = len(runs) - len(lines)
    out.lines, counts = arrange(lines, now, user=user, everyone=True, stuck_only=stuck_only)
    if everyone:
        out.marked = counts["marked"]
    out.old_finished = counts["old_finished"]
    return out


def run_objects(objects: list[dict]) -> list[dict]:
    """The runs among the objects: RayJobs, and Jobs that are not KubeRay's submitter of one (by
    name, as `workers/monitor/index.py` groups them, or by owner)."""
    ray = {meta(o).get("name") for o in objects if o.get("kind") == "RayJob"}
    return [o for o in objects if o.get("kind") == "RayJob" or (
        o.get("kind") == "Job" and meta(o).get("name") not in ray
        and not any(ref.get("kind") == "RayJob" for ref in meta(o).get("ownerReferences") or []))]


async def live_runs(registry: Registry, kube: KubeClients, identity: Identity, now: datetime, *,
                    workspace: str | None = None, channel: str | None = None, everyone: bool = False,
                    stuck_only: bool = False, timeout: float = 10.0) -> RunsList:
    """Resolve the workspace, read its namespace as ``identity``, judge every run."""
    resolution = registry.resolve(workspace=workspace, channel=channel)
    if not isinstance(resolution, Resolved):
        return RunsList(workspace=workspace, namespace=None, everyone=everyone,
                        layer_report=resolution_report(resolution, workspace))
    ws = resolution.descriptor
    read = await read_runs_as(kube, ws, identity, timeout)
    return runs_list(read, now, workspace=ws.metadata.name, user=identity.user, everyone=everyone,
                     stuck_only=stuck_only, ws=ws)


def run_runs(services: Services, request: RunsRequest, *, job: Job | None, now: datetime) -> dict[str, Any]:
    """`/tau runs`: the parent, then the list card in its thread (privately where taubot cannot post)."""
    command = request.command
    parent_ts = ensure_parent(services, request, job)
    listed = services.run(live_runs(services.registry, services.kube, request.identity, now,
                                    workspace=command.workspace, channel=request.channel,
                                    everyone=command.everyone, stuck_only=command.stuck,
                                    timeout=services.settings.kube_request_timeout_seconds))
    card = render_runs_card(build_runs_card(listed, command=command.display(), now=now))
    card_ts = None
    if parent_ts is None:  # taubot cannot post here: the list goes to the requester alone
        services.surface.respond(str(request.response_url), card.text, card.blocks)
    else:
        sent = services.surface.post(request.channel, card.text, card.blocks, thread_ts=parent_ts)
        if isinstance(sent, Failed):
            raise SlackUnavailable(f"Slack API error: {sent.error or sent.kind} (posting the runs list)")
        card_ts = sent.ts
    return {"parent_ts": parent_ts, "card_ts": card_ts, "runs": len(listed.lines),
            "requests": listed.requests}


__all__ = ["GROUPS", "RunLine", "RunsList", "arrange", "judge_runs", "live_runs", "run_runs", "runs_list"]
