"""`taubot serve http` and `taubot worker --burst` as processes, the way the Helm chart runs them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
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


class ServerProcess:
    """`taubot serve http` as its own process (with its forked servers). Its log is read on a
    thread from start to end — so it never fills a pipe nobody reads — and each server's
    "listening" line, logged once its socket is bound, is the event that it is up."""

    def __init__(self, env: dict[str, str], processes: int, *, say_processes: bool = True) -> None:
        """``processes``: how many servers to expect; ``say_processes`` False leaves `--processes`
        to its default."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "workers.cli", "serve", "http", "--host", "127.0.0.1",
                   "--port", str(self.port), *(["--processes", str(processes)] if say_processes else [])]
        self.processes = processes
        self.proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.listening = threading.Semaphore(0)
        self.ended = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if "taubot listening on" in line:
                self.listening.release()
        self.ended.set()
        for _ in range(self.processes):
            self.listening.release()  # a process that ended wakes whoever waits for it

    def wait_listening(self, timeout: float = 30) -> None:
        for _ in range(self.processes):
            assert self.listening.acquire(timeout=timeout), "".join(self.lines)[-3000:]
        assert not self.ended.is_set(), "".join(self.lines)[-3000:]

    def log(self) -> str:
        self.ended.wait(10)
        return "".join(self.lines)

    def children(self) -> list[int]:
        """The pids of the forked servers (Linux: /proc's list of a task's children)."""
        text = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        return [int(pid) for pid in text.split()]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=10)


@contextmanager
def serve_http(env: dict[str, str], *, processes: int = 1) -> Iterator[str]:
    """`taubot serve http [--processes N]` as its own process; its URL once every server listens."""
    server = ServerProcess(env, processes)
    try:
        server.wait_listening()
        yield server.url
    finally:
        server.stop()


def post_command(url: str, body: str) -> dict:
    request = urllib.request.Request(url + "/slack/events", data=body.encode(),
                                     headers=signed_headers(SECRET, body), method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_serve_http_and_worker_processes_answer_a_command(slack_app: SlackApp) -> None:
    env = service_env(slack_app)
    with running_emulator([*workspace_objects(), *example_objects("l4-job-waiting-for-quota")]) as emu, \
            serve_http(env) as url:
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        body = slash_command_body(text="status llama-ft-7b", channel_id=CHANNEL,
                                  response_url=slack_app.fake.response_url("svc"))
        ack = post_command(url, body)
        assert "Diagnosing `llama-ft-7b`" in ack["text"]
        assert slack_app.queue.count == 1

        worker = subprocess.run([sys.executable, "-m", "workers.cli", "worker", "--burst"], env=env,
                                cwd=ROOT, capture_output=True, timeout=60)
        assert worker.returncode == 0, worker.stderr.decode()[-2000:]
        posts = [c for c in slack_app.fake.calls_to("chat.postMessage") if c.params.get("thread_ts")]
        assert len(posts) == 1
        assert "Kueue admission" in posts[0].params["text"]


def test_two_server_processes_share_the_port_and_one_metrics_view(slack_app: SlackApp) -> None:
    """`--processes 2`: two forked servers, each its own socket on the port; every command is
    acked and queued whichever answers, and `/metrics` from either counts them all (the
    servers write prometheus_client's multiprocess files, which any one of them merges)."""
    server = ServerProcess(service_env(slack_app), processes=2)
    try:
        server.wait_listening()
        children = server.children()
        assert len(children) == 2 and server.proc.pid not in children
        listening = [line for line in server.lines if "taubot listening on" in line]
        assert sorted(f"(pid {pid})" in "".join(listening) for pid in children) == [True, True]
        for i in range(20):
            body = slash_command_body(text="status llama-ft-7b", channel_id=CHANNEL,
                                      response_url=slack_app.fake.response_url(f"p{i}"))
            assert "Diagnosing `llama-ft-7b`" in post_command(server.url, body)["text"]
        assert slack_app.queue.count == 20
        for _ in range(2):
            with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
                metrics = response.read().decode()
            assert 'taubot_commands_total{kind="status",outcome="queued"} 20.0' in metrics
    finally:
        server.stop()
    assert server.proc.returncode == 0  # SIGTERM: every server stopped, cleanly
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped by the parent before it exited
    # Each command's audit line, written after the acks by each server's log writer: none lost at
    # SIGTERM, none twice.
    audited = [line for line in server.log().splitlines() if "taubot.audit: command " in line]
    assert len(audited) == 20 and all("outcome=queued" in line and "run=llama-ft-7b" in line for line in audited)


def test_serve_http_runs_two_server_processes_unless_told(slack_app: SlackApp) -> None:
    """Issue 36: one process's threads queue for one interpreter lock, so a burst of commands is
    acked about twice as soon by two (workers/cli/services.py DEFAULT_SERVE_PROCESSES)."""
    server = ServerProcess(service_env(slack_app), processes=2, say_processes=False)
    try:
        server.wait_listening()
        assert len(server.children()) == 2
        body = slash_command_body(text="status llama-ft-7b", channel_id=CHANNEL,
                                  response_url=slack_app.fake.response_url("default"))
        assert "Diagnosing `llama-ft-7b`" in post_command(server.url, body)["text"]
    finally:
        server.stop()
    assert server.proc.returncode == 0


def test_a_server_process_that_dies_takes_the_others_down(slack_app: SlackApp) -> None:
    """One of the servers killed: the parent stops the other and exits non-zero, so Kubernetes
    restarts the pod instead of it serving at half strength unnoticed."""
    server = ServerProcess(service_env(slack_app), processes=2)
    try:
        server.wait_listening()
        first, second = server.children()
        os.kill(first, signal.SIGKILL)
        assert server.proc.wait(timeout=20) == 1
    finally:
        server.stop()
    assert f"front-end process {first} exited (signal 9): stopping the other 1" in server.log()
    with pytest.raises(ProcessLookupError):
        os.kill(second, 0)


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
    front = build_app(settings, queue=slack_app.queue, socket_mode=True)
    assert front.slash is None  # Socket Mode: /tau goes through Bolt's listener
    body = slash_command_body(text="help", channel_id=CHANNEL)
    response = front.bolt.dispatch(BoltRequest(body=body, mode="socket_mode"))
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


@pytest.mark.parametrize("processes", [[], ["--processes", "2"]])
def test_serve_on_a_busy_port_and_worker_without_redis_are_one_line(slack_app: SlackApp,
                                                                    processes: list[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "workers.cli", "serve", "http", "--host", "127.0.0.1",
                                 "--port", str(port), *processes], env=service_env(slack_app), cwd=ROOT,
                                capture_output=True, timeout=30)
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


@pytest.mark.parametrize(("change", "said"), [
    ({"TAUBOT_SLACK_APP_TOKEN": "xapp-1-A0TAUBOT-revoked"},
     b"Slack refused TAUBOT_SLACK_APP_TOKEN (apps.connections.open: invalid_auth)"),
    ({"TAUBOT_SLACK_APP_TOKEN": "xoxb-a-bot-token-pasted-as-the-app-token"},
     b"TAUBOT_SLACK_APP_TOKEN is not an app-level token"),
    ({"TAUBOT_SLACK_APP_TOKEN": "xapp-1-A0TAUBOT-ok", "TAUBOT_SLACK_BOT_TOKEN": "xoxb-not-the-fakes"},
     b"Slack refused TAUBOT_SLACK_BOT_TOKEN"),
])
def test_serve_socket_with_a_bad_app_or_bot_token_is_one_line(slack_app: SlackApp, change: dict,
                                                             said: bytes) -> None:
    """The fake Slack answers `apps.connections.open` with an app token as Slack does a revoked one
    (`invalid_auth`): one line on stderr and exit 2, never slack_sdk's traceback."""
    env = {**service_env(slack_app), **change}
    result = subprocess.run([sys.executable, "-m", "workers.cli", "serve", "socket"], env=env, cwd=ROOT,
                            capture_output=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert said in result.stderr and b"Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if b"error" in line.lower()]
    assert errors == [line for line in errors if said in line], result.stderr  # the one line says it
    assert b"xapp-1-A0TAUBOT" not in result.stderr  # the token itself is never shown
