"""Layer 8: the recovery verdict for the answer as a whole (SPEC §5a).

Never `retry` or `wait` past an unresolved layer 1–3 problem, a Degraded
workspace, or a real quota or node problem — retrying those only reproduces
the failure (the guide's layer 8). A known checkpoint turns a failure of the
run's own process into `resume-from-checkpoint`, naming it.
"""

from __future__ import annotations

from .models import Finding, PhaseResult, PhaseState, Recovery, RecoveryAction
from .registry import OWN_PROCESS, RUNTIME_PROGRESS


def recovery(first: PhaseResult | None, finding: Finding, layer: int, *, terminal: str | None,
             checkpoint: str | None) -> Recovery:
    if terminal == "succeeded":
        return Recovery(action="none", summary="Nothing to recover: the run succeeded.")
    if first is None:
        return Recovery(action="none", summary="No lifecycle phase shows a failure; progress is proven only "
                        "by the log and the experiment record.")
    if first.state is PhaseState.ACTIVE and first.layer == 7 and finding.transient is None:
        what = "the log shows progress" if first.name == RUNTIME_PROGRESS.name else "the run is running"
        return Recovery(action="none", summary=f"Nothing to recover: {what}.")
    fix = finding.next_action

    def saying_fix(action: RecoveryAction, lead: str) -> Recovery:
        """A recovery whose summary ends with the answer's next action (the card shows it once)."""
        return Recovery(action=action, summary=f"{lead}{fix}", states_next_action=True)

    if layer <= 3:
        return saying_fix("fix-then-resubmit", f"Fix layer {layer} first (retrying reproduces it): ")
    if first.state in (PhaseState.PENDING, PhaseState.ACTIVE) and terminal is None:
        return saying_fix("wait", "Under way, no failure evidence yet: ")
    if finding.transient is True:
        if terminal is None:
            return saying_fix("wait", "Transient, and retried by the system itself: ")
        return saying_fix("retry", "The run ended for a transient reason: resubmit it unchanged. ")
    if checkpoint and first.name in OWN_PROCESS and first.state is PhaseState.WARNING:
        return saying_fix("resume-from-checkpoint", f"Fix the cause first, then resume from {checkpoint}: ")
    return saying_fix("fix-then-resubmit", "Not transient: ")

__all__ = ["recovery"]
