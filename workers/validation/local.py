"""Offline checks of one Job or RayJob manifest against the workspace it is meant for (layer 3).

Each rule is one the cluster would apply later, moved before the submit so
the researcher hears it in seconds instead of finding a stuck run:

* the namespace and the `kueue.x-k8s.io/queue-name` label must be the
  workspace's (shared/reference/kueue-workload-status.md: the label picks the
  LocalQueue; another one is another team's quota or no queue at all);
* Kueue's RayJob webhook refuses `shutdownAfterJobFinishes: false`, a
  `clusterSelector` beside `rayClusterSpec`, and neither of them
  (kubernetes-sigs/kueue pkg/controller/jobs/rayjob/rayjob_webhook.go);
* Kueue starts jobs itself: its webhook defaults `suspend: true`
  (`ApplyDefaultForSuspend`), so `suspend: false` is a sign of a manifest
  written for a cluster without Kueue;
* GPUs are extended resources: the API server demands them in `limits`, and
  equal to any request ("Limit must be set for non overcommitable
  resources"; pkg/apis/core/validation);
* image references follow the distribution reference grammar, or the kubelet
  leaves the pod in `InvalidImageName` (shared/reference/pod-failure-shapes.md);
* Job pods restart `Never` or `OnFailure` (batch validation:
  `Unsupported value: "Always"`);
* fields the schema does not know (`fields.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from .fields import unknown_fields
from .report import ValidationCheck

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

# distribution/reference's grammar (reference/regexp.go), which the kubelet applies to `image`.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
_IMAGE = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}))?$"
)
FIX_MANIFEST = "Fix the manifest and validate again; nothing was submitted."


def image_problem(image: Any) -> str | None:
    """Why the kubelet would refuse ``image`` (InvalidImageName / API validation), else None."""
    if not isinstance(image, str) or not image:
        return "no image: the API server requires one (Required value)"
    if image != image.strip():
        return "leading or trailing whitespace (the API server refuses it)"
    match = _IMAGE.match(image)
    if match is None:
        lowered = image.lower()
        if lowered != image and _IMAGE.match(lowered):
            return "repository name must be lowercase (InvalidImageName)"
        return "invalid reference format (InvalidImageName)"
    if len(match.group("domain") or "") + len(match.group("path")) + 1 > 255:
        return "repository name must not be more than 255 characters (InvalidImageName)"
    return None


def pod_templates(doc: dict[str, Any], kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, pod template spec) of every pod the manifest will make."""
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    if kind == "Job":
        template = spec.get("template")
        if isinstance(template, dict):
            yield "spec.template", template
        return
    cluster = spec.get("rayClusterSpec") if isinstance(spec.get("rayClusterSpec"), dict) else {}
    head = cluster.get("headGroupSpec")
    if isinstance(head, dict) and isinstance(head.get("template"), dict):
        yield "spec.rayClusterSpec.headGroupSpec.template", head["template"]
    for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
        if isinstance(group, dict) and isinstance(group.get("template"), dict):
            yield f"spec.rayClusterSpec.workerGroupSpecs[{i}].template", group["template"]
    if isinstance(spec.get("submitterPodTemplate"), dict):
        yield "spec.submitterPodTemplate", spec["submitterPodTemplate"]


def _containers(template: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    pod = template.get("spec") if isinstance(template.get("spec"), dict) else {}
    for field in ("initContainers", "containers"):
        items = pod.get(field)
        for i, container in enumerate(items if isinstance(items, list) else []):
            if isinstance(container, dict):
                yield f"spec.{field}[{i}]", container


def _is_gpu(resource: str) -> bool:
    return resource.endswith("/gpu") or resource.startswith("nvidia.com/")


def _gpu_problems(path: str, container: dict[str, Any]) -> Iterator[str]:
    resources = container.get("resources") if isinstance(container.get("resources"), dict) else {}
    requests = resources.get("requests") if isinstance(resources.get("requests"), dict) else {}
    limits = resources.get("limits") if isinstance(resources.get("limits"), dict) else {}
    for name, value in requests.items():
        if not _is_gpu(str(name)):
            continue
        if name not in limits:
            yield f"{path}.resources: {name} is requested but not in limits (Limit must be set for non " \
                  "overcommitable resources)"
        elif str(limits[name]) != str(value):
            yield f"{path}.resources.requests[{name}]: must be equal to {name} limit of {limits[name]}"


def _check(name: str, problems: list[str], ok_detail: str, fix: str, *, layer: int = 3,
           warn: bool = False) -> ValidationCheck:
    if not problems:
        return ValidationCheck(name=name, state="ok", detail=ok_detail, layer=layer)  # type: ignore[arg-type]
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return ValidationCheck(name=name, state="warning" if warn else "failed",
                           detail="; ".join(problems[:3]) + more, layer=layer, fix=fix)  # type: ignore[arg-type]


def local_checks(doc: dict[str, Any], kind: str, *, namespace: str | None,
                 queue: str | None) -> list[ValidationCheck]:
    """Every offline check, in the order a card lists them."""
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    name, generate = meta.get("name"), meta.get("generateName")
    checks: list[ValidationCheck] = []

    problems: list[str] = []
    if not name and not generate:
        problems.append("metadata.name (or generateName) is required")
    elif name and (not isinstance(name, str) or not _DNS1123_SUBDOMAIN.match(name) or len(name) > 63):
        problems.append(f"metadata.name {str(name)[:80]!r} is not a lowercase DNS-1123 name of at most 63 "
                        "characters (the job-name label of its pods)")
    checks.append(_check("name", problems, str(name or f"{generate}…"),
                         "Give the run a lowercase name of letters, digits and '-'."))

    given_ns = meta.get("namespace")
    ns_problems = [] if given_ns in (None, namespace) or namespace is None else [
        f"metadata.namespace is {str(given_ns)[:80]!r}, but the workspace's namespace is {namespace!r}"]
    checks.append(_check("namespace", ns_problems, str(given_ns or namespace or "(not set)"),
                         f"Remove metadata.namespace or set it to {namespace}."))

    label = labels.get(QUEUE_LABEL)
    if label is None:
        queue_problems = [f"no {QUEUE_LABEL} label: Kueue would not queue it"
                          + (f" in LocalQueue {queue}" if queue else "")]
    elif not isinstance(label, str) or not _DNS1123_SUBDOMAIN.match(label):
        queue_problems = [f"{QUEUE_LABEL} {str(label)[:80]!r} is not a valid queue name"]
    elif queue is not None and label != queue:
        queue_problems = [f"{QUEUE_LABEL} is {label!r}, but the workspace's LocalQueue is {queue!r}"]
    else:
        queue_problems = []
    checks.append(_check("queue label", queue_problems, f"{QUEUE_LABEL}={label}",
                         f"Set metadata.labels[{QUEUE_LABEL}] to {queue or 'your LocalQueue'}."))

    suspend = spec.get("suspend")
    checks.append(_check(
        "suspend", ["spec.suspend is false: Kueue starts the run itself (its webhook sets suspend: true)"]
        if suspend is False else [], "Kueue will start it when admitted",
        "Leave spec.suspend out (or set it to true) and let Kueue start the run.", warn=True))

    gpu: list[str] = []
    images: list[str] = []
    templates = list(pod_templates(doc, kind))
    for tpath, template in templates:
        for cpath, container in _containers(template):
            where = f"{tpath}.{cpath}"
            gpu.extend(_gpu_problems(where, container))
            if (why := image_problem(container.get("image"))) is not None:
                images.append(f"{where}.image {str(container.get('image'))[:120]!r}: {why}")
    checks.append(_check("GPU limits", gpu, "GPU requests are in limits",
                         "Put each GPU count in resources.limits (requests may be left out)."))
    checks.append(_check("images", images, "every image reference is valid",
                         "Fix the image reference (lowercase repository, a valid tag or digest)."))

    if kind == "Job":
        policy = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") \
            if isinstance(spec.get("template"), dict) else None
        restart = [] if policy in ("Never", "OnFailure") else [
            f"spec.template.spec.restartPolicy is {policy!r}: a Job's pods restart Never or OnFailure"
            if policy is not None else "spec.template.spec.restartPolicy is required for a Job: Never or "
            "OnFailure"]
        if not templates:
            restart.insert(0, "spec.template is required")
        checks.append(_check("pod template", restart, f"restartPolicy {policy}",
                             "Set spec.template.spec.restartPolicy to Never (or OnFailure)."))
    else:
        ray: list[str] = []
        has_selector, has_cluster = bool(spec.get("clusterSelector")), "rayClusterSpec" in spec
        managed = label is not None
        if managed and has_selector and has_cluster:
            ray.append("spec.clusterSelector: a kueue managed job should not use an existing cluster")
        elif managed and not has_selector and not has_cluster:
            ray.append("spec.rayClusterSpec: rayClusterSpec is required for Kueue-managed jobs that don't "
                       "use clusterSelector")
        if managed and has_cluster and spec.get("shutdownAfterJobFinishes") is not True:
            ray.append("spec.shutdownAfterJobFinishes: a kueue managed job should delete the cluster after "
                       "finishing")
        if not spec.get("entrypoint") and spec.get("submissionMode") != "InteractiveMode":
            ray.append("spec.entrypoint is empty: nothing would run")
        checks.append(_check("RayJob under Kueue", ray, "shutdownAfterJobFinishes: true, its own cluster",
                             "Set spec.shutdownAfterJobFinishes: true and give the run its own "
                             "rayClusterSpec (no clusterSelector)."))

    unknown = unknown_fields(doc, kind)
    checks.append(_check("fields", [f"unknown field {p!r}" for p in unknown], "every field is known",
                         "Remove or correct the unknown fields (a typo is the usual cause)."))
    return checks


__all__ = ["QUEUE_LABEL", "image_problem", "local_checks", "pod_templates"]
