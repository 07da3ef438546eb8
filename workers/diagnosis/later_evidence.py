"""SPEC §3's two rules for what a snapshot does not show: later evidence, and a retrying RayJob.

Pasted dumps are partial (a `kubectl get jobs,pods` without Workloads, a
RayJob without its pods), so an object missing from the snapshot is not proof
that its phase has not happened. When later evidence shows it did, the phase
is done and says what proved it; only evidence that contradicts a phase makes
it not done:
* an unsuspended Kueue-labelled Job whose pods are scheduled was admitted;
* a RayJob whose `jobDeploymentStatus` is Running, Complete or Failed was
  admitted and had its RayCluster; an unsuspended one whose RayCluster exists
  was admitted; one whose driver reported a status
  (`jobStatus` RUNNING, SUCCEEDED, FAILED, STOPPED) had its pods scheduled and
  started.

A RayJob retrying after a failed attempt (`jobDeploymentStatus: Retrying`,
or `status.failed` > 0 while the attempt's RayCluster is not there yet) has
its verdict in `RayJob status`: the RayCluster and pod phases of an attempt
that does not exist yet are skipped ("re-created for attempt N"), never
blamed on the node pool.
"""

from __future__ import annotations

from . import registry
from .models import PhaseResult, PhaseState
from .phases.common import RunContext
from .podfacts import is_scheduled, kueue_gated, pod_phase

PROVEN_DEPLOYMENTS = ("Running", "Complete", "Failed")
DRIVER_RAN = ("RUNNING", "SUCCEEDED", "FAILED", "STOPPED")  # a status only a driver that ran reports
POD_PHASES = registry.POD_PHASES


def _admission_proof(ctx: RunContext) -> str | None:
    objs = ctx.objs
    if objs.kind == "RayJob":
        deploy = ctx.status.get("jobDeploymentStatus") or ""
        if deploy in PROVEN_DEPLOYMENTS:
            return f"the RayJob's jobDeploymentStatus {deploy} proves admission"
        suspended = bool((objs.run.get("spec") or {}).get("suspend"))  # type: ignore[union-attr]
        if objs.raycluster is not None and not suspended:
            return "its RayCluster exists, which KubeRay creates only once Kueue admits the RayJob"
        if deploy == "Retrying" and not suspended:
            return "the RayJob's failed earlier attempt proves an admission"
        return None
    if (objs.run.get("spec") or {}).get("suspend"):  # type: ignore[union-attr]
        return None
    scheduled = [p for p in objs.pods if is_scheduled(p) and not kueue_gated(p)]
    if not scheduled:
        return None
    running = any(pod_phase(p) in ("Running", "Succeeded") for p in scheduled)
    return f"{'running' if running else 'scheduled'} pods prove admission"


def _proven(phase: PhaseResult, summary: str, reason: str) -> PhaseResult:
    return phase.model_copy(update={"state": PhaseState.DONE, "summary": summary, "reason": reason})


def retry_attempt(ctx: RunContext) -> int | None:
    """The attempt a retrying RayJob is on (2 after one failure), while that attempt's RayCluster
    does not exist yet; None otherwise."""
    objs = ctx.objs
    if objs.kind != "RayJob" or objs.run is None:
        return None
    failed = ctx.status.get("failed") or 0
    deploy = ctx.status.get("jobDeploymentStatus") or ""
    if not isinstance(failed, int):
        failed = 0
    if deploy == "Retrying" or (failed > 0 and objs.raycluster is None and deploy not in PROVEN_DEPLOYMENTS):
        return max(failed, 1) + 1
    return None


def apply(ctx: RunContext, results: dict[str, PhaseResult]) -> None:
    """Close the phases later evidence proves, and skip a retry's not-yet-existing attempt."""
    objs = ctx.objs
    if objs.run is None or ctx.terminal() is not None:
        return  # a finished run is judged as it finished (evaluate._judge_finished)
    attempt = retry_attempt(ctx)
    admission = results[registry.ADMISSION.name]
    if not objs.workloads and admission.state is PhaseState.PENDING:
        proof = _admission_proof(ctx)
        if proof:
            results[registry.ADMISSION.name] = _proven(admission, f"Workload not in the snapshot; {proof}",
                                                       "quota.proven")
    if attempt is not None:
        for name in (registry.RAYCLUSTER.name, *POD_PHASES):
            if not results[name].state.finished or name == registry.RAYCLUSTER.name:
                results[name] = results[name].model_copy(update={
                    "state": PhaseState.SKIPPED, "summary": f"re-created for attempt {attempt}",
                    "reason": "rayjob.retrying", "cause": None, "via": None, "evidence": []})
        return
    if objs.kind != "RayJob":
        return
    deploy = ctx.status.get("jobDeploymentStatus") or ""
    cluster = results[registry.RAYCLUSTER.name]
    if objs.raycluster is None and deploy in PROVEN_DEPLOYMENTS and cluster.state is PhaseState.PENDING:
        name = objs.raycluster_name or "the RayCluster"
        results[registry.RAYCLUSTER.name] = _proven(
            cluster, f"{name} not in the snapshot; jobDeploymentStatus {deploy} proves it was created",
            "raycluster.proven")
    job_status = ctx.status.get("jobStatus") or ""
    if not objs.pods and job_status in DRIVER_RAN:
        for phase_name in POD_PHASES:
            phase = results[phase_name]
            if phase.state is PhaseState.PENDING:
                results[phase_name] = _proven(phase, f"pods not in the snapshot; the driver's {job_status} "
                                              "status proves they started", "pods.proven")


__all__ = ["apply", "retry_attempt"]
