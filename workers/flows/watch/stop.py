"""*Stop watching*: who may stop a watch, and the card that says it stopped."""

from __future__ import annotations

from datetime import datetime

from workers.contracts.requests import StopRequest
from workers.render.mrkdwn import code
from workers.services import Services

from ..presses import NOT_HERE, offered_here
from .start import may_read_run
from .state import LOCK_TIMEOUT_SECONDS, load_state, lock_name
from .tick import end


def run_stop(services: Services, stop: StopRequest, *, now: datetime) -> str:
    """Stop the watch if the presser may; otherwise tell them privately why not."""
    conn = services.redis
    with conn.lock(lock_name(stop.watch), timeout=LOCK_TIMEOUT_SECONDS,
                   blocking_timeout=LOCK_TIMEOUT_SECONDS):
        state = load_state(conn, stop.watch)
        if state is None or state.stopped is not None:
            services.surface.ephemeral(stop.channel, stop.user, "This watch has already stopped.")
            return "already stopped"
        if not offered_here(channel=state.request.channel, card_ts=state.card_ts, thread_ts=state.parent_ts,
                            press_channel=stop.channel, press_ts=stop.message_ts):
            services.surface.ephemeral(stop.channel, stop.user, NOT_HERE.format(verb="stopped"))
            return "elsewhere"
        allowed = stop.user in state.watchers
        if not allowed and stop.identity is not None:
            allowed = services.run(may_read_run(services, state, stop.identity))
        if not allowed:
            services.surface.ephemeral(
                stop.channel, stop.user,
                f"⛔ Only the people who asked for this watch, or who may read "
                f"{code(state.request.command.run, 80)} in its namespace, can stop it.")
            return "refused"
        end(services, state, "*Stop watching* was pressed", now, card_updated=False, cancel_pending=True)
    services.surface.post(state.request.channel,
                          f"⏹️ <@{stop.user}> stopped watching {code(state.request.command.run, 80)}.",
                          thread_ts=state.parent_ts)
    return "stopped"
