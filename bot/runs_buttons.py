"""The runs list's presses and the App Home tab's events (issue 37): ack at once, then queue.

* *Status of <run>* (an option of a runs card's or the Home tab's overflow menu) queues
  `/tau status <run> [--workspace W]` as the presser — exactly the command they could type, under
  their own mapped identity, so a value someone forged can ask for nothing they could not ask for
  anyway; the run and workspace are still checked as the grammar checks a typed command. From a
  channel's card the status goes to that channel; from the Home tab (no channel) to the
  presser's DM with taubot (`conversations.open`).
* `app_home_opened` (tab "home") and *Refresh* queue the Home job for a mapped user
  (`workers/flows/home.py` keeps the minute's cache and Slack's tier-4 budget); an unmapped user's
  Home tab says why, published here — there is nothing to read as them.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from redis import RedisError
from slack_sdk import WebClient

from bot.after_ack import AfterAck
from bot.button_listener import ButtonListener, Resolver, press_place
from bot.identity import Unmapped
from bot.presser import Presser
from workers.config.settings import Settings
from workers.contracts.commands import DNS1123_LABEL, StatusCommand
from workers.contracts.ids import HOME_REFRESH_ACTION, OPEN_STATUS_ACTION, SLACK_CHANNEL, SLACK_USER
from workers.contracts.requests import HomeRequest, StatusRequest
from workers.plumbing.jobqueue import JobQueue, enqueue_request
from workers.render.mrkdwn import escape

log = logging.getLogger(__name__)


def _chosen(body: dict[str, Any], action_id: str) -> str:
    action = next((a for a in body.get("actions") or [] if a.get("action_id") == action_id), {})
    return str((action.get("selected_option") or {}).get("value") or action.get("value") or "")


class OpenStatusButton(ButtonListener):
    """*Status of <run>*: `/tau status <run>` as the presser, in the card's channel or their DM."""

    name = "open-status"
    failure_text = "⚠️ taubot hit an internal error and did not start the status. Try `/tau status <run>`."

    def __init__(self, settings: Settings, resolver: Resolver, queue: JobQueue, client: WebClient) -> None:
        self.settings = settings
        self.resolver = resolver
        self.queue = queue
        self.client = client

    def _handle(self, body: dict[str, Any], presser: Presser) -> tuple[str, str | None]:
        run, _, workspace = _chosen(body, OPEN_STATUS_ACTION).partition("|")
        user = str((body.get("user") or {}).get("id") or "")
        if not DNS1123_LABEL.match(run) or (workspace and not DNS1123_LABEL.match(workspace)) \
                or not SLACK_USER.match(user):
            return "invalid", "⛔ That menu option does not name a run taubot can look up."
        identity = presser.identity()
        if isinstance(identity, Unmapped):
            return "unmapped", f"⛔ {escape(identity.reason, 1000)}"
        channel = press_place(body)["channel"]
        if not channel or not SLACK_CHANNEL.match(channel):  # the Home tab: the answer goes to a DM
            channel = str(self.client.conversations_open(users=user)["channel"]["id"])
        command = StatusCommand(run=run, workspace=workspace or None)
        request = StatusRequest(command=command, identity=identity, channel=channel, user=user,
                                response_url=body.get("response_url"), requested_at=datetime.now(UTC))
        try:
            enqueue_request(self.queue, request, timeout=self.settings.job_timeout_seconds)
        except RedisError:
            return "queue-down", "⚠️ taubot could not queue the status: its job queue is unreachable."
        return "queued", None


UNMAPPED_HOME = "taubot cannot list your runs here: {reason}"


class HomeTab:
    """`app_home_opened` and *Refresh*: queue the Home job for a mapped user."""

    def __init__(self, settings: Settings, resolver: Resolver, queue: JobQueue, client: WebClient) -> None:
        self.settings = settings
        self.resolver = resolver
        self.queue = queue
        self.client = client

    def handle(self, user: str, presser: Presser | None, *, refresh: bool = False,
               workspace: str | None = None) -> str:
        """What happened (for logs and tests); never raises."""
        try:
            if not SLACK_USER.match(user):
                return "invalid"
            presser = presser or Presser(self.resolver, user)
            identity = presser.identity()
            if isinstance(identity, Unmapped):
                text = escape(UNMAPPED_HOME.format(reason=identity.reason), 2900)
                self.client.views_publish(user_id=user, view={"type": "home", "blocks": [
                    {"type": "section", "text": {"type": "mrkdwn", "text": f"⛔ {text}"}}]})
                return "unmapped"
            ws = workspace if workspace and DNS1123_LABEL.match(workspace) else None
            request = HomeRequest(user=user, identity=identity, workspace=ws, refresh=refresh,
                                  requested_at=datetime.now(UTC))
            enqueue_request(self.queue, request, timeout=self.settings.job_timeout_seconds)
            return "queued"
        except Exception:  # noqa: BLE001 - an event listener has nobody to raise to
            log.exception("app home for %s failed before queueing", user)
            return "error"

    def on_refresh(self, body: dict[str, Any], presser: Presser | None) -> str:
        user = str((body.get("user") or {}).get("id") or "")
        return self.handle(user, presser, refresh=True, workspace=_chosen(body, HOME_REFRESH_ACTION) or None)





def register_runs_listeners(app: Any, settings: Settings, resolver: Resolver, queue: JobQueue,
                            after_ack: AfterAck) -> None:
    """The runs menu, the Home tab's Refresh and `app_home_opened`; registered before the app's
    catch-all button listener (Bolt runs the first listener that matches). Their work — a DM
    opened, a Home tab published, the enqueue — runs on ``after_ack``, once Slack has its answer."""
    from bot.presser import CONTEXT_KEY as PRESSER

    opener = OpenStatusButton(settings, resolver, queue, app.client)
    home = HomeTab(settings, resolver, queue, app.client)

    @app.action(OPEN_STATUS_ACTION)
    def on_open_status(ack: Any, body: dict[str, Any], respond: Any, context: Any) -> None:
        ack()
        after_ack.submit(opener.handle, body, respond, context.get(PRESSER))

    @app.action(HOME_REFRESH_ACTION)
    def on_home_refresh(ack: Any, body: dict[str, Any], context: Any) -> None:
        ack()
        after_ack.submit(home.on_refresh, body, context.get(PRESSER))

    @app.event("app_home_opened")
    def on_home_opened(event: dict[str, Any], context: Any) -> None:
        if event.get("tab") == "home":  # the Messages tab is the DM itself
            after_ack.submit(home.handle, str(event.get("user") or ""), context.get(PRESSER))

__all__ = ["HomeTab", "OpenStatusButton", "register_runs_listeners"]
