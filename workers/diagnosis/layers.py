"""The guide's lifecycle layers: what each proves, what it does not, and its command.

Wording follows seed/troubleshooting-by-lifecycle-layer.md; the commands are the
TauGrid ones the guide names first, with the operator-only kubectl hints kept
apart (shown only to people who pass the access review for them).
"""

from __future__ import annotations

from .models import LayerInfo

LAYERS: dict[int, LayerInfo] = {
    1: LayerInfo(
        number=1,
        title="Workspace connection and cluster access",
        proves="TauGrid found the workspace's connection descriptor, resolved credentials, "
        "reached Kubernetes, and verified the TauWorkspace, LocalQueue and authorization contract.",
        does_not_prove="That the TauWorkspace is Ready, or anything about this run.",
        command="tau workspace connection",
    ),
    2: LayerInfo(
        number=2,
        title="TauWorkspace readiness",
        proves="status.phase is Ready: RBACReady and QueueReady are true and no drift is "
        "detected — the workspace handoff is valid for submitting workloads.",
        does_not_prove="Storage: TauGrid 0.1 has no StorageReady condition, so PVC "
        "blob-training can still be missing or unbound; nor queue admission for this run.",
        command="tau workspace status <workspace>",
        operator_hints=["kubectl get pvc blob-training -n <namespace> --context <context>"],
    ),
    3: LayerInfo(
        number=3,
        title="Run config and submission",
        proves="The run config parsed, passed validation and rendered to a Workload (Job or "
        "RayJob) that exists in the cluster.",
        does_not_prove="Workspace readiness or queue admission.",
        command="tau run validate --config tau/train.yaml",
    ),
    4: LayerInfo(
        number=4,
        title="Queue admission and quota",
        proves="All Workloads show Admitted: quota was reserved.",
        does_not_prove="That pods were scheduled or that the process is running — admitted "
        "is not running; continue to layer 5.",
        command="tau run status <run>",
        operator_hints=[
            "kubectl get workload -n <namespace>",
            "kubectl describe clusterqueue <cluster-queue-name>",
            "kubectl describe localqueue <local-queue-name> -n <namespace>",
        ],
    ),
    5: LayerInfo(
        number=5,
        title="Scheduling, DRA, image pull, init and readiness",
        proves="Pods were assigned to nodes; any ResourceClaims were allocated; images were "
        "pulled; init containers exited 0; the main containers started and passed readiness.",
        does_not_prove="That the model or data process makes useful progress — a Running "
        "pod means containers started, not progress (layer 7).",
        command="tau run status <run> --watch",
        operator_hints=[
            "kubectl describe pod <pod-name> -n <namespace>",
            "kubectl get resourceclaim -n <namespace>",
            "kubectl get events -n <namespace> --sort-by=.lastTimestamp",
        ],
    ),
    6: LayerInfo(
        number=6,
        title="GPU, node and topology health",
        proves="The nodes backing the workload pass hardware health checks and the preset's "
        "Kueue-facing chain has matching, Ready nodes.",
        does_not_prove="That the application makes progress.",
        command="tau cluster validate nodes --gpu-class <class> --min-healthy <N>",
    ),
    7: LayerInfo(
        number=7,
        title="Runtime progress and durable evidence",
        proves="The driver log shows progress (loss decreasing, steps advancing, checkpoints "
        "written) and it is mirrored into the durable experiment record.",
        does_not_prove="Neither queue admission nor a Running container proves progress; "
        "only logs and the experiment record do.",
        command="tau logs <run> · taugrid-portal experiment status <run>",
    ),
}


def layer_info(number: int, run: str | None = None, namespace: str | None = None) -> LayerInfo:
    """The layer's info with the run and namespace filled into its commands."""
    info = LAYERS[number]

    def fill(text: str) -> str:
        if run:
            text = text.replace("<run>", run)
        if namespace:
            text = text.replace("<namespace>", namespace)
        return text

    return info.model_copy(update={
        "command": fill(info.command),
        "operator_hints": [fill(h) for h in info.operator_hints],
    })
