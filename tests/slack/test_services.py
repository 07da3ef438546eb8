"""`taubot serve http` and `taubot worker --burst` as processes, the way the Helm chart runs them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.fakes.kube_api import running_emulator
from tests.fakes.slack_signing import signed_headers, slash_command_body
from tests.live.conftest import workspace_objects, write_descriptor

from .conftest import CHANNEL, SECRET, SlackApp, example_objects

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_env(slack_app: SlackApp) -> dict[str, str]:
    settings = slack_app.settings
    return {
        **os.environ,
        "TAUBOT_SLACK_BOT_TOKEN": settings.slack_bot_token.get_secret_value(),
        "TAUBOT_SLACK_SIGNING_SECRET": SECRET,
        "TAUBOT_SLACK_API_URL": settings.slack_api_url,
        "TAUBOT_REDIS_URL": settings.redis_url,
        "TAUBOT_WORKSPACES_DIR": str(settings.workspaces_dir),
        "TAUBOT_IDENTITY_FILE": str(settings.identity_file),
        "TAUBOT_QUEUE_NAME": settings.queue_name,
        "TAUBOT_METRICS_PORT": "0",
    }


@contextmanager
def serve_http(env: dict[str, str], *, quiet: bool = False) -> Iterator[str]:
    """`taubot serve http` as its own process; its URL once `/healthz` answers. ``quiet`` sends its
    log to /dev/null (a long benchmark would fill an unread pipe and stall the server)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "workers.cli", "serve", "http", "--host", "127.0.0.1",
                             "--port", str(port)], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL if quiet else subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as response:
                    assert response.status == 200
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    output = proc.stderr.read().decode() if proc.stderr else "no output (quiet)"
                    raise AssertionError(output) from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_serve_http_and_worker_processes_answer_a_command(slack_app: SlackApp) -> None:
    env = service_env(slack_app)
    with running_emulator([*workspace_objects(), *example_objects("l4-job-waiting-for-quota")]) as emu, \
            serve_http(env) as url:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        body = slash_command_body(text="status llama-ft-7b", channel_id=CHANNEL,
                                  response_url=slack_app.fake.response_url("svc"))
        request = urllib.request.Request(url + "/slack/events", data=body.encode(),
                                         headers=signed_headers(SECRET, body), method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            ack = json.loads(response.read())
        assert "Diagnosing `llama-ft-7b`" in ack["text"]
        assert slack_app.queue.count == 1

        worker = subprocess.run([sys.executable, "-m", "workers.cli", "worker", "--burst"], env=env,
                                cwd=ROOT, capture_output=True, timeout=60)
        assert worker.returncode == 0, worker.stderr.decode()[-2000:]
        posts = [c for c in slack_app.fake.calls_to("chat.postMessage") if c.params.get("thread_ts")]
        assert len(posts) == 1
        assert "Kueue admission" in posts[0].params["text"]


def test_serve_without_signing_secret_exits_2(slack_app: SlackApp) -> None:
    env = service_env(slack_app)
    del env["TAUBOT_SLACK_SIGNING_SECRET"]
    result = subprocess.run([sys.executable, "-m", "workers.cli", "serve", "http"], env=env, cwd=ROOT,
                            capture_output=True, timeout=30)
    assert result.returncode == 2
    assert b"TAUBOT_SLACK_SIGNING_SECRET" in result.stderr
    assert b"Traceback" not in result.stderr


def test_serve_socket_needs_an_app_token(slack_app: SlackApp) -> None:
    result = subprocess.run([sys.executable, "-m", "workers.cli", "serve", "socket"],
                            env=service_env(slack_app), cwd=ROOT, capture_output=True, timeout=30)
    assert result.returncode == 2
    assert b"TAUBOT_SLACK_APP_TOKEN" in result.stderr


def test_socket_mode_app_needs_no_signing_secret(slack_app: SlackApp) -> None:
    """Socket Mode has no HTTP requests to sign; the same listeners answer the same payloads."""
    from slack_bolt.request import BoltRequest

    from bot.app import build_app

    settings = slack_app.settings.model_copy(update={"slack_signing_secret": None})
    app = build_app(settings, queue=slack_app.queue, socket_mode=True)
    body = slash_command_body(text="help", channel_id=CHANNEL)
    response = app.dispatch(BoltRequest(body=body, mode="socket_mode"))
    assert response.status == 200
    assert "/tau status" in json.loads(response.body)["text"]


@pytest.mark.parametrize(("change", "said"), [
    ({"TAUBOT_SLACK_BOT_TOKEN": "xoxb-not-the-fakes"}, b"Slack refused TAUBOT_SLACK_BOT_TOKEN"),
    ({"TAUBOT_SLACK_API_URL": "http://127.0.0.1:9/api/"}, b"cannot reach Slack"),
])
def test_serve_with_a_bad_token_or_no_route_to_slack_is_one_line(slack_app: SlackApp, change: dict,
                                                                  said: bytes) -> None:
    env = {**service_env(slack_app), **change}
    result = subprocess.run([sys.executable, "-m", "workers.cli", "serve", "http", "--port", "0"], env=env,
                            cwd=ROOT, capture_output=True, timeout=30)
    assert result.returncode == 2 and said in result.stderr and b"Traceback" not in result.stderr


def test_serve_on_a_busy_port_and_worker_without_redis_are_one_line(slack_app: SlackApp) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "workers.cli", "serve", "http", "--host", "127.0.0.1",
                                 "--port", str(port)], env=service_env(slack_app), cwd=ROOT, capture_output=True,
                                timeout=30)
    assert result.returncode == 2 and b"cannot listen on" in result.stderr and b"Traceback" not in result.stderr
    env = {**service_env(slack_app), "TAUBOT_REDIS_URL": "redis://127.0.0.1:9/0"}
    worker = subprocess.run([sys.executable, "-m", "workers.cli", "worker", "--burst"], env=env, cwd=ROOT,
                            capture_output=True, timeout=30)
    assert worker.returncode == 2 and b"cannot reach Redis" in worker.stderr and b"Traceback" not in worker.stderr


def test_an_in_process_worker_keeps_no_pods_after_its_job(slack_app: SlackApp) -> None:
    """`taubot worker --in-process` lives on between jobs: the engine's per-object caches must not
    keep each status's pods alive (a forking worker's horse drops them with its memory)."""
    from workers.diagnosis import podfacts, shapes
    from workers.rq_worker import TaubotSimpleWorker
    from workers.services import install

    with running_emulator([*workspace_objects(), *example_objects("l4-job-waiting-for-quota")]) as emu:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        slack_app.command("status llama-ft-7b")
        install(slack_app.services)
        TaubotSimpleWorker([slack_app.queue], connection=slack_app.redis).work(burst=True)
    assert [c for c in slack_app.fake.calls_to("chat.postMessage") if c.params.get("thread_ts")]
    assert podfacts._VIEWS == {} and shapes._VERDICTS == {}


def test_a_pool_of_no_workers_is_one_line(slack_app: SlackApp) -> None:
    result = subprocess.run([sys.executable, "-m", "workers.cli", "worker", "--pool", "0"],
                            env=service_env(slack_app), cwd=ROOT, capture_output=True, timeout=30)
    assert result.returncode == 2 and b"--pool needs at least 1" in result.stderr
