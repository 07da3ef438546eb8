"""The HTTP server keeps a command's ack deadline (`bot.commands.AckDeadline`, issue 36).

Behind `taubot serve http` the listener authorizes and enqueues on its own dispatch thread (one
thread crossing less per ack); should Redis stall, the server's event loop answers "still
working" within the budget, and the listener's outcome reaches the user through `response_url`
once it is known — exactly one of them answers Slack. Redis is stalled at the transport: a TCP
server that accepts and never answers.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.app import build_app
from bot.commands import ACK_BUDGET_SECONDS, AckDeadline
from bot.serve import BackgroundServer
from tests.fakes.slack_signing import signed_headers, slash_command_body

from .conftest import ALICE, SECRET, SlackApp, make_settings


@pytest.fixture
def silent_redis() -> Iterator[str]:
    """A Redis URL whose server accepts connections and never answers a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    stop.set()
    thread.join(timeout=2)
    for conn in held:
        conn.close()
    listener.close()


def test_a_stalled_enqueue_is_acked_in_time_by_the_server_and_told_later(
        slack_app: SlackApp, silent_redis: str, tmp_path: Path) -> None:
    app = build_app(make_settings(slack_app.fake, silent_redis, tmp_path))
    body = slash_command_body(text="status r", user_id=ALICE, channel_id="C012VISION",
                              response_url=slack_app.fake.response_url("stalled"))
    with BackgroundServer(app) as server:
        request = urllib.request.Request(server.url + "/slack/events", data=body.encode(),
                                         headers=signed_headers(SECRET, body), method="POST")
        started = time.monotonic()
        with urllib.request.urlopen(request, timeout=10) as response:
            status, ack = response.status, json.loads(response.read())
        seconds = time.monotonic() - started
        assert status == 200 and seconds < 3
        assert ack == {"text": "🔎 Working on it… if taubot cannot start your command you will hear why here.",
                       "response_type": "ephemeral"}
        [late] = slack_app.fake.wait_for_responses("stalled", timeout=10)
    assert "queue (Redis) is unreachable" in late["text"] and late["response_type"] == "ephemeral"


def test_exactly_one_side_answers() -> None:
    """The listener done first: its reply is the ack and the server does not answer; the server
    first with the listener armed: the server answers; the server past the deadline before the
    listener started: the listener must not arm (it answers "still working" at once)."""
    first = AckDeadline(time.monotonic() + ACK_BUDGET_SECONDS)
    assert first.arm() and first.settle() and not first.expire()
    late = AckDeadline(time.monotonic())
    assert late.arm() and late.expire() and not late.settle()
    unstarted = AckDeadline(time.monotonic())
    assert not unstarted.expire() and not unstarted.arm()
