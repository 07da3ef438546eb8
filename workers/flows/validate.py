"""`/tau validate`: a manifest (pasted, or a file shared in the channel) checked and dry-run as the user.

The manifest is the user's own text, but it is still untrusted on the way
back: every line of the card is escaped (`build_validation_card`), and the
API server's message is quoted in code. A shared file is read with the bot
token only when it is shared in the command's channel (`SlackSurface.shared_file`),
so a link cannot pull in a file from a channel the asker is not in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workers.contracts.commands import MAX_MANIFEST_BYTES, ValidateCommand
from workers.contracts.requests import ValidateRequest
from workers.render.cards import build_validation_card
from workers.services import Services
from workers.surfaces.base import Failed, Surface
from workers.validation.live import validate_text
from workers.validation.manifest import ManifestError, decode, too_large
from workers.validation.report import input_report

from .status import deliver, ensure_parent

if TYPE_CHECKING:
    from rq.job import Job

_FILE_PROBLEMS = {
    "file_not_found": "taubot cannot see that file: share it in this channel (or paste the manifest in a "
                      "code block)",
    "not_shared_here": "that file is not shared in this channel: share it here (or paste the manifest in a "
                       "code block)",
    "no_download": "Slack gave no download for that file",
}


def manifest_text(surface: Surface, command: ValidateCommand, channel: str) -> str:
    """The manifest's text, or `ManifestError` with the one line to show."""
    if command.manifest is not None:
        return command.manifest
    assert command.file_id is not None  # the grammar gives one or the other
    got = surface.shared_file(command.file_id, channel, MAX_MANIFEST_BYTES)
    if isinstance(got, Failed):
        if got.size is not None:
            raise too_large(got.size)
        raise ManifestError(_FILE_PROBLEMS.get(got.error, f"taubot could not read that file from Slack "
                                                           f"({got.error or got.kind})"))
    return decode(got)


def run_validate(services: Services, request: ValidateRequest, *, job: Job | None) -> dict[str, Any]:
    """Post the parent, read the manifest, check it as the user, post the card in the thread."""
    command = request.command
    parent_ts = ensure_parent(services, request, job)
    try:
        text = manifest_text(services.surface, command, request.channel)
    except ManifestError as error:
        report = input_report(error, command.workspace)
    else:
        report = services.run(validate_text(services.registry, text, workspace=command.workspace,
                                           channel=request.channel, identity=request.identity,
                                           timeout=services.settings.kube_request_timeout_seconds,
                                           kube=services.kube))
    posted = deliver(services, request, parent_ts, build_validation_card(report, command=request.display()),
                     job)
    return {"parent_ts": parent_ts, "card_ts": posted.ts if posted else None, "ok": report.ok,
            "layer": report.layer, "dry_run": report.dry_run}


__all__ = ["manifest_text", "run_validate"]
