"""Which fields a Job or RayJob may carry, for the offline unknown-field check.

Why kubernetes_asyncio's models for the built-in types: its generated classes
carry the API's field names (`attribute_map`) and nested types
(`openapi_types`) for every built-in kind of the Kubernetes version it was
generated from, so `batch/v1 Job` down to each container is known without
hand-copying a schema. The RayJob CRD is not in it; its fields below come from
KubeRay's Go types (ray-project/kuberay ray-operator/apis/ray/v1/
rayjob_types.go and raycluster_types.go, v1.1–v1.4: the union, so a field of any
supported KubeRay release is known) and embed core types (PodTemplateSpec,
Service, ResourceRequirements), which come from the models again.

The check is advisory offline: a cluster newer than the library may know a
field this does not, and the API server's strict field validation in the
dry run is the authority (`live.py` downgrades a finding it contradicts).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from kubernetes_asyncio import client as k8s

_LIST = re.compile(r"^list\[(.+)\]$")
_DICT = re.compile(r"^dict\((\w+), (.+)\)$")
_SCALARS = frozenset({"str", "int", "float", "bool", "datetime", "date", "object"})

# A node of the field tree: a model name ("V1PodSpec"), a RayJob part ("ray:…"),
# ("list", node), ("map", node), or None for a leaf whose content is free.
Node = Any

_RAY: dict[str, dict[str, Node]] = {
    "ray:RayJob": {"apiVersion": None, "kind": None, "metadata": "V1ObjectMeta", "spec": "ray:RayJobSpec",
                   "status": None},
    "ray:RayJobSpec": {
        "activeDeadlineSeconds": None, "backoffLimit": None, "rayClusterSpec": "ray:RayClusterSpec",
        "submitterPodTemplate": "V1PodTemplateSpec", "metadata": ("map", None),
        "clusterSelector": ("map", None), "submitterConfig": "ray:SubmitterConfig", "managedBy": None,
        "deletionStrategy": None, "entrypoint": None, "runtimeEnvYAML": None, "jobId": None,
        "submissionMode": None, "entrypointResources": None, "entrypointNumCpus": None,
        "entrypointNumGpus": None, "ttlSecondsAfterFinished": None, "shutdownAfterJobFinishes": None,
        "suspend": None, "schedule": None,
    },
    "ray:SubmitterConfig": {"backoffLimit": None},
    "ray:RayClusterSpec": {
        "headGroupSpec": "ray:HeadGroupSpec", "workerGroupSpecs": ("list", "ray:WorkerGroupSpec"),
        "rayVersion": None, "enableInTreeAutoscaling": None, "autoscalerOptions": "ray:AutoscalerOptions",
        "headServiceAnnotations": ("map", None), "suspend": None, "managedBy": None,
        "gcsFaultToleranceOptions": None, "upgradeStrategy": None, "authOptions": None,
    },
    "ray:HeadGroupSpec": {"serviceType": None, "headService": "V1Service", "enableIngress": None,
                          "rayStartParams": ("map", None), "template": "V1PodTemplateSpec"},
    "ray:WorkerGroupSpec": {
        "groupName": None, "replicas": None, "minReplicas": None, "maxReplicas": None, "numOfHosts": None,
        "rayStartParams": ("map", None), "template": "V1PodTemplateSpec", "scaleStrategy": None,
        "idleTimeoutSeconds": None, "suspend": None,
    },
    "ray:AutoscalerOptions": {
        "resources": "V1ResourceRequirements", "image": None, "imagePullPolicy": None, "env": None,
        "envFrom": None, "volumeMounts": None, "securityContext": None, "idleTimeoutSeconds": None,
        "upscalingMode": None, "version": None,
    },
}
ROOTS = {"Job": "V1Job", "RayJob": "ray:RayJob"}


def _parse_type(text: str) -> Node:
    if text in _SCALARS:
        return None
    if match := _LIST.match(text):
        return ("list", _parse_type(match.group(1)))
    if match := _DICT.match(text):
        return ("map", _parse_type(match.group(2)))
    return text if hasattr(k8s, text) else None


@cache
def children(node: str) -> dict[str, Node] | None:
    """The fields of a model or RayJob part, by their JSON names; None when unknown."""
    if node in _RAY:
        return _RAY[node]
    model = getattr(k8s, node, None)
    if model is None or not hasattr(model, "attribute_map"):
        return None
    return {json_name: _parse_type(model.openapi_types[attr])
            for attr, json_name in model.attribute_map.items()}


def unknown_fields(document: dict[str, Any], kind: str, limit: int = 20) -> list[str]:
    """Paths of fields the schema does not know, like the API server names them
    (`spec.template.spec.containers[0].imagePullPolicyy`), at most ``limit``."""
    found: list[str] = []

    def walk(value: Any, node: Node, path: str) -> None:
        if len(found) >= limit or node is None:
            return
        if isinstance(node, tuple):
            shape, inner = node
            if shape == "list" and isinstance(value, list):
                for i, item in enumerate(value):
                    walk(item, inner, f"{path}[{i}]")
            elif shape == "map" and isinstance(value, dict):
                for key, item in value.items():
                    walk(item, inner, f"{path}[{key}]")
            return
        fields = children(node)
        if fields is None or not isinstance(value, dict):
            return
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key not in fields:
                found.append(where)
                if len(found) >= limit:
                    return
            else:
                walk(item, fields[key], where)

    walk(document, ROOTS[kind], "")
    return found


__all__ = ["ROOTS", "children", "unknown_fields"]
