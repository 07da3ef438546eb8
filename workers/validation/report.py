"""The answer of `/tau validate`: every check, each tied to the layer and owner it proves."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from workers.diagnosis.checks import Check, LayerReport
from workers.diagnosis.models import Owner

DryRun = Literal["accepted", "rejected", "not sent"]


class ValidationCheck(Check):
    """One check; when it fails, its layer and owner are the report's."""

    layer: Literal[1, 2, 3, 4]
    owner: Owner = "researcher"
    fix: str = ""


class ValidationReport(LayerReport):
    """Layers 1–4 for a manifest not yet submitted. ``layer`` is the first failing layer (3 when all
    pass: the manifest is what was validated)."""

    checks: list[ValidationCheck] = Field(default_factory=list)  # type: ignore[assignment]
    manifest: str = Field(description="'RayJob team-a/llama-ft' as the manifest names it")
    offline: bool = False
    dry_run: DryRun = "not sent"
    server_message: str = Field(default="", description="the API server's own words, when it refused")


def conclude(checks: list[ValidationCheck], *, workspace: str | None, manifest: str, offline: bool,
             dry_run: DryRun = "not sent", server_message: str = "", transient: bool = False,
             summary_ok: str = "every check passed") -> ValidationReport:
    """The report for ``checks``: the first failure (lowest layer, then order) decides."""
    common = {"workspace": workspace, "manifest": manifest, "offline": offline, "dry_run": dry_run,
              "server_message": server_message, "checks": checks}
    failed = [c for c in checks if c.state == "failed"]
    if not failed:
        return ValidationReport(**common, layer=3, ok=True, summary=summary_ok)
    first = min(failed, key=lambda c: c.layer)
    summary = f"{first.name}: {first.detail}"
    if dry_run == "accepted":
        # Beside `✅ dry run … accepted`, a reader must not have to guess which one wins.
        more = f" (and {len(failed) - 1} more ❌)" if len(failed) > 1 else ""
        summary = (f"Verdict: it would not run as intended — {summary}{more}. The API server's dry run "
                   "accepted it, but that proves only schema, RBAC and admission; the ❌ checks decide.")
    return ValidationReport(**common, layer=first.layer, ok=False, owner=first.owner, transient=transient,
                            summary=summary, next_action=first.fix)


def input_report(error: Exception, workspace: str | None, *, offline: bool = False) -> ValidationReport:
    """Input that is not one Job or RayJob (`ManifestError`): one failed check, the researcher's."""
    check = ValidationCheck(name="manifest", state="failed", layer=3, owner="researcher", detail=str(error),
                            fix="Give one batch/v1 Job or ray.io/v1 RayJob manifest (YAML or JSON, at most "
                            "256 KiB).")
    return conclude([check], workspace=workspace, manifest="(no manifest)", offline=offline)


__all__ = ["DryRun", "input_report", "ValidationCheck", "ValidationReport", "conclude"]
