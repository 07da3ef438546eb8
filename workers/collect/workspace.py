"""Layers 1 and 2: is the workspace reachable and handed off, under the asker's identity?

Layer 1 (`workspace connection`): the descriptor resolves, the API server
answers, the TauWorkspace and LocalQueue exist, and the user's RBAC allows
what a status needs (SelfSubjectAccessReviews). Layer 2 (`workspace status`):
the TauWorkspace is Ready — RBACReady and QueueReady true, no drift;
WorkloadIdentityReady is shown but does not gate — and, because Ready does
not prove storage, PVC `blob-training` is Bound.
"""

from __future__ import annotations

import asyncio

from workers.config.workspaces import Registry, ResolutionFailure, WorkspaceConnection
from workers.diagnosis.checks import Check, LayerReport
from workers.kube.client import Identity, KubeClients
from workers.kube.reader import KubeReader, ReadError, resource_path

TAU_GROUP, TAU_VERSION = "taugrid.io", "v1alpha1"
PVC_NAME = "blob-training"

# What `tau run status` reads, as (verb, resource, group, subresource).
STATUS_PERMISSIONS: tuple[tuple[str, str, str, str | None], ...] = (
    ("list", "workloads", "kueue.x-k8s.io", None),
    ("list", "pods", "", None),
    ("list", "events", "", None),
    ("list", "rayjobs", "ray.io", None),
    ("list", "rayclusters", "ray.io", None),
    ("list", "resourceclaims", "resource.k8s.io", None),
    ("get", "pods", "", "log"),
)

GATING_CONDITIONS = ("RBACReady", "QueueReady")


def resolution_report(failure: ResolutionFailure, workspace: str | None) -> LayerReport:
    """A descriptor problem: the researcher's to fix (SPEC §4 layer 1)."""
    return LayerReport(
        layer=1,
        workspace=workspace,
        ok=False,
        summary=failure.message,
        checks=[Check(name="descriptor", state="failed", detail=failure.message)],
        owner="researcher",
        transient=False,
        next_action="Get a valid WorkspaceConnection descriptor from the platform operator who "
        "owns the TauWorkspace (or name the workspace with --workspace).",
    )


def unreachable_report(ws: WorkspaceConnection, error: ReadError, what: str) -> LayerReport:
    """The first live call failed: credentials, reachability or RBAC — the platform's."""
    forbidden = error.kind == "forbidden"
    detail = error.describe() + (f": {error.message}" if error.message and forbidden else "")
    return LayerReport(
        layer=1,
        workspace=ws.metadata.name,
        ok=False,
        summary=f"{what}: {detail}",
        checks=[Check(name=what, state="failed", detail=detail)],
        owner="platform",
        transient=error.kind == "unavailable",
        next_action=(
            "Your identity is not allowed to read the workspace: the platform fixes its RBAC."
            if forbidden
            else "The cluster did not answer (credentials, VPN/DNS or API server): retry; if it "
            "persists the platform checks access to the cluster."
        ),
    )


def readiness_report(ws: WorkspaceConnection, tw: dict, pvc: dict | ReadError | None) -> LayerReport:
    """Layer 2 from the TauWorkspace object (and the PVC when it was read)."""
    status = tw.get("status") or {}
    phase = status.get("phase") or "Pending"
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    checks = [Check(name="phase", state="ok" if phase == "Ready" else "failed", detail=phase)]
    for ctype in (*GATING_CONDITIONS, "WorkloadIdentityReady", "DriftDetected"):
        cond = conditions.get(ctype)
        if cond is None:
            checks.append(Check(name=ctype, state="warning", detail="not reported"))
            continue
        good = cond.get("status") == ("False" if ctype == "DriftDetected" else "True")
        text = f"{cond.get('status')} {cond.get('reason') or ''}: {cond.get('message') or ''}".strip(" :")
        state = "ok" if good else ("warning" if ctype == "WorkloadIdentityReady" else "failed")
        checks.append(Check(name=ctype, state=state, detail=text))
    if isinstance(pvc, dict):
        pvc_phase = (pvc.get("status") or {}).get("phase") or "Pending"
        checks.append(Check(name=f"PVC {PVC_NAME}", state="ok" if pvc_phase == "Bound" else "failed",
                            detail=pvc_phase))
    elif isinstance(pvc, ReadError):
        checks.append(Check(name=f"PVC {PVC_NAME}", state="failed",
                            detail="missing" if pvc.kind == "not_found" else pvc.describe()))
    failed = [c for c in checks if c.state == "failed"]
    ok = not failed
    summary = (f"TauWorkspace {ws.spec.workspace} is Ready" if ok else
               f"TauWorkspace {ws.spec.workspace}: " + "; ".join(f"{c.name} {c.detail}" for c in failed))
    return LayerReport(
        layer=2,
        workspace=ws.metadata.name,
        ok=ok,
        summary=summary,
        checks=checks,
        owner=None if ok else "platform",
        transient=None if ok else False,
        next_action="" if ok else "Platform action: the workspace controller reconciles RBAC, "
        "queues and storage — do not hand-edit around a Degraded condition; resubmitting "
        "will not help.",
        phase=phase,
    )


def tauworkspace_path(ws: WorkspaceConnection) -> str:
    return resource_path(TAU_GROUP, TAU_VERSION, "tauworkspaces", name=ws.spec.workspace)


def _resolve(registry: Registry, workspace: str | None, channel: str | None
             ) -> WorkspaceConnection | LayerReport:
    resolution = registry.resolve(workspace=workspace, channel=channel)
    if isinstance(resolution, ResolutionFailure):
        return resolution_report(resolution, workspace)
    return resolution.descriptor


async def check_connection(registry: Registry, *, workspace: str | None = None,
                           channel: str | None = None, identity: Identity | None = None,
                           offline: bool = False, timeout: float = 10.0,
                           kube: KubeClients | None = None) -> LayerReport:
    """`taubot workspace connection`: layer 1, offline or live under `identity`."""
    ws = _resolve(registry, workspace, channel)
    if isinstance(ws, LayerReport):
        return ws
    resolved = Check(name="descriptor", state="ok", detail=f"{ws.metadata.name} → namespace "
                     f"{ws.spec.namespace}, queue {ws.spec.localQueue}")
    if offline:
        return LayerReport(layer=1, workspace=ws.metadata.name, ok=True,
                           summary="descriptor resolved (offline: nothing live checked)",
                           checks=[resolved])
    if identity is None:
        raise ValueError("a live connection check needs the asking user's identity")
    api = await (kube or KubeClients()).user(ws.cluster_target(), identity)
    async with api:
        reader = KubeReader(api, timeout)
        version = await reader.get("/version")
        if isinstance(version, ReadError):
            return unreachable_report(ws, version, "API server")
        ns = ws.spec.namespace
        tw, lq, *reviews = await asyncio.gather(
            reader.get(tauworkspace_path(ws)),
            reader.get(resource_path("kueue.x-k8s.io", "v1beta2", "localqueues", ns, ws.spec.localQueue)),
            *(reader.access_review(verb, res, grp, ns, sub) for verb, res, grp, sub in STATUS_PERMISSIONS),
        )
    checks = [resolved, Check(name="API server", state="ok", detail=str(version.get("gitVersion", "")))]
    for name, got in ((f"TauWorkspace {ws.spec.workspace}", tw), (f"LocalQueue {ws.spec.localQueue}", lq)):
        if isinstance(got, ReadError):
            checks.append(Check(name=name, state="failed",
                                detail="missing" if got.kind == "not_found" else got.describe()))
        else:
            checks.append(Check(name=name, state="ok", detail="present"))
    for (verb, res, _group, sub), allowed in zip(STATUS_PERMISSIONS, reviews, strict=True):
        what = f"{verb} {res}{'/' + sub if sub else ''}"
        if isinstance(allowed, ReadError):
            checks.append(Check(name=f"may {what}", state="failed", detail=allowed.describe()))
        else:
            checks.append(Check(name=f"may {what}", state="ok" if allowed else "failed",
                                detail="allowed" if allowed else "permission denied"))
    failed = [c for c in checks if c.state == "failed"]
    if not failed:
        return LayerReport(layer=1, workspace=ws.metadata.name, ok=True,
                           summary="connected: cluster reachable, workspace and queue present, "
                           "access verified", checks=checks)
    return LayerReport(
        layer=1, workspace=ws.metadata.name, ok=False,
        summary="; ".join(f"{c.name}: {c.detail}" for c in failed),
        checks=checks, owner="platform", transient=False,
        next_action="The platform fixes the workspace's objects or RBAC (the failed checks say "
        "which); nothing in the run config can fix this.",
    )


async def workspace_status(registry: Registry, name: str, *, identity: Identity,
                           timeout: float = 10.0, kube: KubeClients | None = None) -> LayerReport:
    """`taubot workspace status NAME`: layer 2 (and the layer-1 failure that blocks it)."""
    ws = _resolve(registry, name, None)
    if isinstance(ws, LayerReport):
        return ws
    api = await (kube or KubeClients()).user(ws.cluster_target(), identity)
    async with api:
        reader = KubeReader(api, timeout)
        tw, pvc = await asyncio.gather(
            reader.get(tauworkspace_path(ws)),
            reader.get(resource_path("", "v1", "persistentvolumeclaims", ws.spec.namespace, PVC_NAME)),
        )
    if isinstance(tw, ReadError):
        return unreachable_report(ws, tw, f"TauWorkspace {ws.spec.workspace}")
    return readiness_report(ws, tw, pvc)
