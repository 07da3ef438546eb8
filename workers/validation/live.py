"""`/tau validate`: the offline checks, then layers 1, 2 and 4 and a server-side dry run, as the user.

Why a dry run and not our own rules only: the API server is the authority on
its schema (`fieldValidation=Strict`), the user's RBAC (may *this user*
create a RayJob here?) and the admission webhooks — Kueue's among them. A
`dryRun=All` create runs all three and stores nothing (KEP-576), so the
researcher hears "this will be rejected, and why" in the server's own words
before anything reaches the queue.

Requests, all impersonated: `/version`, then together the TauWorkspace, the
LocalQueue and the dry-run POST — four, in two round trips. Nothing else is
written: `KubeReader.dry_run_create` sets `dryRun=All` itself.

How an answer maps to a layer and an owner (SPEC §4):
* 403 from RBAC → layer 1, platform (the workspace's RBAC lacks create);
* 403 "admission webhook … denied the request", 422 Invalid, 400 strict
  decoding, 409 exists → layer 3, researcher (authoring);
* 404 for the kind → layer 1, platform (the CRD is not served);
  404 for the namespace → layer 2, platform;
* TauWorkspace not Ready → layer 2, platform; LocalQueue missing or not
  Active → layer 4, queue-owner;
* anything unreachable → layer 1, platform, transient — never "accepted".
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from workers.collect.workspace import readiness_report, tauworkspace_path
from workers.config.workspaces import Registry, ResolutionFailure, WorkspaceConnection
from workers.contracts.identity import Identity
from workers.kube.client import KubeClients
from workers.kube.reader import DryRunAnswer, KubeReader, ReadError, resource_path

from .local import local_checks
from .manifest import ManifestError, load
from .report import ValidationCheck, ValidationReport, conclude, input_report

KINDS = {"Job": ("batch", "v1", "jobs"), "RayJob": ("ray.io", "v1", "rayjobs")}
KUEUE = ("kueue.x-k8s.io", "v1beta2")
_WEBHOOK = "admission webhook"


def describe(doc: dict[str, Any], kind: str, namespace: str | None) -> str:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    name = meta.get("name") or (f"{meta.get('generateName')}…" if meta.get("generateName") else "?")
    where = namespace or meta.get("namespace")
    return f"{kind} {where}/{name}" if where else f"{kind} {name}"


def _unreachable(name: str, error: ReadError) -> ValidationCheck:
    forbidden = error.kind == "forbidden"
    return ValidationCheck(
        name=name, state="failed", layer=1, owner="platform",
        detail=error.describe() + (f": {error.message}" if forbidden and error.message else ""),
        fix="Your identity may not read the workspace: the platform fixes its RBAC." if forbidden else
        "The cluster did not answer (credentials, VPN/DNS or API server): retry; if it persists the "
        "platform checks access to the cluster.")


def _causes(body: dict[str, Any]) -> list[str]:
    details = body.get("details") if isinstance(body.get("details"), dict) else {}
    causes = details.get("causes") if isinstance(details.get("causes"), list) else []
    out = []
    for cause in causes:
        if isinstance(cause, dict):
            field, message = cause.get("field") or "", cause.get("message") or cause.get("reason") or ""
            out.append(f"{field}: {message}" if field else str(message))
    return out


def dry_run_check(answer: DryRunAnswer, ws: WorkspaceConnection, plural: str) -> ValidationCheck:
    """The dry run's verdict, as the server gave it."""
    body, status = answer.body, answer.status
    message = str(body.get("message") or "")
    name = "dry run (API server)"
    if answer.accepted:
        return ValidationCheck(name=name, state="ok", layer=3, detail="accepted: schema, your RBAC and the "
                               "admission webhooks (Kueue's) passed; nothing was created")
    details = body.get("details") if isinstance(body.get("details"), dict) else {}
    if status == 403 and _WEBHOOK not in message:
        return ValidationCheck(name=name, state="failed", layer=1, owner="platform",
                               detail=f"permission denied (create {plural}): {message}",
                               fix=f"Your identity may not create {plural} in {ws.spec.namespace}: the "
                               "platform grants it through the workspace's RBAC.")
    if status == 404:
        if details.get("kind") == "namespaces":
            return ValidationCheck(name=name, state="failed", layer=2, owner="platform",
                                   detail=f"namespace {ws.spec.namespace} not found: {message}",
                                   fix="The workspace's namespace is missing: the platform reconciles "
                                   "the TauWorkspace.")
        return ValidationCheck(name=name, state="failed", layer=1, owner="platform",
                               detail=f"{plural} are not served by this cluster: {message}",
                               fix=f"The cluster does not serve {plural} (the CRD or operator is not "
                               "installed): the platform installs it.")
    if status in (400, 403, 409, 422):
        causes = _causes(body)
        shown = "; ".join(causes[:5]) if causes else message
        if status == 409:
            fix = "A run of that name exists: choose another metadata.name (or use generateName)."
        elif status == 403:
            fix = "An admission webhook refused the manifest: fix what it names and validate again."
        else:
            fix = "Fix the fields the API server names and validate again; nothing was submitted."
        reason = {400: "rejected", 403: "denied by admission", 409: "already exists", 422: "invalid"}[status]
        return ValidationCheck(name=name, state="failed", layer=3, owner="researcher",
                               detail=f"{reason}: {shown}", fix=fix)
    return ValidationCheck(name=name, state="failed", layer=1, owner="platform",
                           detail=f"unavailable (HTTP {status}{': ' + message if message else ''})",
                           fix="The API server failed the request: retry; if it persists the platform "
                           "checks the API server and its webhooks.")


def queue_check(lq: dict[str, Any] | ReadError, queue: str) -> ValidationCheck:
    """Layer 4 before submitting: the LocalQueue exists and accepts workloads."""
    name = f"LocalQueue {queue}"
    fix = f"The queue owner creates or restarts LocalQueue {queue} (and its ClusterQueue)."
    if isinstance(lq, ReadError):
        if lq.kind == "not_found":
            return ValidationCheck(name=name, state="failed", layer=4, owner="queue-owner",
                                   detail="not found: Kueue would leave the run Inadmissible", fix=fix)
        return _unreachable(name, lq)
    active = next((c for c in (lq.get("status") or {}).get("conditions") or []
                   if isinstance(c, dict) and c.get("type") == "Active"), None)
    if active is None:
        return ValidationCheck(name=name, state="warning", layer=4, owner="queue-owner",
                               detail="present; Active not reported yet")
    text = f"{active.get('reason') or ''}: {active.get('message') or ''}".strip(" :")
    if active.get("status") != "True":
        return ValidationCheck(name=name, state="failed", layer=4, owner="queue-owner",
                               detail=f"not active ({text})", fix=fix)
    return ValidationCheck(name=name, state="ok", layer=4, detail=f"active ({text})")


def _resolve(registry: Registry, workspace: str | None,
             channel: str | None) -> WorkspaceConnection | ValidationCheck:
    resolution = registry.resolve(workspace=workspace, channel=channel)
    if isinstance(resolution, ResolutionFailure):
        return ValidationCheck(name="workspace", state="failed", layer=1, owner="researcher",
                               detail=resolution.message,
                               fix="Name the workspace with --workspace (or get a WorkspaceConnection "
                               "descriptor from the platform operator).")
    return resolution.descriptor


async def validate_manifest(registry: Registry, doc: dict[str, Any], kind: str, *,
                            workspace: str | None, channel: str | None = None,
                            identity: Identity | None, offline: bool = False,
                            timeout: float = 10.0, kube: KubeClients | None = None) -> ValidationReport:
    """Layers 1–4 for one manifest; offline stops after the local checks."""
    ws = _resolve(registry, workspace, channel)
    if isinstance(ws, ValidationCheck):
        return conclude([ws, *local_checks(doc, kind, namespace=None, queue=None)], workspace=workspace,
                        manifest=describe(doc, kind, None), offline=offline)
    ns, queue = ws.spec.namespace, ws.spec.localQueue
    checks = [ValidationCheck(name="workspace", state="ok", layer=1,
                              detail=f"{ws.metadata.name} → namespace {ns}, queue {queue}"),
              *local_checks(doc, kind, namespace=ns, queue=queue)]
    common = {"workspace": ws.metadata.name, "manifest": describe(doc, kind, ns), "offline": offline}
    if offline:
        return conclude(checks, **common, summary_ok="the manifest passes every offline check (nothing "
                        "live was checked: no RBAC, admission or queue)")
    if identity is None:
        raise ValueError("a live validation needs the asking user's identity")
    group, version, plural = KINDS[kind]
    body = copy.deepcopy(doc)
    if not isinstance(body.get("metadata"), dict):
        body["metadata"] = {}
    body["metadata"]["namespace"] = ns
    api = await (kube or KubeClients()).user(ws.cluster_target(), identity)
    async with api:
        reader = KubeReader(api, timeout)
        version_info = await reader.get("/version")
        if isinstance(version_info, ReadError):
            checks.insert(1, _unreachable("API server", version_info))
            return conclude(checks, **common, transient=version_info.kind == "unavailable")
        tw, lq, answer = await asyncio.gather(
            reader.get(tauworkspace_path(ws)),
            reader.get(resource_path(*KUEUE, "localqueues", ns, queue)),
            reader.dry_run_create(resource_path(group, version, plural, ns), body),
        )
    checks.insert(1, ValidationCheck(name="API server", state="ok", layer=1,
                                     detail=str(version_info.get("gitVersion", ""))))
    if isinstance(tw, ReadError):
        checks.append(_unreachable(f"TauWorkspace {ws.spec.workspace}", tw))
    else:
        ready = readiness_report(ws, tw, None)
        checks.append(ValidationCheck(name=f"TauWorkspace {ws.spec.workspace}", layer=2, owner="platform",
                                      state="ok" if ready.ok else "failed", detail=ready.summary,
                                      fix=ready.next_action))
    checks.append(queue_check(lq, queue))
    transient = False
    if isinstance(answer, ReadError):
        checks.append(_unreachable("dry run (API server)", answer))
        transient = answer.kind == "unavailable"
        return conclude(checks, **common, transient=transient)
    server = dry_run_check(answer, ws, plural)
    checks.append(server)
    if answer.accepted:  # strict field validation passed: our schema is behind the cluster's
        for i, check in enumerate(checks):
            if check.name == "fields" and check.state == "failed":
                checks[i] = check.model_copy(update={
                    "state": "warning", "detail": check.detail + " — unknown to taubot's schema, but the "
                    "API server's strict field validation accepted them"})
    message = "" if answer.accepted else str(answer.body.get("message") or "")
    return conclude(checks, **common, dry_run="accepted" if answer.accepted else "rejected",
                    server_message=message, transient=transient,
                    summary_ok="the API server would accept it as you: schema, RBAC and admission pass, the "
                    "workspace is Ready and the queue is active. Nothing was created.")


async def validate_text(registry: Registry, text: str, *, workspace: str | None, channel: str | None = None,
                        identity: Identity | None, offline: bool = False,
                        timeout: float = 10.0, kube: KubeClients | None = None) -> ValidationReport:
    """`validate_manifest` for text as given; input that is not one Job or RayJob is the report."""
    try:
        doc, kind = load(text)
    except ManifestError as error:
        return input_report(error, workspace, offline=offline)
    return await validate_manifest(registry, doc, kind, workspace=workspace, channel=channel,
                                   identity=identity, offline=offline, timeout=timeout, kube=kube)


__all__ = ["dry_run_check", "queue_check", "validate_manifest", "validate_text"]
