"""The Slack App Home tab (issue 37): the user's runs, their watches and recent escalations.

Why a job and not the listener: the list is read from the cluster as the user (a few LISTs,
`workers/collect/runs.py`), and nothing in `bot/` talks to Kubernetes. Why a minute's cache per
user: `app_home_opened` comes on every visit, and `views.publish` is tier 4 (about 100 a minute
per workspace, api.slack.com/docs/rate-limits) — a user flicking between tabs would spend the
workspace's budget and the cluster's LISTs for an unchanged view, which Slack keeps anyway. So a
visit within a minute of the last publish publishes nothing; *Refresh* publishes at once. The
workspace-wide budget is counted per minute in Redis (every worker shares it); past it, the
visit is skipped and the next one publishes. A 429 is the same: the view stays as it was.

The watches and escalations are what Redis holds cheaply: the live watches' states (a bounded
SCAN of their owner keys) the user is a watcher of, and the stored diagnoses (bounded SCAN)
the user asked about or escalated, with their escalation claim.
"""

from __future__ import annotations

import logging
from datetime import datetime

import redis

from workers.contracts.requests import HomeRequest
from workers.outside.text import outside
from workers.records import keys
from workers.records.offers import claim_of, load_record
from workers.render.mrkdwn import code, escape
from workers.render.runs_card import build_runs_card, render_home
from workers.services import Services
from workers.surfaces.base import Failed

from .runs import live_runs
from .watch.state import load_state

log = logging.getLogger(__name__)

CACHE_SECONDS = 60
PUBLISHES_PER_MINUTE = 100  # Slack's tier 4
SCAN_LIMIT = 500  # keys looked at per family, at most
LISTED = 10  # watches / escalations shown, at most


def watches_of(conn: redis.Redis, user: str, *, limit: int = SCAN_LIMIT) -> list[str]:
    """The live watches ``user`` is a watcher of, one line each."""
    lines: list[str] = []
    for i, key in enumerate(conn.scan_iter(match=keys.WATCH_OWNERS, count=200)):
        if i >= limit or len(lines) >= LISTED:
            break
        name = key.decode() if isinstance(key, bytes) else key
        wid = name.removeprefix(keys.WATCH).removesuffix(":owner")
        state = load_state(conn, wid)
        if state is None or user not in state.watchers or state.stopped:
            continue
        lines.append(f"• {code(outside(state.request.command.run), 70)} in "
                     f"{escape(outside(state.workspace or '?'), 60)} · until {state.deadline:%H:%M} UTC")
    return lines


def escalations_of(conn: redis.Redis, user: str, *, limit: int = SCAN_LIMIT) -> list[str]:
    """The escalations of diagnoses ``user`` asked for or escalated, one line each."""
    lines: list[tuple[datetime, str]] = []
    for i, key in enumerate(conn.scan_iter(match=keys.DIAGNOSIS + "*", count=200)):
        if i >= limit:
            break
        record_id = (key.decode() if isinstance(key, bytes) else key).removeprefix(keys.DIAGNOSIS)
        record = load_record(conn, record_id)
        if record is None:
            continue
        claim = claim_of(conn, record)
        if claim is None or claim.state != "done" or user not in (claim.by, record.requested_by):
            continue
        lines.append((claim.at, f"• {code(outside(record.run), 70)} layer {record.layer} → "
                                f"{escape(outside(claim.owner), 40)} · {claim.at:%Y-%m-%d %H:%M} UTC"))
    return [text for _at, text in sorted(lines, reverse=True)[:LISTED]]


def _budget(conn: redis.Redis, now: datetime) -> bool:
    """One publish of the workspace's minute budget, if any is left."""
    key = keys.home_budget_key(int(now.timestamp()) // 60)
    used = conn.incr(key)
    if used == 1:
        conn.expire(key, 120)
    return int(used) <= PUBLISHES_PER_MINUTE


def run_home(services: Services, request: HomeRequest, *, now: datetime) -> str:
    """Publish the Home tab for one visit (or Refresh); returns what happened."""
    conn = services.redis
    cache = keys.home_key(request.user)
    if not request.refresh and not conn.set(cache, now.isoformat(), nx=True, ex=CACHE_SECONDS):
        return "cached"
    conn.set(cache, now.isoformat(), ex=CACHE_SECONDS)
    if not _budget(conn, now):
        conn.delete(cache)
        log.info("home: tier-4 budget spent this minute; %s's visit publishes nothing", request.user)
        return "deferred"
    listed = services.run(live_runs(services.registry, services.kube, request.identity, now,
                                    workspace=request.workspace,
                                    timeout=services.settings.kube_request_timeout_seconds))
    watches, escalations = watches_of(conn, request.user), escalations_of(conn, request.user)
    extras = ["*Your watches*\n" + ("\n".join(watches) if watches else "_none_"),
              "*Your recent escalations*\n" + ("\n".join(escalations) if escalations else "_none_")]
    context = build_runs_card(listed, command="App Home", now=now, home=True, extras=extras)
    sent = services.surface.publish_home(request.user, render_home(context))
    if isinstance(sent, Failed):
        conn.delete(cache)
        log.warning("home: views.publish for %s failed: %s", request.user, sent.error or sent.kind)
        return sent.kind
    return "published"


__all__ = ["CACHE_SECONDS", "escalations_of", "run_home", "watches_of"]
