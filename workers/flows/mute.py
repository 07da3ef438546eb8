"""*Mute 24 h* on an auto-post: no auto-post for those runs until it expires.

The card says who muted and until when.

The presser must pass the same access review as Escalate (`get` the run as
themselves, impersonated): muting a team's alerts is an action on its behalf.
The press must be on the auto-post the button was offered on (`presses.py`).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from workers.collect.access import review
from workers.config.workspaces import Resolved
from workers.contracts.requests import MuteRequest
from workers.records.stalls import MuteRecord, mute_key, mute_record_key
from workers.render.mrkdwn import code
from workers.render.slots import MuteNote, MuteSlot
from workers.services import Services

from .presses import NOT_HERE, offered_here
from .presses import tell as _tell


def run_mute(services: Services, request: MuteRequest, *, now: datetime) -> str:
    raw = services.redis.get(mute_record_key(request.record_id))
    if raw is None:
        _tell(services, request, "⌛ This post is too old to mute from; nothing changed.")
        return "expired"
    record = MuteRecord.model_validate_json(raw)
    if not offered_here(channel=record.channel, card_ts=record.ts, thread_ts=None,
                        press_channel=request.channel, press_ts=request.message_ts):
        _tell(services, request, NOT_HERE.format(verb="muted"))
        return "elsewhere"
    resolution = services.registry.resolve(workspace=record.workspace)
    if not isinstance(resolution, Resolved):
        _tell(services, request, "⛔ That workspace is no longer configured; nothing changed.")
        return "workspace"
    run, kind = record.runs[0]
    group, resource = ("ray.io", "rayjobs") if kind == "RayJob" else ("batch", "jobs")

    allowed = services.run(review(services.kube, resolution.descriptor.cluster_target(), request.identity,
                                 "get", resource, group, namespace=record.namespace, name=run,
                                 timeout=services.settings.kube_request_timeout_seconds))
    if allowed is not True:
        _tell(services, request,
              f"⛔ Your Kubernetes identity may not read {code(run, 80)}, so taubot did not mute it.")
        return "refused"
    hours = services.settings.mute_hours
    until = now + timedelta(hours=hours)
    for name, _kind in record.runs:
        services.redis.set(mute_key(record.workspace, record.namespace, name),
                           json.dumps({"by": request.user, "until": until.isoformat()}), ex=hours * 3600)
    note = MuteSlot(note=MuteNote(by=request.user, until=until))
    services.cards.update_if_changed(record.channel, record.ts, lambda old: old.with_slot(note),
                                     max_wait=15.0)
    return "muted"


__all__ = ["run_mute"]
