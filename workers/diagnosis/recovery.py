"""Layer 8: the recovery verdict for the answer as a whole (SPEC §5a).

Never `retry` or `wait` past an unresolved layer 1–3 problem, a Degraded
workspace, or a real quota or node problem — retrying those only reproduces
the failure (the guide's layer 8). A known checkpoint turns a failure of the
run's own process into `resume-from-checkpoint`, naming it.
"""

from __future__ import annotations

from .models import Finding, PhaseResult, PhaseState, Recovery
from .registry import OWN_PROCESS, RUNTIME_PROGRESS


def recovery(first: PhaseResult | None, finding: Finding, layer: int, *, terminal: str | None,
             checkpoint: str | None) -> Recovery:
    if terminal == "succeeded":
        return Recovery(action="none", summary="Nothing to recover: the run succeeded.")
    if first is None:
        return Recovery(action="none", summary="No lifecycle phase shows a failure; progress is proven only "
                        "by the log (`/tau logs <run>`).")
    if first.state is PhaseState.ACTIVE and first.layer == 7 and finding.transient is None:
        what = "the log shows progress" if first.name == RUNTIME_PROGRESS.name else "the run is running"
        return Recovery(action="none", summary=f"Nothing to recover: {what}.")
    fix = finding.next_action
    if layer <= 3:
        return Recovery(action="fix-then-resubmit",
                        summary=f"Fix layer {layer} first (retrying reproduces it): {fix}")
    if first.state in (PhaseState.PENDING, PhaseState.ACTIVE) and terminal is None:
        return Recovery(action="wait", summary=f"Under way, no failure evidence yet: {fix}")
    if finding.transient is True:
        if terminal is None:
            return Recovery(action="wait", summary=f"Transient, and retried by the system itself: {fix}")
        return Recovery(action="retry",
                        summary=f"The run ended for a transient reason: resubmit it unchanged. {fix}")
    if checkpoint and first.name in OWN_PROCESS and first.state is PhaseState.WARNING:
        return Recovery(action="resume-from-checkpoint",
                        summary=f"Fix the cause first, then resume from {checkpoint}: {fix}")
    return Recovery(action="fix-then-resubmit", summary=f"Not transient: {fix}")


__all__ = ["recovery"]
