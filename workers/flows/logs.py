"""`/tau logs <run>`: the run's log in a thread — a card with the last lines, the tail as a file.

The log is read under the user's identity (and ADX only after their access
review, `workers/collect/logs/sources.py`). The card quotes at most ~20 lines,
escaped inside a code block they cannot close; the whole tail goes to the
thread as a text file, which Slack shows as a snippet and never parses as
mrkdwn, so nothing in it can mention anyone.

Both are cluster text read by channel members who may lack `pods/log`: the
lines are redacted with the rules of taubot's own logs, stripped of control
characters and clipped (`shareable`, `workers/outside/text.py`) before either
is built, so the card and the file can never disagree about a secret.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from workers.collect.logs.model import shareable
from workers.collect.logs.sources import logs_live
from workers.contracts.requests import LogsRequest
from workers.render.cards import build_logs_card
from workers.services import Services
from workers.surfaces.base import Failed

from .status import deliver, ensure_parent

if TYPE_CHECKING:
    from datetime import datetime

    from rq.job import Job

log = logging.getLogger(__name__)


def log_file(result: Any) -> str:
    """The tail as `kubectl logs --timestamps` prints it (a line's own time first, when known)."""
    return "".join(f"{line.time} {line.text}\n" if line.time else f"{line.text}\n" for line in result.lines)


def run_logs(services: Services, request: LogsRequest, *, job: Job | None, now: datetime) -> dict[str, Any]:
    """Post the parent, read the log as the user, post the card and attach the tail."""
    command = request.command
    parent_ts = ensure_parent(services, request, job)
    result = services.run(logs_live(services.registry, run=command.run, identity=request.identity, now=now,
                                  kube=services.kube,
                                   workspace=command.workspace, channel=request.channel, tail=command.tail,
                                   previous=command.previous,
                                   timeout=services.settings.kube_request_timeout_seconds))
    result = shareable(result)
    attached = False
    if result.answered and result.lines and parent_ts is not None:
        sent = services.surface.upload(request.channel, parent_ts, f"{command.run}.log", log_file(result),
                                       f"{command.run}: last {len(result.lines)} lines ({result.source})")
        attached = not isinstance(sent, Failed)
        if not attached:
            log.warning("logs: could not attach the tail of %s: %s", command.run, sent.error)
    context = build_logs_card(result, command=command.display(), file_attached=attached)
    posted = deliver(services, request, parent_ts, context, job)
    return {"parent_ts": parent_ts, "card_ts": posted.ts if posted else None, "source": result.source,
            "lines": len(result.lines), "requests": result.requests}


__all__ = ["log_file", "run_logs", "shareable"]
