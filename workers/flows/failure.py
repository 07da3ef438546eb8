"""When a command's job failed for good: one error card where the user will look.

Never a traceback: the card says which command failed, in one line why, and
that nothing it shows is a verdict about the run.
"""

from __future__ import annotations

import logging
from typing import Any

from workers.render.cards import build_error_card, render_error_card
from workers.render.mrkdwn import truncate
from workers.services import Services
from workers.surfaces.base import Failed

from .status import META_PARENT_TS, SlackUnavailable, recorded_parent

log = logging.getLogger(__name__)


def describe_failure(exc_type: type[BaseException] | None, exc: BaseException | None) -> str:
    """One line for the error card: what went wrong, without a traceback."""
    from rq.timeouts import JobTimeoutException

    if isinstance(exc, JobTimeoutException):
        return "the diagnosis took longer than the job timeout"
    if isinstance(exc, SlackUnavailable):
        return str(exc)
    name = exc_type.__name__ if exc_type is not None else "error"
    text = " ".join(str(exc).split()) if exc is not None else ""
    return truncate(f"{name}: {text}" if text else name, 500)


def is_transient(exc: BaseException | None) -> bool:
    """An outage a later attempt may not meet: Slack or Redis unreachable, a network error."""
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return isinstance(exc, SlackUnavailable | RedisConnectionError | RedisTimeoutError | OSError)


def post_failure(services: Services, meta: dict[str, Any], job_id: str, error: str, *,
                 attempts: int | None = None) -> str:
    """Put the error card in the thread if the parent was posted, else the channel; if Slack
    refuses both, the command's ``response_url``. Returns where it went. ``attempts``: how
    many runs failed (None: this one only)."""
    channel = meta.get("channel")
    thread_ts = recorded_parent(services, job_id) or meta.get(META_PARENT_TS)
    attempts = attempts or 1
    card = render_error_card(build_error_card(command=str(meta.get("command") or "/tau"), error=error,
                                              job_id=job_id, attempts=attempts))
    if channel:
        sent = services.surface.post(str(channel), card.text, card.blocks, thread_ts=thread_ts)
        if not isinstance(sent, Failed):
            return "thread" if thread_ts else "channel"
        log.warning("job %s: could not post the error card: %s", job_id, sent.error or sent.kind)
    response_url = meta.get("response_url")
    if response_url and services.surface.respond(str(response_url), card.text, card.blocks):
        return "response_url"
    return "nowhere"


__all__ = ["describe_failure", "is_transient", "post_failure"]
