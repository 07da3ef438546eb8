"""Result models of the layer-1 and layer-2 checks, shared by the CLI and Slack cards."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from .models import Owner

CheckState = Literal["ok", "failed", "warning", "skipped"]


class Check(BaseModel):
    """One line of a workspace report: what was checked and what came back."""

    name: str
    state: CheckState
    detail: str = ""


class LayerReport(BaseModel):
    """Layer 1 (`workspace connection`), layer 2 (`workspace status`) or layer 6
    (`cluster validate topology|nodes`) as one answer."""

    layer: Literal[1, 2, 3, 4, 6]
    workspace: str | None
    ok: bool
    summary: str
    checks: list[Check] = Field(default_factory=list)
    owner: Owner | None = None
    transient: bool | None = None
    next_action: str = ""
    phase: str | None = Field(default=None, description="TauWorkspace status.phase (layer 2)")
    pods_created: int = Field(default=0, description="validation pods created (layer 6 `validate nodes`): "
                              "none means nothing ran, so a single-use offer may be pressed again")
