"""Fixtures for the Slack path: fake Slack, signed HTTP requests to the real app, real Redis/rq.

Everything crosses a real boundary: requests are signed and sent over HTTP to
the app served by `bot.serve` (the code `taubot serve http` runs), the app
talks to the fake Slack Web API over HTTP, jobs go through real Redis and a
real rq `SimpleWorker`, and the worker reads the Kubernetes API emulator.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from redis import Redis
from rq import Queue, SimpleWorker

from bot.app import FrontEnd, build_app
from bot.serve import EVENTS_PATH, BackgroundServer
from tests.fakes.slack_api import FakeSlack, running_fake_slack
from tests.fakes.slack_signing import signed_headers, slash_command_body
from tests.fixtures import k8s
from workers.config.settings import Settings
from workers.plumbing.clock import ManualClock
from workers.plumbing.timed_jobs import TickMover, TimedJob, due_key
from workers.rq_worker import QuickStop
from workers.services import Services, install

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_TOKEN = "xoxb-taubot-test"
CHANNEL = "C012VISION"  # listed in the test descriptor's spec.slack.channels
ALICE = "U012ALICE"
ALICE_IDENTITY = {"user": "alice@example.com", "groups": ["team-vision", "gpu-users"]}
REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "workers" / "examples"
EXAMPLE_NOW = k8s.T0 + timedelta(minutes=30)  # every bundled example is judged at this time
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def example_objects(name: str, *, judged_at: datetime = EXAMPLE_NOW) -> list[dict[str, Any]]:
    """A bundled example's objects, with every timestamp moved so that the example's
    intended judging time (k8s.T0 + 30 min) becomes ``judged_at`` (default: that time itself,
    which is where the test app's clock starts)."""
    delta = judged_at - EXAMPLE_NOW

    def shift(match: re.Match[str]) -> str:
        text = match.group(0)
        fraction = match.group(1)
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00")) + delta
        if fraction:
            return parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return parsed.strftime("%Y-%m-%dT%H:%M:%SZ")

    text = _TIMESTAMP.sub(shift, (EXAMPLES / f"{name}.json").read_text(encoding="utf-8"))
    return json.loads(text)["items"]


def write_identity_file(directory: Path) -> Path:
    """The identity file of SPEC §9 mapping only Alice."""
    path = directory / "identity.yaml"
    path.write_text(yaml.safe_dump({"users": {ALICE: ALICE_IDENTITY}, "map_by_email": False}))
    return path


@dataclass
class SlackApp:
    """The app under test, served over HTTP, with its Slack fake, Redis and queue."""

    fake: FakeSlack
    server: BackgroundServer
    settings: Settings
    redis: Redis
    queue: Queue
    clock: ManualClock
    services: Services
    front: FrontEnd

    @property
    def events_url(self) -> str:
        return self.server.url + EVENTS_PATH

    def post(self, body: str, *, headers: dict[str, str] | None = None,
             timestamp: int | None = None) -> tuple[int, bytes, float]:
        """POST a signed body (or ``headers`` as given); returns status, body and seconds taken."""
        headers = headers or signed_headers(SECRET, body, timestamp=timestamp)
        request = urllib.request.Request(self.events_url, data=body.encode(), headers=headers,
                                         method="POST")
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                answered = response.status, response.read(), time.monotonic() - started
        except urllib.error.HTTPError as exc:
            answered = exc.code, exc.read(), time.monotonic() - started
        # A press's work runs once it is answered (bot/after_ack.py): what it did is there to read.
        assert self.front.after_ack.wait_idle(10), "a press's work did not finish"
        return answered

    def command(self, text: str, *, user_id: str = ALICE, channel_id: str = CHANNEL,
                response_id: str = "cmd") -> tuple[int, dict[str, Any], float]:
        """Send `/tau <text>` as Slack would; returns status, the ack JSON and seconds taken."""
        body = slash_command_body(text=text, user_id=user_id, channel_id=channel_id,
                                  response_url=self.fake.response_url(response_id))
        status, raw, seconds = self.post(body)
        return status, (json.loads(raw) if raw else {}), seconds

    def work(self, *, with_scheduler: bool = False) -> None:
        """Run every queued job in this process with a real rq worker, then return.

        ``with_scheduler`` first moves due scheduled jobs (retries with an interval) to the queue.
        """
        install(self.services)
        BurstWorker([self.queue], connection=self.redis).work(burst=True, with_scheduler=with_scheduler)

    def timed(self) -> list[str]:
        """The ids of the timed jobs waiting in the workers' due set (watch ticks, picture links)."""
        return [TimedJob.parse(m).id for m in self.redis.zrange(due_key(self.queue.name), 0, -1)]

    def make_due(self, job_id: str | None = None) -> None:
        """Make the timed job ``job_id`` (the only one waiting, if None) due, as time would (the
        movers run on the system clock)."""
        key = due_key(self.queue.name)
        members = [m for m in self.redis.zrange(key, 0, -1) if job_id in (None, TimedJob.parse(m).id)]
        assert len(members) == 1, f"expected one timed job {job_id or ''} waiting, got {self.timed()}"
        self.redis.zadd(key, {members[0]: 0.0})

    def run_timed(self, job_id: str | None = None) -> int:
        """`make_due`, then do what a forking worker does: its `TickMover` claims the due jobs and
        queues them to rq, and the worker runs them. How many ran."""
        self.make_due(job_id)
        mover = TickMover(self.redis, self.queue)
        try:
            moved = mover.move_due()
        finally:
            mover.stop()
        self.work()
        return moved


class BurstWorker(QuickStop, SimpleWorker):
    """rq's in-process worker with the product's listener (`workers/rq_worker.py` `QuickStop`):
    without it a burst's teardown may wait a minute for rq's command listener."""


def make_settings(fake: FakeSlack, redis_url: str, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "slack_bot_token": BOT_TOKEN,
        "slack_signing_secret": SECRET,
        "slack_api_url": fake.api_url,
        "redis_url": redis_url,
        "workspaces_dir": tmp_path / "workspaces",
        "identity_file": write_identity_file(tmp_path),
        "queue_name": "taubot-test",
        "job_retries": 0,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch, redis_url: str, tmp_path: Path) -> str:
    """The environment `taubot worker` would run with (jobs read their settings from it).

    Returns a queue name of this test's own, so a suite running at the same time
    against the same Redis never picks up (or hands us) a job.
    """
    queue_name = f"taubot-test-{uuid.uuid4().hex[:12]}"
    (tmp_path / "workspaces").mkdir(exist_ok=True)
    monkeypatch.setenv("TAUBOT_REDIS_URL", redis_url)
    monkeypatch.setenv("TAUBOT_WORKSPACES_DIR", str(tmp_path / "workspaces"))
    monkeypatch.setenv("TAUBOT_SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("TAUBOT_QUEUE_NAME", queue_name)
    monkeypatch.setenv("TAUBOT_METRICS_PORT", "0")  # a test that scrapes a worker names its own port
    return queue_name


@pytest.fixture
def slack_app_factory(redis_url: str, tmp_path: Path, worker_env: str,
                      monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., SlackApp]]:
    """Build the HTTP app (on a free port) against one fresh fake Slack and the test Redis;
    keyword arguments override settings (e.g. ``job_timeout_seconds``, ``job_retries``)."""
    with contextlib.ExitStack() as stack:
        fake = stack.enter_context(running_fake_slack(token=BOT_TOKEN))
        monkeypatch.setenv("TAUBOT_SLACK_API_URL", fake.api_url)

        def factory(**overrides: Any) -> SlackApp:
            settings = make_settings(fake, redis_url, tmp_path, **{"queue_name": worker_env, **overrides})
            conn = Redis.from_url(redis_url)
            stack.callback(conn.close)
            queue = Queue(settings.queue_name, connection=conn)
            # Listeners ack before the HTTP answer; `post()` waits for a press's work after it.
            app = build_app(settings, queue=queue, process_before_response=True)
            server = stack.enter_context(BackgroundServer(app))
            clock = ManualClock(EXAMPLE_NOW)
            services = Services.for_slack(settings, clock=clock)
            stack.callback(services.redis.close)
            stack.callback(services.close)
            return SlackApp(fake=fake, server=server, settings=settings, redis=conn, queue=queue,
                            clock=clock, services=services, front=app)

        yield factory


@pytest.fixture
def slack_app(slack_app_factory: Callable[..., SlackApp]) -> SlackApp:
    """The HTTP app with default test settings (no retries)."""
    return slack_app_factory()


@contextlib.contextmanager
def taubot_worker() -> Iterator[subprocess.Popen[bytes]]:
    """`taubot worker` as production runs it (a forking rq Worker with its scheduler), in its
    own process group on this test's environment; SIGKILLed with its children on exit."""
    proc = subprocess.Popen([sys.executable, "-m", "workers.cli", "worker"], cwd=REPO_ROOT,
                            env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
