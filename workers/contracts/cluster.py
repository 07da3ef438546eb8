"""Where a cluster is: the part of a workspace descriptor that names it (SPEC §8).

A plain model, in the contracts so that the descriptors (`workers/config/workspaces.py`) can
build one without importing the Kubernetes client; `workers/kube/client.py` turns it into a
connection.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ClusterTarget(BaseModel):
    """Where a cluster is: a kubeconfig context, an explicit server, or in-cluster.

    Field names follow the WorkspaceConnection descriptor (``certificateAuthority``,
    ``tokenFile``); unknown fields are an error so a typo cannot pass silently.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    context: str | None = None
    kubeconfig: Path | None = None
    server: str | None = None
    certificate_authority: Path | None = Field(default=None, alias="certificateAuthority")
    token_file: Path | None = Field(default=None, alias="tokenFile")
    in_cluster: bool = Field(default=False, alias="inCluster")

    @model_validator(mode="after")
    def _exactly_one_way(self) -> ClusterTarget:
        """Exactly one of context / server / in_cluster, each with only its own options."""
        chosen = [bool(self.context), bool(self.server), self.in_cluster]
        if sum(chosen) != 1:
            raise ValueError("give exactly one of context, server or in_cluster")
        if self.kubeconfig is not None and not self.context:
            raise ValueError("kubeconfig is only valid with context")
        if (self.certificate_authority or self.token_file) and not self.server:
            raise ValueError("certificateAuthority and tokenFile are only valid with server")
        return self


__all__ = ["ClusterTarget"]
