"""The *Stop watching* button's listener: ack at once, resolve the presser, enqueue the stop.

Whoever is not the watch's requester may still stop it if they pass the
run's access review (a SelfSubjectAccessReview under their impersonated
identity), and nothing in `bot/` talks to Kubernetes. So the listener only
resolves the presser's identity the way `/tau` does and hands the rest to
the `stop_job`. An unmapped presser is still enqueued (with no identity):
the requester check needs none, and the worker tells anyone else why not.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from redis import RedisError

from bot.button_listener import ButtonListener, Resolver, press_place
from bot.identity import Unmapped
from bot.presser import Presser
from workers.contracts.requests import StopRequest
from workers.plumbing.jobqueue import JobQueue, enqueue_request

log = logging.getLogger(__name__)

QUEUE_DOWN = ("⚠️ taubot could not stop the watch: its job queue (Redis) is unreachable. "
              "Press *Stop watching* again in a minute.")
NOT_A_WATCH = "⛔ This button does not name a watch taubot started, so nothing was stopped."


class StopWatchingButton(ButtonListener):
    """What happens after a Stop watching press was acked."""

    name = "stop watching"
    failure_text = QUEUE_DOWN

    def __init__(self, resolver: Resolver, queue: JobQueue) -> None:
        self.resolver = resolver
        self.queue = queue

    def _handle(self, body: dict[str, Any], presser: Presser) -> tuple[str, str]:
        action = (body.get("actions") or [{}])[0]
        user = str((body.get("user") or {}).get("id") or "")
        place = press_place(body)
        channel = str(place["channel"] or "")
        identity = presser.identity()
        try:
            stop = StopRequest(watch=str(action.get("value") or ""), user=user, channel=channel,
                               identity=None if isinstance(identity, Unmapped) else identity,
                               response_url=body.get("response_url"), message_ts=place["message_ts"])
        except ValidationError:
            return "invalid", NOT_A_WATCH
        try:
            enqueue_request(self.queue, stop, timeout=60)
        except RedisError as exc:
            log.warning("stop watching: enqueue failed: %s", exc)
            return "queue down", QUEUE_DOWN
        return "queued", ""


__all__ = ["StopWatchingButton"]
