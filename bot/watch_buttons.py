"""The *Stop watching* button's listener: ack at once, resolve the presser, enqueue the stop.

Why the stop itself runs in a worker: whoever is not the watch's requester
may still stop it if they pass the run's access review (a
SelfSubjectAccessReview under their impersonated identity), and nothing in
`bot/` talks to Kubernetes. So the listener only does what is fast and must
happen in the front end — resolving the presser's Kubernetes identity the
same way `/tau` does — and hands the rest to `workers.watch.stop_job`.

An unmapped presser is still enqueued (with no identity): the requester
check needs none, and the worker tells anyone else privately why not.
Every failure the presser must hear about goes to the press's
``response_url``; no exception escapes the listener.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from redis import RedisError
from rq import Queue
from slack_bolt import Ack, App, Respond

from bot.button_listener import ButtonListener, Resolver
from bot.identity import Unmapped
from workers.watch import STOP_WATCHING_ACTION, StopRequest, enqueue_stop

log = logging.getLogger(__name__)

QUEUE_DOWN = ("⚠️ taubot could not stop the watch: its job queue (Redis) is unreachable. "
              "Press *Stop watching* again in a minute.")
NOT_A_WATCH = "⛔ This button does not name a watch taubot started, so nothing was stopped."


class StopWatchingButton(ButtonListener):
    """What happens after a Stop watching press was acked."""

    name = "stop watching"
    failure_text = QUEUE_DOWN

    def __init__(self, resolver: Resolver, queue: Queue) -> None:
        self.resolver = resolver
        self.queue = queue

    def _handle(self, body: dict[str, Any]) -> tuple[str, str]:
        action = (body.get("actions") or [{}])[0]
        user = str((body.get("user") or {}).get("id") or "")
        channel = str((body.get("channel") or {}).get("id")
                      or (body.get("container") or {}).get("channel_id") or "")
        identity = self.resolver.resolve(user)
        try:
            stop = StopRequest(watch=str(action.get("value") or ""), user=user, channel=channel,
                               identity=None if isinstance(identity, Unmapped) else identity)
        except ValidationError:
            return "invalid", NOT_A_WATCH
        try:
            enqueue_stop(self.queue, stop)
        except RedisError as exc:
            log.warning("stop watching: enqueue failed: %s", exc)
            return "queue down", QUEUE_DOWN
        return "queued", ""


def register_stop_watching(app: App, button: StopWatchingButton) -> None:
    """Register before the catch-all button listener: Bolt runs the first listener that matches."""

    @app.action(STOP_WATCHING_ACTION)
    def on_stop_watching(ack: Ack, body: dict[str, Any], respond: Respond) -> None:
        ack()
        button.handle(body, respond)


__all__ = ["StopWatchingButton", "register_stop_watching"]
