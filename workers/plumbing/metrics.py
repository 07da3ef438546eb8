"""What taubot did, for Prometheus: one set of metrics, served on `/metrics` by every process.

Why module-level metrics in prometheus_client's default registry: that is the
library's model, and the only one its multiprocess mode supports. The worker
is multiprocess — rq forks a work horse per job — so `taubot worker` sets
`PROMETHEUS_MULTIPROC_DIR` before this module is first imported
(`workers/cli/__init__.py`), each horse writes its samples there, and the
parent's `/metrics` merges them (`MultiProcessCollector`); so does `taubot serve
http --processes N`, whose servers each answer `/metrics` for all. A single
bot process and the monitor serve the registry directly.

Labels are bounded on purpose: a command's *kind* (the grammar's verbs), a
Kubernetes *resource* plural and status code, a Slack *method* — never a
run, user or channel name, which would make one series per run.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

COMMANDS = Counter("taubot_commands_total", "Slash commands, by kind and outcome", ["kind", "outcome"])
ACK_SECONDS = Histogram("taubot_ack_seconds", "Time from a slash command's arrival to its ack",
                        buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0))
PRESSES = Counter("taubot_button_presses_total", "Button presses, by action and outcome",
                  ["action", "outcome"])
JOBS = Counter("taubot_jobs_total", "Jobs run, by job and outcome", ["job", "outcome"])
JOB_SECONDS = Histogram("taubot_job_duration_seconds", "Job run time", ["job"],
                        buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0))
KUBE_REQUESTS = Counter("taubot_kube_requests_total", "Kubernetes API requests, by verb, resource and status",
                        ["verb", "resource", "code"])
SLACK_CALLS = Counter("taubot_slack_calls_total", "Slack Web API calls, by method and outcome",
                      ["method", "outcome"])
SLACK_RATELIMITED = Counter("taubot_slack_ratelimited_total", "Slack 429 answers, by method", ["method"])
TICK_LAG = Histogram("taubot_watch_tick_lag_seconds", "How late a watch tick started after it was due "
                     "(its slot: started_at + k x interval)",
                     buckets=(0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0))
WATCH_TICKS = Counter("taubot_watch_ticks_total", "Watch ticks by what they read: `probe` (the run and "
                      "its Workloads or pods, unchanged: the card kept) or `full` (a whole status)", ["read"])
CARD_WRITES = Counter("taubot_card_writes_total", "Card posts and edits, by outcome", ["outcome"])
ESCALATIONS = Counter("taubot_escalations_total", "Escalate presses handled, by outcome", ["outcome"])
AUTO_POSTS = Counter("taubot_auto_posts_total", "Stall-monitor posts, by kind", ["kind"])
MONITOR_STREAMS = Gauge("taubot_monitor_streams", "LIST+WATCH streams the monitor runs",
                        multiprocess_mode="livemax")
MONITOR_STREAM_REQUESTS = Counter("taubot_monitor_stream_requests_total",
                                  "LISTs and WATCHes the monitor's cache started, by verb and resource",
                                  ["verb", "resource"])
MONITOR_STREAM_FAILURES = Counter("taubot_monitor_stream_failures_total",
                                  "Monitor streams ended abnormally (restarted with backoff), by resource",
                                  ["resource"])
MONITOR_RUN_ERRORS = Counter("taubot_monitor_run_errors_total",
                             "Runs whose judging or posting failed in a sweep (isolated; the sweep went on)",
                             ["stage"])
MONITOR_REDIS_DOWN = Counter("taubot_monitor_redis_unreachable_total",
                             "Monitor loops that found Redis unreachable (nothing posted; retried in 2 s)")
UNTRUSTED_DROPPED = Counter("taubot_untrusted_state_dropped_total",
                            "State read back from Redis or Slack that failed its checks and was ignored "
                            "(SPEC §11), by kind: `timed_job`, `cluster_queue_hint`, `exporter_hint`, "
                            "`log_seen`, `eta`, `foreign_message`", ["kind"])
STALLED = Gauge("taubot_stalled_runs", "Runs the monitor sees stalled, by layer", ["layer"],
                multiprocess_mode="livemax")


@contextmanager
def timed_job(job: str) -> Iterator[None]:
    """Count one job run and its duration; the outcome is `ok` or the exception's type."""
    started = time.perf_counter()
    outcome = "ok"
    try:
        yield
    except BaseException as exc:
        outcome = type(exc).__name__
        raise
    finally:
        JOBS.labels(job, outcome).inc()
        JOB_SECONDS.labels(job).observe(time.perf_counter() - started)


F = TypeVar("F", bound=Callable[..., Any])


def counted(job: str) -> Callable[[F], F]:
    """Decorate an rq job function: `timed_job` around every call (rq finds it by its name)."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with timed_job(job):
                return fn(*args, **kwargs)
        return run  # type: ignore[return-value]
    return wrap


class ActiveWatches:
    """`taubot_active_watches`, counted in Redis at scrape time: a watch lives in Redis, not in
    any one worker, so no process could keep this gauge itself."""

    def __init__(self, count: Callable[[], int | None]) -> None:
        self.count = count

    def collect(self) -> Iterator[GaugeMetricFamily]:
        value = self.count()
        if value is not None:
            yield GaugeMetricFamily("taubot_active_watches", "Watches not yet stopped", value=value)


def scrape(extra: list[Any] | None = None) -> tuple[bytes, str]:
    """The text exposition and its content type: the default registry, or in a multiprocess worker
    a fresh one merging every horse's files; ``extra`` collectors (computed at scrape time, like
    `ActiveWatches`) are read from a registry of their own, so nothing is registered twice."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    body = generate_latest(registry)
    if extra:
        own = CollectorRegistry()
        for collector in extra:
            own.register(collector)
        body += generate_latest(own)
    return body, CONTENT_TYPE_LATEST


__all__ = ["ACK_SECONDS", "AUTO_POSTS", "CARD_WRITES", "COMMANDS", "ESCALATIONS", "JOBS", "JOB_SECONDS",
           "KUBE_REQUESTS", "MONITOR_REDIS_DOWN", "MONITOR_RUN_ERRORS", "MONITOR_STREAMS",
           "MONITOR_STREAM_FAILURES", "MONITOR_STREAM_REQUESTS", "PRESSES", "SLACK_CALLS",
           "SLACK_RATELIMITED", "STALLED", "TICK_LAG", "UNTRUSTED_DROPPED", "WATCH_TICKS", "ActiveWatches",
           "counted", "scrape", "timed_job"]
