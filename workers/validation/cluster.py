"""Layer 6 on demand: `cluster validate topology` (read-only) and `cluster validate nodes` (operator-only).

Both run under the caller's impersonated identity and nothing else:
* **topology** reads each ready TauCluster profile's ResourceFlavors and the
  nodes matching each flavor's `nodeLabels` (Ready, uncordoned, with the
  flavor's taints tolerated, GPUs allocatable, and every level label of the
  flavor's Topology); "zero matching nodes for flavor F" is the failure
  (shared/reference/node-health.md §1.6, Kueue TAS rules).
* **nodes** creates one validation pod per selected node — as the caller,
  so only someone whose RBAC allows (privileged) pods in the validation
  namespace can run it; taubot's own identity never creates pods. An access
  review refuses everyone else before any pod exists. Each pod's exit says
  healthy or the failing check, and a pod that never ran to its end says why
  the node was not validated; pods are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import aiohttp

from workers.config.workspaces import Registry, ResolutionFailure, WorkspaceConnection
from workers.contracts.identity import Identity
from workers.diagnosis.checks import Check, LayerReport
from workers.diagnosis.nodes import GPU, node_faults
from workers.diagnosis.podfacts import condition
from workers.kube.client import KubeClients
from workers.kube.reader import KubeReader, ReadError, resource_path
from workers.outside.text import outside

KUEUE = ("kueue.x-k8s.io", "v1beta2")
VALIDATION_LABEL = "taugrid.io/node-validation"
DEFAULT_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"
DEFAULT_COMMAND = "nvidia-smi -L && nvidia-smi -q -d ECC,ROW_REMAPPER && dcgmi diag -r 1"
OWNER_FIX = ("The node-pool owner reconciles the pool with the profile (labels, taints, device plugin) "
             "or repairs the failing nodes.")
NOT_VALIDATED = ("No node failed a check, but some could not be validated (each line says why): fix that "
                 "and validate them again.")
NOT_ADMITTED = ("The validation pod runs privileged (it reads the GPUs a run holds without taking them): "
                "the validation namespace's Pod Security level (pod-security.kubernetes.io/enforce="
                "privileged) and its admission policies must admit it; the cluster's platform operator "
                "sets them.")
TERMINAL = ("Succeeded", "Failed")
QUIET_STREAMS, RESUME_PAUSE_SECONDS = 3, 1.0  # after that many WATCHes ended with no event, pause between


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _tolerated(taint: dict, flavor_spec: dict) -> bool:
    if taint.get("effect") not in ("NoSchedule", "NoExecute"):
        return True
    for own in flavor_spec.get("nodeTaints") or []:
        if own.get("key") == taint.get("key") and own.get("effect") == taint.get("effect"):
            return True
    for tol in flavor_spec.get("tolerations") or []:
        if tol.get("key") in (None, "", taint.get("key")) and (
                tol.get("operator") == "Exists" or tol.get("value") == taint.get("value")) and (
                not tol.get("effect") or tol.get("effect") == taint.get("effect")):
            return True
    return False


def matching_nodes(flavor: dict, nodes: list[dict], topology: dict | None) -> tuple[int, list[str]]:
    """How many nodes back the flavor, and why the others do not (pure)."""
    spec = flavor.get("spec") or {}
    levels = [lv.get("nodeLabel") for lv in ((topology or {}).get("spec") or {}).get("levels") or []]
    good, why = 0, []
    for node in nodes:
        name = (node.get("metadata") or {}).get("name")
        labels = (node.get("metadata") or {}).get("labels") or {}
        ready = condition(node, "Ready")
        if not ready or ready.get("status") != "True":
            why.append(f"{name}: not Ready")
        elif (node.get("spec") or {}).get("unschedulable"):
            why.append(f"{name}: cordoned")
        elif any(not _tolerated(t, spec) for t in (node.get("spec") or {}).get("taints") or []):
            why.append(f"{name}: untolerated taint")
        elif GPU in ((node.get("status") or {}).get("capacity") or {}) and \
                str(((node.get("status") or {}).get("allocatable") or {}).get(GPU, "0")) in ("0", ""):
            why.append(f"{name}: no allocatable {GPU}")
        elif missing := [lv for lv in levels if lv and lv not in labels]:
            why.append(f"{name}: lacks topology label {missing[0]}")
        else:
            good += 1
    return good, why


def _resolve(registry: Registry, workspace: str | None) -> WorkspaceConnection | str:
    resolution = registry.resolve(workspace=workspace)
    return resolution.message if isinstance(resolution, ResolutionFailure) else resolution.descriptor


async def validate_topology(registry: Registry, *, identity: Identity, workspace: str | None = None,
                            profile: str | None = None, timeout: float = 10.0,
                            kube: KubeClients | None = None) -> LayerReport:
    ws = _resolve(registry, workspace)
    if isinstance(ws, str):
        return _no_workspace(workspace, ws)
    api = await (kube or KubeClients()).user(ws.cluster_target(), identity)
    async with api:
        reader = KubeReader(api, timeout)
        clusters = await reader.list(resource_path("taugrid.io", "v1alpha1", "tauclusters"))
        if isinstance(clusters, ReadError):
            return _unreadable(ws, "TauClusters", clusters)
        profiles = [p for c in clusters for p in (c.get("status") or {}).get("profiles") or []
                    if p.get("ready") and (profile is None or p.get("name") == profile)]
        if not profiles:
            what = (f"no ready TauCluster profile named {profile}" if profile
                    else "no ready TauCluster profile")
            return LayerReport(layer=6, workspace=ws.name, ok=False, summary=what, owner="platform",
                               transient=False, next_action="The platform publishes the profile set.")
        checks: list[Check] = []
        for prof in profiles:
            for flavor_name in prof.get("resourceFlavors") or []:
                checks.append(await _flavor_check(reader, prof.get("name"), flavor_name))
    failed = [c for c in checks if c.state == "failed"]
    summary = ("every flavor has matching Ready nodes" if not failed
               else "; ".join(f"{c.name}: {c.detail}" for c in failed[:3]))
    return LayerReport(layer=6, workspace=ws.name, ok=not failed, summary=summary, checks=checks,
                       owner="node-pool-owner" if failed else None, transient=False if failed else None,
                       next_action=OWNER_FIX if failed else "")


async def _flavor_check(reader: KubeReader, profile: str | None, name: str) -> Check:
    label = f"profile {profile} flavor {name}"
    flavor = await reader.get(resource_path(*KUEUE, "resourceflavors", name=name))
    if isinstance(flavor, ReadError):
        detail = "ResourceFlavor not found" if flavor.kind == "not_found" else flavor.describe()
        return Check(name=label, state="failed", detail=detail)
    spec = flavor.get("spec") or {}
    topology = None
    if spec.get("topologyName"):
        topology = await reader.get(resource_path(*KUEUE, "topologies", name=spec["topologyName"]))
        if isinstance(topology, ReadError):
            return Check(name=label, state="failed", detail=f"Topology {spec['topologyName']}: "
                         + ("not found" if topology.kind == "not_found" else topology.describe()))
    nodes = await reader.list(resource_path("", "v1", "nodes"),
                              label_selector=_selector(spec.get("nodeLabels") or {}) or None, limit=500)
    if isinstance(nodes, ReadError):
        return Check(name=label, state="failed", detail=f"nodes: {nodes.describe()}")
    good, why = matching_nodes(flavor, nodes, topology)
    if good == 0:
        wanted = _selector(spec.get("nodeLabels") or {})
        tail = f" ({'; '.join(why[:3])})" if why else f" (no node has {wanted})"
        return Check(name=label, state="failed", detail=f"zero matching nodes for flavor {name}{tail}")
    return Check(name=label, state="ok", detail=f"{good} matching Ready node(s)"
                 + (f"; {len(why)} excluded" if why else ""))


def _no_workspace(workspace: str | None, why: str) -> LayerReport:
    return LayerReport(layer=6, workspace=workspace, ok=False, summary=why, owner="researcher",
                       transient=False, next_action="Name a configured workspace (--workspace).")


def _unreadable(ws: WorkspaceConnection, what: str, error: ReadError) -> LayerReport:
    return LayerReport(layer=6, workspace=ws.name, ok=False, summary=f"{what}: {error.describe()}",
                       owner="platform", transient=error.kind == "unavailable",
                       next_action="This check is read-only but cluster-scoped: it needs cluster-wide read "
                       "access to TauClusters, ResourceFlavors, Topologies and Nodes.")


def validation_pod(node: str, run_id: str, image: str, command: str) -> dict[str, Any]:
    """One validation pod pinned to ``node`` (node-health.md §1.7's shape, but asking for no GPU).

    Why no `nvidia.com/gpu` request: the nodes worth validating are the ones a run's pods are
    bound to, and those pods hold the GPUs. A pod pinned with `nodeName` skips the scheduler, but
    the kubelet still admits it against what is free and rejects one asking for held GPUs
    (`OutOfnvidia.com/gpu`, "Pod was rejected: Node didn't have enough resource"), so the check
    could never run where it is needed. Privileged with `NVIDIA_VISIBLE_DEVICES=all`, the NVIDIA
    container runtime hands the container every GPU of the node without the device plugin (as
    dcgm-exporter runs; the runtime honours the variable for privileged containers only), and the
    checks it runs — `nvidia-smi -L`, the ECC and row-remapper query, `dcgmi diag -r 1` (the quick,
    deployment-level diagnostic) — read the GPUs without taking them from the run."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "taugrid-node-validate-", "labels": {VALIDATION_LABEL: run_id}},
        "spec": {
            "nodeName": node, "restartPolicy": "Never", "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "validate", "image": image, "command": ["sh", "-c", command],
                            "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                            "securityContext": {"privileged": True}}],
        },
    }


async def validate_nodes(registry: Registry, *, identity: Identity, selector: str, namespace: str,
                         workspace: str | None = None, min_healthy: int | None = None,
                         timeout: float = 120.0,
                         image: str = DEFAULT_IMAGE, command: str = DEFAULT_COMMAND,
                         request_timeout: float = 10.0, kube: KubeClients | None = None) -> LayerReport:
    """One validation pod per selected node, all at once, waited for together until ``timeout``:
    each node is healthy, failed (the check that failed, from its exit and log), or not validated
    (why: rejected, still pending or running) — a slow node never hides the others' answers."""
    ws = _resolve(registry, workspace)
    if isinstance(ws, str):
        return _no_workspace(workspace, ws)
    api = await (kube or KubeClients()).user(ws.cluster_target(), identity)
    async with api:
        reader = KubeReader(api, request_timeout)
        allowed = await reader.access_review("create", "pods", "", namespace=namespace)
        if allowed is not True:
            why = allowed.describe() if isinstance(allowed, ReadError) else "permission denied (create pods)"
            return LayerReport(layer=6, workspace=ws.name, ok=False,
                               summary=f"refused: {why} in namespace {namespace}; no pod was created",
                               owner="platform", transient=False,
                               next_action="`cluster validate nodes` is operator-only: it runs privileged "
                               "pods under your own identity, so your RBAC must allow creating them.")
        nodes = await reader.list(resource_path("", "v1", "nodes"), label_selector=selector, limit=500)
        if isinstance(nodes, ReadError):
            return _unreadable(ws, "Nodes", nodes)
        if not nodes:
            return LayerReport(layer=6, workspace=ws.name, ok=False, summary=f"no node matches {selector}",
                               owner="node-pool-owner", transient=False, next_action=OWNER_FIX)
        run_id = uuid.uuid4().hex[:10]
        pods_path = resource_path("", "v1", "pods", namespace)
        names = [node["metadata"]["name"] for node in nodes]
        probe = validation_pod(names[0], run_id, image, command)
        refused = await _admitted(reader, pods_path, probe, namespace)
        if refused is not None:
            return LayerReport(layer=6, workspace=ws.name, ok=False, summary=refused, owner="platform",
                               transient=False, next_action=NOT_ADMITTED)
        posted = await asyncio.gather(*(
            reader.write("POST", pods_path, validation_pod(name, run_id, image, command)) for name in names))
        verdicts: dict[str, Check] = {}
        created: dict[str, str] = {}  # pod → node
        for name, got in zip(names, posted, strict=True):
            if isinstance(got, ReadError):
                verdicts[name] = Check(name=name, state="warning",
                                       detail=f"not validated: its pod was not created: {_refusal(got)}")
            else:
                created[got["metadata"]["name"]] = name
        try:
            seen, unread = await _wait(reader, namespace, run_id, set(created), timeout)
            found = await asyncio.gather(*(
                _verdict(reader, namespace, pod, node, seen.get(pod), timeout, unread)
                for pod, node in created.items()))
            verdicts.update({check.name: check for check in found})
        finally:
            await asyncio.gather(*(reader.write("DELETE", resource_path("", "v1", "pods", namespace, p))
                                   for p in created))
    checks = [verdicts[name] for name in names]
    healthy = sum(c.state == "ok" for c in checks)
    unknown = sum(c.state == "warning" for c in checks)
    need = min_healthy if min_healthy is not None else len(nodes)
    ok = healthy >= need
    summary = f"{healthy}/{len(nodes)} nodes healthy (need {need})"
    if unknown:
        summary += f"; {unknown} not validated"
    for node in nodes:
        faults, _, _ = node_faults(node)
        if faults:
            summary += f"; {node['metadata']['name']}: {faults[0]}"
            break
    failed = any(c.state == "failed" for c in checks)
    return LayerReport(layer=6, workspace=ws.name, ok=ok, summary=summary, checks=checks,
                       pods_created=len(created),
                       owner=None if ok else "node-pool-owner", transient=None if ok else False,
                       next_action="" if ok else OWNER_FIX if failed else NOT_VALIDATED)


async def _admitted(reader: KubeReader, pods_path: str, pod: dict[str, Any], namespace: str) -> str | None:
    """Why the API server would not admit a validation pod (a server-side dry run: RBAC, then every
    admission plugin — Pod Security, quotas, webhooks — and nothing stored), or None when it would.

    Why ask first: the access review answers RBAC alone, and a caller allowed to create pods in a
    namespace whose Pod Security level is `baseline` or `restricted` (the usual) was refused one
    403 per node, each told as "permission denied (create pods)" — a permission the review had just
    said they hold. One dry run, one line with the server's own words, and no pod attempted."""
    answer = await reader.dry_run_create(pods_path, pod)
    if isinstance(answer, ReadError):
        return f"not validated: the API server could not be asked to admit the pods: {_refusal(answer)}"
    if answer.accepted:
        return None
    said = outside(answer.body.get("message") or f"HTTP {answer.status}", 400, keep_newlines=False)
    return f"refused: the API server would not admit the validation pod in namespace {namespace}: {said}; " \
           "no pod was created"


def _refusal(error: ReadError) -> str:
    """A refused write in the API server's own words when it gave some (a 403 is also Pod Security's
    or a quota's, not only RBAC's)."""
    if error.message:
        return f"{error.describe()}: {outside(error.message, 300, keep_newlines=False)}"
    return error.describe()


async def _wait(reader: KubeReader, namespace: str, run_id: str, pods: set[str], timeout: float
                ) -> tuple[dict[str, dict], ReadError | None]:
    """The last state seen of each pod, by LIST then WATCH from its resourceVersion, until every
    pod has ended or ``timeout`` passed; and the LIST's error if the pods could not be read. A
    stream the server (or a proxy) ends early is resumed from the last resourceVersion seen; an
    `ERROR` event (410 Gone) or a broken stream LISTs again."""
    seen: dict[str, dict] = {}
    path = resource_path("", "v1", "pods", namespace)
    selector = f"{VALIDATION_LABEL}={run_id}"

    def ended() -> bool:
        return all((seen.get(p, {}).get("status") or {}).get("phase") in TERMINAL for p in pods)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    version, quiet = "", 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            while not ended():
                if not version:
                    got = await reader.list_versioned(path, label_selector=selector)
                    if isinstance(got, ReadError):
                        return seen, got
                    listed, version = got
                    seen.update({pod["metadata"]["name"]: pod for pod in listed})
                    continue
                remaining = max(1, int(deadline - loop.time()))  # timeoutSeconds=0 would mean the default
                events = 0
                stream = reader.watch(path, label_selector=selector, resource_version=version,
                                      timeout=remaining)
                try:
                    async with contextlib.aclosing(stream):  # a `break` releases the stream at once
                        async for event in stream:
                            events += 1
                            obj = event.get("object") or {}
                            if event.get("type") == "ERROR":
                                version = ""  # 410 Gone or a refused watch: LIST again
                                break
                            version = (obj.get("metadata") or {}).get("resourceVersion") or version
                            if event.get("type") in ("ADDED", "MODIFIED"):
                                seen[obj["metadata"]["name"]] = obj
                            if ended():
                                break
                except (aiohttp.ClientError, ValueError):
                    version = ""  # a broken stream: LIST again
                quiet = quiet + 1 if not events else 0
                if quiet >= QUIET_STREAMS:  # a server that ends every stream at once is not hammered
                    await asyncio.sleep(RESUME_PAUSE_SECONDS)
    return seen, None


def _waited(seconds: float) -> str:
    return f"{int(seconds // 60)}m" if seconds >= 60 and seconds % 60 == 0 else f"{seconds:g}s"


async def _verdict(reader: KubeReader, namespace: str, pod: str, node: str, last: dict | None,
                   timeout: float, unread: ReadError | None = None) -> Check:
    """One node's line: healthy, failed (exit code and the log's last line), or not validated."""
    if last is None and unread is not None:
        return Check(name=node, state="warning", detail=f"not validated: its pod could not be read "
                     f"(list pods: {unread.describe()})")
    status = (last or {}).get("status") or {}
    phase = status.get("phase")
    state = (((status.get("containerStatuses") or [{}])[0]).get("state") or {})
    if phase == "Succeeded":
        return Check(name=node, state="ok", detail="healthy (its validation pod exited 0: nvidia-smi and "
                     "dcgmi diag passed)")
    if phase == "Failed" and "terminated" in state:
        log = await reader.text(resource_path("", "v1", "pods", namespace, pod, "log"), {"tailLines": 5})
        lines = [] if isinstance(log, ReadError) else [ln for ln in log.splitlines() if ln.strip()]
        said = f": {outside(lines[-1].strip(), 200)}" if lines else ""
        if isinstance(log, ReadError):
            said = f" (its log: {log.describe()})"
        return Check(name=node, state="failed",
                     detail=f"failed (exit {state['terminated'].get('exitCode', '?')}){said}")
    if phase == "Failed":  # the kubelet refused it (admission) or evicted it: nothing ran
        why = outside(": ".join(x for x in (status.get("reason"), status.get("message")) if x), 300)
        return Check(name=node, state="warning",
                     detail=f"not validated: the kubelet did not run its pod ({why})")
    waiting = state.get("waiting") or {}
    where = (f"still waiting to start ({outside(waiting.get('reason'), 80)}"
             + (f": {outside(waiting.get('message'), 200)})" if waiting.get("message") else ")")
             if waiting else "still running" if "running" in state
             else f"still {phase or 'Pending'}" if last is not None else "not seen")
    return Check(name=node, state="warning",
                 detail=f"not validated: its pod was {where} after {_waited(timeout)}")


__all__ = ["matching_nodes", "validate_nodes", "validate_topology", "validation_pod"]
