"""rq entry points, and nothing else: take the process's Services, run one flow, report failure.

Jobs are enqueued by name (`workers.plumbing.jobqueue`), so the front end never imports
this module. rq runs an async-free function here; the flow starts the job's
one event loop around its Kubernetes I/O.

Why failure callbacks and not only `try/except`: a callback also runs for
failures a job cannot catch (the job timeout, an error while importing or
deserialising), so a command is never silently lost. rq 3 calls it on every
failed attempt, including those it will retry; it tells the user only when
no retry is left.

A job whose whole worker died (the pod killed, the node gone) is found by
another worker's maintenance once its heartbeat expires, and rq calls the
callback with `AbandonedJobError`. A plain status only reads the cluster and
replies under the parent it already posted (`flows/status.py` finds it by job
id), so it is run once more instead of answered with an error card; any other
job (a watch start, a press, a logs upload) could act twice, and keeps the card.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

import redis
from rq import get_current_job
from rq.exceptions import AbandonedJobError
from rq.job import Job

from workers.contracts.requests import (
    ClusterRequest,
    DetailsRequest,
    EscalateRequest,
    HomeRequest,
    LogsRequest,
    MuteRequest,
    RunsRequest,
    StatusRequest,
    StopRequest,
    ValidateNodesRequest,
    ValidateRequest,
    WorkspaceRequest,
)
from workers.flows import (
    cluster,
    details,
    escalation,
    failure,
    home,
    logs,
    mute,
    node_validation,
    runs,
    status,
    validate,
    watch,
)
from workers.plumbing.metrics import ESCALATIONS, counted
from workers.render.slots import ChartsSlot
from workers.services import current

log = logging.getLogger(__name__)

META_ABANDONED_RERUN = "abandoned_rerun"


@counted("status")
def status_job(request: dict[str, Any]) -> dict[str, Any]:
    """`/tau status` (and `--watch`, which starts or joins a watch)."""
    services = current()
    req = StatusRequest.model_validate(request)
    flow = watch.start_watch if req.command.watch else status.run_status
    outcome = flow(services, req, job=get_current_job(), now=services.clock.now())
    return outcome.__dict__


@counted("runs")
def runs_job(request: dict[str, Any]) -> dict[str, Any]:
    """`/tau runs`: the caller's runs, one line each (issue 37)."""
    services = current()
    return runs.run_runs(services, RunsRequest.model_validate(request), job=get_current_job(),
                         now=services.clock.now())


@counted("home")
def home_job(request: dict[str, Any]) -> str:
    """An App Home visit or its Refresh: the user's runs in their Home tab (issue 37)."""
    services = current()
    return home.run_home(services, HomeRequest.model_validate(request), now=services.clock.now())


@counted("workspace")
def workspace_job(request: dict[str, Any]) -> dict[str, Any]:
    """`/tau workspace connection|status`."""
    services = current()
    return status.run_workspace(services, WorkspaceRequest.model_validate(request), job=get_current_job())


@counted("logs")
def logs_job(request: dict[str, Any]) -> dict[str, Any]:
    """`/tau logs`."""
    services = current()
    return logs.run_logs(services, LogsRequest.model_validate(request), job=get_current_job(),
                         now=services.clock.now())


@counted("cluster")
def cluster_job(request: dict[str, Any]) -> dict[str, Any]:
    """`/tau cluster validate topology|nodes`."""
    services = current()
    return cluster.run_cluster(services, ClusterRequest.model_validate(request), job=get_current_job())


@counted("validate")
def validate_job(request: dict[str, Any]) -> dict[str, Any]:
    """`/tau validate`: a manifest checked and dry-run as the user."""
    services = current()
    return validate.run_validate(services, ValidateRequest.model_validate(request), job=get_current_job())


@counted("validate-nodes")
def validate_nodes_press_job(request: dict[str, Any]) -> dict[str, Any]:
    """A *Validate these nodes* press on a layer-6 card."""
    services = current()
    return node_validation.run_validate_press(services, ValidateNodesRequest.model_validate(request))


@counted("mute")
def mute_job(request: dict[str, Any]) -> str:
    """A *Mute 24 h* press on an auto-post."""
    services = current()
    return mute.run_mute(services, MuteRequest.model_validate(request), now=services.clock.now())


@counted("details")
def details_job(request: dict[str, Any]) -> str:
    """A *Details* press on a phase card."""
    services = current()
    return details.run_details(services, DetailsRequest.model_validate(request))


def link_charts_job(channel: str, card_ts: str, slot: dict[str, Any]) -> str:
    """A status card's picture links, sent in the slot of Slack's budget reserved for them."""
    services = current()
    return status.link_charts(services, channel, card_ts, ChartsSlot.model_validate(slot),
                              now=services.clock.now(), reserved=True)


@counted("watch-tick")
def watch_tick(wid: str, tick: int) -> dict[str, Any]:
    """One refresh of a watched card."""
    services = current()
    return watch.run_tick(services, wid, tick, now=services.clock.now())


@counted("stop")
def stop_job(request: dict[str, Any]) -> str:
    """A Stop watching press."""
    services = current()
    return watch.run_stop(services, StopRequest.model_validate(request), now=services.clock.now())


@counted("escalate")
def escalate_job(request: dict[str, Any]) -> dict[str, Any]:
    """An Escalate press."""
    services = current()
    outcome = escalation.run_escalation(EscalateRequest.model_validate(request), services,
                                        now=services.clock.now())
    ESCALATIONS.labels(outcome.status).inc()
    return outcome.__dict__


def on_job_failure(job: Job, connection: redis.Redis, exc_type: type[BaseException] | None,
                   exc_value: BaseException | None, traceback: TracebackType | None) -> None:
    """rq failure callback: an error card once the last attempt failed. Never raises — rq would
    record the callback's error instead of the job's.

    Only an outage is worth waiting out (Slack or Redis unreachable: the retries span minutes,
    `workers.plumbing.jobqueue.RETRY_INTERVALS`); any other error would fail the same way again, so the
    callback spends the retries left (rq runs it before deciding, on the same job) and the
    user gets the error card now rather than in four minutes."""
    try:
        if isinstance(exc_value, AbandonedJobError) and rerun_abandoned_status(job):
            return
        transient = failure.is_transient(exc_value)
        if not transient:
            job.retries_left = 0
        if job.should_retry:
            log.info("job %s failed, %s retries left: %s", job.id, job.retries_left, exc_value)
            return
        meta = job.get_meta(refresh=True)
        attempts = int(meta.get("max_retries") or 0) + 1 if transient else None
        where = failure.post_failure(current(), meta, job.id,
                                     failure.describe_failure(exc_type, exc_value), attempts=attempts)
        log.warning("job %s failed for good (%s); error card posted to %s", job.id, exc_value, where)
    except Exception:  # noqa: BLE001 - see docstring
        log.exception("job %s: failure callback could not tell the user", job.id)


def rerun_abandoned_status(job: Job) -> bool:
    """Have rq run an abandoned plain status once more (see the module docstring); False for any
    other job, a watch, or a status already run again once."""
    request = job.args[0] if job.args else {}
    if job.func_name != f"{__name__}.status_job" or not isinstance(request, dict):
        return False
    meta = job.get_meta(refresh=True)
    if (request.get("command") or {}).get("watch") or meta.get(META_ABANDONED_RERUN):
        return False
    job.meta[META_ABANDONED_RERUN] = True
    job.save_meta()
    job.retries_left = max(job.retries_left or 0, 1)  # rq retries it right after this callback
    log.warning("job %s (%s) was abandoned by a dead worker: running it once more", job.id, job.description)
    return True


def on_tick_failure(job: Job, connection: redis.Redis, exc_type: type[BaseException] | None,
                    exc_value: BaseException | None, traceback: TracebackType | None) -> None:
    """The last attempt of a tick failed: the watch ends with the reason on its card."""
    try:
        if job.should_retry:
            return
        services = current()
        watch.on_tick_failure_callback(services, tuple(job.args), exc_type, services.clock.now())
    except Exception:  # noqa: BLE001 - see on_job_failure
        log.exception("watch tick %s: failure callback could not end the watch", job.id)


__all__ = ["META_ABANDONED_RERUN", "cluster_job", "details_job", "escalate_job", "link_charts_job",
           "home_job", "logs_job", "runs_job",
           "mute_job",
           "on_job_failure",
           "on_tick_failure", "rerun_abandoned_status", "validate_nodes_press_job",
           "status_job", "stop_job", "watch_tick", "workspace_job"]
