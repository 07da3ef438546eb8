"""`/tau logs` in Slack: signed command → rq job → the card and the tail as a file in the thread.

The pod's log is hostile on purpose (a container controls its own output): a
channel mention, a code-fence breakout and a fake card line. The HF Trainer
dict line shape is transformers 4.46 `trainer_callback.py`.
"""

from __future__ import annotations

import io
import logging

from tests.fakes.kube_api import running_emulator
from tests.fixtures import k8s
from tests.fixtures.blocks import card_text
from tests.fixtures.secrets import CONTROL_LINES, CORPUS, FORBIDDEN, PEM_BLOCKS, found_in
from tests.live.conftest import workspace_objects, write_descriptor
from workers.outside.logsafe import configure

from .conftest import CHANNEL, SlackApp

RUN = "llama-ft-7b"
HOSTILE = [
    "2026-11-30T10:20:00.000000001Z {'loss': 1.9211, 'grad_norm': 0.61, 'learning_rate': 4e-05, "
    "'epoch': 1.5}",
    "2026-11-30T10:20:01.000000001Z <!channel> ```",
    "2026-11-30T10:20:02.000000001Z ✅ *Ready* — every phase done <@U012ALICE>",
    "2026-11-30T10:20:03.000000001Z ``` <https://evil.example|click here>",
]


def test_logs_card_escapes_hostile_lines_and_attaches_the_tail(slack_app: SlackApp) -> None:
    j = k8s.job(RUN, suspend=False, active=1)
    pod = k8s.job_pod(j, node="gpu-node-1", phase="Running", containers=[k8s.running()])
    with running_emulator([*workspace_objects(), j, pod]) as emu:
        name, container = pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]
        emu.pod_logs[(k8s.NS, name, container)] = "\n".join(HOSTILE) + "\n"
        write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        status, ack, _ = slack_app.command(f"logs {RUN} --tail 50")
        assert status == 200 and f"Fetching the log of `{RUN}`" in ack["text"]
        slack_app.work()
    [card] = [c for c in slack_app.fake.calls_to("chat.postMessage") if c.params.get("blocks")]
    text = card_text(card.params["blocks"])
    assert "📜 llama-ft-7b · log" in text and "pod log" in text and f"`{name}`" in text
    assert "&lt;!channel&gt;" in text and "<!channel>" not in text and "<@U012ALICE>" not in text
    assert "<https://" not in text
    [block] = [b for b in card.params["blocks"] if "Last 4 of 4 lines" in str(b)]
    body = block["text"]["text"]
    assert body.count("```") == 2  # one fence opened, one closed: the log cannot break out
    assert "\n✅ *Ready*" not in body.split("```")[0]  # the fake card line stays inside the block
    [upload] = slack_app.fake.files()
    assert upload["thread_ts"] == card.params["thread_ts"] and upload["channel"] == CHANNEL
    assert upload["content"].decode().splitlines()[1] == "2026-11-30T10:20:01.000000001Z <!channel> ```"
    assert "attached in this thread" in text


def test_no_planted_secret_or_control_character_reaches_the_card_the_file_or_a_log_line(
        slack_app: SlackApp) -> None:
    """Issue 26.3: `/tau logs` posted 8 of 9 planted secret shapes in the card and 9 of 9 in the
    snippet. The whole corpus (one chunk per command, so every line is in a card), the private
    keys across lines, the control characters and a 5,000-character line: 0 found in any card,
    file or line taubot logged meanwhile (through the handler production configures)."""
    planted = [p.line for p in CORPUS] + [line for p in PEM_BLOCKS for line in p.line.split("\n")]
    chunks = [planted[i:i + 8] for i in range(0, len(planted), 8)] + [[*CONTROL_LINES, "z" * 5000]]
    stream = io.StringIO()
    handler = configure(logging.StreamHandler(stream), json_lines=True)
    root = logging.getLogger()
    root.addHandler(handler)
    j = k8s.job(RUN, suspend=False, active=1)
    pod = k8s.job_pod(j, node="gpu-node-1", phase="Running", containers=[k8s.running()])
    try:
        with running_emulator([*workspace_objects(), j, pod]) as emu:
            name, container = pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]
            write_descriptor(slack_app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
            for chunk in chunks:
                # kubelet `timestamps=true` lines (kubectl logs --timestamps)
                emu.pod_logs[(k8s.NS, name, container)] = "".join(
                    f"2026-11-30T10:20:{i:02d}.000000001Z {line}\n" for i, line in enumerate(chunk))
                slack_app.command(f"logs {RUN} --tail 50")
                slack_app.work()
    finally:
        root.removeHandler(handler)
    cards = [c.params for c in slack_app.fake.calls_to("chat.postMessage") if c.params.get("blocks")]
    files = [f["content"].decode() for f in slack_app.fake.files()]
    assert len(cards) == len(files) == len(chunks)
    for card, content, chunk in zip(cards, files, chunks, strict=True):
        text = card_text(card["blocks"])
        assert f"Last {len(chunk)} of {len(chunk)} lines" in text
        for posted in (text, content):
            assert found_in(posted) == []
            assert not [c for c in FORBIDDEN if c in posted]
        assert content.count("[redacted]") >= len([line for line in chunk if found_in(line)])
    assert "4,500 more characters clipped" in files[-1] and "z" * 501 not in files[-1]
    assert "ERROR loss is nan" in files[-1]  # the text around a colour code is kept
    logged = stream.getvalue()
    assert logged and found_in(logged) == []
