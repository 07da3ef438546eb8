"""What every phase module shares: the run context and how results are built.

Each phase is a pure function of (context, earlier results). `earlier` lets a
phase defer to the one before it ("waiting for admission") without reaching
into its internals.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from ..linkage import Event, RunObjects, meta
from ..models import Finding, PhaseResult, PhaseState
from ..podfacts import PodSummary, condition, summarize

Terminal = Literal["succeeded", "failed"] | None

RESEARCHER = Finding(
    reason="run.config",
    owner="researcher",
    transient=False,
    next_action="Fix the run config or application and resubmit.",
)


@dataclass
class RunContext:
    objs: RunObjects
    now: datetime
    known_runs: tuple[str, ...] = ()  # names of the runs that do exist (for "did you mean")
    _verdicts: dict[tuple[str, int], PodVerdict] = field(default_factory=dict, repr=False)
    _summaries: dict[int, PodSummary] = field(default_factory=dict, repr=False)
    _unsettled: dict[int, tuple[list[dict], list[dict]]] = field(default_factory=dict, repr=False)

    def summary(self, pod: dict) -> PodSummary:
        """The pod's `PodSummary`, read once per evaluation."""
        found = self._summaries.get(id(pod))
        if found is None:
            found = self._summaries[id(pod)] = summarize(pod)
        return found

    def unsettled(self, pods: list[dict]) -> list[dict]:
        """The pods a pod-level phase has to judge: every pod but the settled ones, which each
        such phase judges done with no evidence (`podfacts.PodSummary`). Kept per list: every
        pod-level phase, and RayCluster after them, asks it of the same list."""
        hit = self._unsettled.get(id(pods))
        if hit is not None and hit[0] is pods:
            return hit[1]
        found = [p for p in pods if not self.summary(p).settled]
        self._unsettled[id(pods)] = (pods, found)
        return found

    def verdicts(self, phase: str, judge_pod: Callable[[RunContext, dict], PodVerdict],
                 pods: list[dict]) -> tuple[list[PodVerdict], int]:
        """The verdicts of the pods that need judging, and how many pods are done: the settled
        ones and those judged done."""
        judged = [self.judge(phase, judge_pod, p) for p in self.unsettled(pods)]
        return judged, len(pods) - len(judged) + sum(v.state is PhaseState.DONE for v in judged)

    def judge(self, phase: str, judge_pod: Callable[[RunContext, dict], PodVerdict], pod: dict
              ) -> PodVerdict:
        """A pod's verdict in a phase, computed once per evaluation.

        RayCluster re-reads the pod phases for its Ray pods; memoising keeps
        evaluate() linear in pods with a small constant (bench/bench_evaluate.py).
        """
        key = (phase, id(pod))
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = judge_pod(self, pod)
        return verdict

    @property
    def namespace(self) -> str:
        return self.objs.namespace or "<namespace>"

    @property
    def status(self) -> dict:
        return (self.objs.run or {}).get("status") or {}

    def terminal(self) -> Terminal:
        """How the run itself says it ended, if it has: Job conditions, RayJob statuses."""
        return run_verdict(self.objs)

    def pod_events(self, pod: dict, reasons: Iterable[str] | None = None) -> list[Event]:
        events = self.objs.events_for("Pod", meta(pod).get("name") or "")
        if reasons is None:
            return events
        wanted = set(reasons)
        return [e for e in events if e.reason in wanted]


def run_verdict(objs: RunObjects) -> Terminal:
    """How the run itself says it ended, if it has: Job conditions, RayJob statuses."""
    run = objs.run
    if run is None:
        return None
    if objs.kind == "Job":
        for ctype, verdict in (("Complete", "succeeded"), ("SuccessCriteriaMet", "succeeded"),
                               ("Failed", "failed"), ("FailureTarget", "failed")):
            cond = condition(run, ctype)
            if cond and cond.get("status") == "True":
                return verdict  # type: ignore[return-value]
        return None
    status = run.get("status") or {}
    deploy = status.get("jobDeploymentStatus") or ""
    job = status.get("jobStatus") or ""
    if deploy == "Complete":
        return "succeeded" if job == "SUCCEEDED" else "failed"
    if deploy in ("Failed", "ValidationFailed"):
        return "failed"
    return None


def reason_code(state: PhaseState, finding: Finding) -> str:
    """The result's code: its finding's, except that a phase's healthy finding (`x.ok`) on a phase
    that has not finished reads as that phase waiting or under way (`x.pending`, `x.active`)."""
    area, _, what = finding.reason.partition(".")
    if what == "ok" and not state.finished:
        return f"{area}.{state.value}"
    return finding.reason


def result(
    name: str,
    layer: int,
    state: PhaseState,
    summary: str,
    finding: Finding,
    evidence: list[str] | None = None,
    *,
    cause: str | None = None,
    via: str | None = None,
) -> PhaseResult:
    return PhaseResult(
        name=name,
        layer=layer,
        state=state,
        summary=summary,
        finding=finding,
        evidence=evidence or [],
        reason=reason_code(state, finding),
        cause=cause,
        via=via,
    )


def worst(states: Iterable[PhaseState]) -> PhaseState:
    """Aggregate per-pod states: any failure wins, then waiting, then under way."""
    seen = set(states)
    for state in (PhaseState.WARNING, PhaseState.PENDING, PhaseState.ACTIVE):
        if state in seen:
            return state
    return PhaseState.DONE


def clip(text: str, limit: int = 300) -> str:
    """Keep evidence lines readable; the full text stays in the snapshot."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass(frozen=True)
class PodVerdict:
    """One pod's (or container's) standing in a pod-level phase."""

    state: PhaseState
    finding: Finding
    short: str = ""
    evidence: str = ""
    cause: str | None = None  # what pods failing for one shared cause have in common (an image, …)


def aggregate(
    name: str,
    layer: int,
    verdicts: list[PodVerdict],
    *,
    total: int,
    done_summary: str,
    healthy: Finding,
) -> PhaseResult:
    """Fold per-pod verdicts into a phase line: the worst state and its first evidence."""
    evidence = [v.evidence for v in verdicts if v.evidence and v.state is not PhaseState.DONE]
    state = worst(v.state for v in verdicts)
    if state is PhaseState.DONE:
        return result(name, layer, state, done_summary, healthy, evidence)
    chosen = [v for v in verdicts if v.state is state]
    first = chosen[0]
    count = f"{len(chosen)}/{total} pods" if total > 1 else "pod"
    return result(name, layer, state, f"{count}: {first.short}", first.finding, evidence, cause=first.cause)


def waiting_for_earlier(
    name: str, layer: int, earlier: dict[str, PhaseResult], finding: Finding, what: str
) -> PhaseResult | None:
    """`pending` when an earlier phase has not finished and nothing here exists yet."""
    for prev in earlier.values():
        if not prev.state.finished:
            return result(name, layer, PhaseState.PENDING, f"{what} (waiting on {prev.name})", finding)
    return None
