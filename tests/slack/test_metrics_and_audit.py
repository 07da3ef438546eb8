"""`/metrics` of the bot and of a forking worker, `/readyz`, and the audit lines of commands and presses.

The worker test runs `taubot worker` as the chart does (a forking rq worker):
the job runs in a work horse, so the counters it moves reach the parent's
`/metrics` only through prometheus_client's multiprocess files.
"""

from __future__ import annotations

import io
import json
import logging
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis
from rq.job import Job

from bot.serve import BackgroundServer
from tests.fakes.kube_api import running_emulator
from tests.fakes.slack_signing import block_action_body
from tests.live.conftest import workspace_objects, write_descriptor
from workers.config.settings import load_settings
from workers.contracts.ids import ESCALATE_ACTION
from workers.outside.logsafe import AUDIT, audit, configure
from workers.plumbing.health_http import redis_ready, serve_in_background

from .conftest import ALICE, CHANNEL, SlackApp, example_objects, taubot_worker
from .test_services import free_port

RUN = "llama-ft-7b"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: dict, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def test_bot_metrics_move_after_a_command_and_its_job(slack_app: SlackApp) -> None:
    url = slack_app.server.url
    before = scrape(url)
    with running_emulator([*workspace_objects(), *example_objects("l4-job-waiting-for-quota")]) as emu:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        slack_app.command(f"status {RUN}")
        slack_app.command("status Not_A_Run")
        middle = scrape(url)
        slack_app.work()  # an in-process rq worker: its counters are this process's
        requests = len(emu.requests)
    after = scrape(url)
    assert value(middle, "taubot_commands_total", kind="status", outcome="queued") - \
        value(before, "taubot_commands_total", kind="status", outcome="queued") == 1
    assert value(middle, "taubot_commands_total", kind="status", outcome="usage") - \
        value(before, "taubot_commands_total", kind="status", outcome="usage") == 1
    assert value(middle, "taubot_ack_seconds_count") - value(before, "taubot_ack_seconds_count") == 2
    assert value(after, "taubot_jobs_total", job="status", outcome="ok") - \
        value(before, "taubot_jobs_total", job="status", outcome="ok") == 1
    assert total(after, "taubot_kube_requests_total") - total(before, "taubot_kube_requests_total") == requests
    posted = value(after, "taubot_slack_calls_total", method="chat.postMessage", outcome="ok") - \
        value(before, "taubot_slack_calls_total", method="chat.postMessage", outcome="ok")
    assert posted == len(slack_app.fake.calls_to("chat.postMessage")) == 2  # the parent and the card


def test_a_forking_worker_serves_its_horses_metrics(slack_app: SlackApp, monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path) -> None:
    port = free_port()
    monkeypatch.setenv("TAUBOT_METRICS_PORT", str(port))
    monkeypatch.setenv("TAUBOT_METRICS_HOST", "127.0.0.2")  # another loopback address: the setting is read
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    with running_emulator([*workspace_objects(), *example_objects("l4-job-waiting-for-quota")]) as emu:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        slack_app.command(f"status {RUN}")
        [job_id] = slack_app.queue.job_ids
        with taubot_worker():
            # redis-py 8 reads with a 5 s socket timeout by default, shorter than the wait: a job
            # slower than 5 s on a loaded machine failed the read, not the test's assertion.
            waiting = Redis.from_url(slack_app.settings.redis_url, socket_timeout=90)
            result = Job.fetch(job_id, connection=waiting).latest_result(timeout=60)
            waiting.close()
            assert result is not None and result.type == result.Type.SUCCESSFUL
            samples = scrape(f"http://127.0.0.2:{port}")
            with urllib.request.urlopen(f"http://127.0.0.2:{port}/readyz", timeout=5) as ready:
                assert ready.status == 200
            with pytest.raises(urllib.error.URLError):  # only the address it was told
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
        requests = len(emu.requests)
    assert value(samples, "taubot_jobs_total", job="status", outcome="ok") == 1
    assert value(samples, "taubot_job_duration_seconds_count", job="status") == 1
    assert total(samples, "taubot_kube_requests_total") == requests
    assert value(samples, "taubot_active_watches") == 0


def test_health_and_metrics_listen_on_loopback_unless_told() -> None:
    """Issue 26.9: `/metrics` of the worker and the monitor bound 0.0.0.0 by default."""
    assert load_settings().metrics_host == "127.0.0.1"
    server = serve_in_background(0)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
        server.server_close()


def test_readyz_says_why_when_redis_is_down(slack_app: SlackApp) -> None:
    from bot.app import build_app

    dead = Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
    app = build_app(slack_app.settings, queue=slack_app.queue, process_before_response=True)
    with BackgroundServer(app, ready=redis_ready(dead)) as server:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(server.url + "/readyz", timeout=5)
        assert refused.value.code == 503 and b"redis unreachable" in refused.value.read()
        with urllib.request.urlopen(server.url + "/healthz", timeout=5) as alive:
            assert alive.status == 200  # liveness does not depend on Redis: a restart would not help


def test_every_command_has_one_audit_line_without_the_response_url(slack_app: SlackApp,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT.name)
    slack_app.command(f"status {RUN} --watch")
    slack_app.command("status")
    slack_app.command("status r", user_id="U0NOBODY1")
    lines = [r.audit for r in caplog.records if r.name == AUDIT.name]
    assert [(a["outcome"], a["slack_user"]) for a in lines] == [
        ("queued", ALICE), ("usage", ALICE), ("unmapped", "U0NOBODY1")]
    first = lines[0]
    assert first["event"] == "command" and first["channel"] == CHANNEL
    assert first["k8s_user"] == "alice@example.com" and first["k8s_groups"] == ["team-vision", "gpu-users"]
    assert first["command"] == f"/tau status {RUN} --watch" and first["run"] == RUN
    assert lines[2]["k8s_user"] is None
    assert not any("hooks" in json.dumps(a) or "response" in json.dumps(a) for a in lines)


def test_a_press_has_an_audit_line(slack_app: SlackApp, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT.name)
    slack_app.post(block_action_body(ESCALATE_ACTION, "not-signed-by-taubot"))
    [line] = [r.audit for r in caplog.records if r.name == AUDIT.name]
    assert line["event"] == "press" and line["action"] == "escalate" and line["outcome"] == "tampered"
    assert line["slack_user"] == ALICE and line["k8s_user"] is None


def test_json_lines_are_redacted() -> None:
    stream = io.StringIO()
    handler = configure(logging.StreamHandler(stream), json_lines=True)
    AUDIT.addHandler(handler)
    try:
        audit("press", value="xoxb-1234-abcd", url="https://hooks.slack.com/actions/T0/1/secret",
              file="https://files.slack.com/files-pri/T0-F07ABC/download/job.yaml")
    finally:
        AUDIT.removeHandler(handler)
    doc = json.loads(stream.getvalue().splitlines()[-1])
    assert doc["level"] == "INFO" and doc["name"] == "taubot.audit" and doc["audit"]["event"] == "press"
    text = json.dumps(doc)
    assert "xoxb-1234" not in text and "/actions/T0/1/secret" not in text and "F07ABC" not in text
    assert "[redacted]" in doc["audit"]["value"] and "press" in doc["message"]
