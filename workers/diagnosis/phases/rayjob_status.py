"""RayJob status (layer 7, RayJob only): what KubeRay says about the Ray job itself.

`jobDeploymentStatus` wins over `jobStatus`: KubeRay can report `jobStatus:
RUNNING` next to `jobDeploymentStatus: Failed` (ray-project/kuberay#2314).
A running job is `active` — Running never proves progress; the logs do.
"""

from __future__ import annotations

from .. import registry
from ..models import Finding, PhaseResult, PhaseState
from .common import RunContext, clip, result

NAME = registry.RAYJOB_STATUS.name
LAYER = registry.RAYJOB_STATUS.layer

RUNNING = Finding(
    reason="rayjob.running",
    owner="researcher",
    transient=None,
    next_action="The Ray job is running; Running does not prove progress — check the driver "
    "log (`tau logs <run>`) and the experiment record (`taugrid-portal experiment status`).",
)
FAILED = Finding(
    reason="rayjob.failed",
    owner="researcher",
    transient=False,
    next_action="The Ray job failed: read the driver log (`tau logs <run>`), fix the "
    "application or config, and resubmit.",
)
RETRYING = Finding(
    reason="rayjob.retrying",
    owner="researcher",
    transient=True,
    next_action="KubeRay is retrying the job after a failure (backoffLimit): read the failed "
    "attempt's driver log (`tau logs <run>`).",
)
WAITING = Finding(reason="rayjob.waiting", owner="researcher", transient=None,
                  next_action="The Ray job has not been submitted yet; earlier phases explain why.")
DONE = Finding(reason="rayjob.ok", owner="researcher", transient=None, next_action="The Ray job succeeded.")


def evaluate(ctx: RunContext, earlier: dict[str, PhaseResult]) -> PhaseResult:
    if ctx.objs.run is None:
        return result(NAME, LAYER, PhaseState.PENDING, "run not found", WAITING)
    if ctx.objs.kind != "RayJob":
        return result(NAME, LAYER, PhaseState.SKIPPED, "not a RayJob", DONE)
    st = ctx.status
    deploy = st.get("jobDeploymentStatus") or ""
    job = st.get("jobStatus") or ""
    reason = st.get("reason") or ""
    message = st.get("message") or ""
    shown = f"jobDeploymentStatus={deploy or '∅'} jobStatus={job or '∅'}"
    evidence = [shown + (f" reason={reason}" if reason else "")]
    if message:
        evidence.append(f"message: {clip(message, 400)}")
    why = ": ".join(x for x in (reason, clip(message, 200)) if x)
    if deploy in ("Failed", "ValidationFailed"):
        ignored = f" (jobStatus {job} ignored: deployment status wins)" if job == "RUNNING" else ""
        return result(NAME, LAYER, PhaseState.WARNING, f"Failed: {why or deploy}{ignored}", FAILED,
                      evidence)
    if deploy == "Complete":
        if job == "SUCCEEDED":
            return result(NAME, LAYER, PhaseState.DONE, "Complete: SUCCEEDED", DONE, evidence)
        return result(NAME, LAYER, PhaseState.WARNING, f"Complete with jobStatus {job or '∅'}"
                      + (f": {why}" if why else ""), FAILED, evidence)
    if deploy == "Retrying":
        return result(NAME, LAYER, PhaseState.WARNING,
                      f"Retrying after failure (failed={st.get('failed', 0)})"
                      + (f": {why}" if why else ""), RETRYING, evidence)
    if job in ("FAILED", "STOPPED"):
        return result(NAME, LAYER, PhaseState.WARNING, f"jobStatus {job}" + (f": {why}" if why else ""),
                      FAILED, evidence)
    if deploy == "Running":
        text = "RUNNING: check progress in the driver log" if job == "RUNNING" else (
            f"submitted, jobStatus {job or 'PENDING'}")
        return result(NAME, LAYER, PhaseState.ACTIVE, text, RUNNING, evidence)
    state_text = deploy or "not started"
    return result(NAME, LAYER, PhaseState.PENDING, f"{state_text}: waiting for the RayCluster",
                  WAITING, evidence)
