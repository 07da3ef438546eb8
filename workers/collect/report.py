"""`RunReport`: one investigation's answer, computed once and read by everyone after it.

Flows (status, watch, escalation, node validation), the monitor and the CLI
read the resolved workspace, the linked objects, the run's verdict and its
submitter from here instead of re-resolving the descriptor, re-linking the
objects or parsing a summary (issue 23: one status used to link 3–8 times
and resolve the workspace 4–6 times).
"""

from __future__ import annotations

from functools import cached_property

from pydantic import BaseModel, ConfigDict

from workers.collect.kueue import QueueMemo
from workers.config.workspaces import WorkspaceConnection
from workers.diagnosis.checks import LayerReport
from workers.diagnosis.linkage import SUBMITTED_BY_ANNOTATION, RunObjects, find_run, meta
from workers.diagnosis.models import Diagnosis
from workers.diagnosis.phases.common import Terminal, run_verdict
from workers.diagnosis.profile import GpuProfile


class RunReport(BaseModel):
    """The diagnosis with what it was made from: the workspace, the objects, the request count."""

    model_config = ConfigDict(arbitrary_types_allowed=True, ignored_types=(cached_property,))

    diagnosis: Diagnosis
    workspace: str | None
    namespace: str | None
    requests: int
    objects: list[dict]
    layer_report: LayerReport | None = None
    profile: GpuProfile | None = None  # only when asked for (`--run-profile`)
    descriptor: WorkspaceConnection | None = None  # the workspace as resolved, once
    linked_objects: RunObjects | None = None  # set by whoever already linked them (the collector)
    queue_memo: QueueMemo | None = None  # a waiting run's queue read (or the one reused), for a watch

    @cached_property
    def linked(self) -> RunObjects:
        """The run's objects, linked once (the collector's linkage when it made one)."""
        if self.linked_objects is not None:
            return self.linked_objects
        return find_run(self.objects, self.diagnosis.run.name, self.namespace)

    @property
    def terminal(self) -> Terminal:
        """How the run itself says it ended (succeeded, failed), or None while it has not."""
        return run_verdict(self.linked)

    @property
    def submitter(self) -> str | None:
        """The run's `taugrid.io/submitted-by` annotation, as written (validated where it is used)."""
        run = self.linked.run
        if run is None:
            return None
        value = (meta(run).get("annotations") or {}).get(SUBMITTED_BY_ANNOTATION)
        return value if isinstance(value, str) else None


__all__ = ["SUBMITTED_BY_ANNOTATION", "RunReport"]
