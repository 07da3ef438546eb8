"""`taubot shell --demo` and `taubot demo`, driven as a person would: lines on standard input.

The shell runs the real path — grammar, identity file, job functions through
the inline queue, live collection over HTTP from the in-process emulator,
rendering — with a terminal surface; these tests read what it printed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from slack_sdk.models.blocks import Block

from shell.demo import VALIDATE_MANIFEST as MANIFEST  # a Job with GPUs, its queue label, suspended
from workers.render.cards import validate_blocks

REPO = Path(__file__).resolve().parents[1]


def taubot(*args: str, stdin: str = "", tmpdir: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``tmpdir``: the process's TMPDIR, where the terminal surface writes the charts."""
    env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir is not None else None
    return subprocess.run([sys.executable, "-m", "workers.cli", *args], input=stdin, capture_output=True,
                          text=True, cwd=REPO, timeout=120, env=env)


def cards(output: str) -> list[str]:
    """The printed cards (a header line, then its ═ underline, up to the next prompt line)."""
    return re.findall(r"🔎 \S+ · .*?(?=\n› |\n# |\Z)", output, re.S)


def test_shell_answers_a_layer_4_and_a_layer_5_run_with_phase_and_owner() -> None:
    done = taubot("shell", "--demo", stdin="/tau status llama-ft-queued\n/tau status llama-ft-oom\n")
    assert done.returncode == 0, done.stderr
    queued, oom = cards(done.stdout)
    assert "⏳ First incomplete: Kueue admission (pending)" in queued and "layer 4: Queue admission" in queued
    assert "Owner: queue-owner" in queued and "[1] Escalate to queue-owner" in queued
    assert "⚠️ First incomplete: Container start (warning)" in oom and "layer 5: " in oom
    assert "OOMKilled" in oom and "Owner: researcher" in oom
    assert "Traceback" not in done.stdout + done.stderr


def test_pressing_a_button_number_escalates_and_prints_the_handoff_once() -> None:
    done = taubot("shell", "--demo", stdin="/tau status llama-ft-queued\n1\n1\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "▶ pressed [1] Escalate to queue-owner" in out
    assert out.count("📣 Escalation for queue-owner: `llama-ft-queued` is stuck at Kueue admission") == 1
    assert "escalated this to queue-owner in #C0QUEUE" in out
    assert "📣 Escalated to queue-owner by @U0DEMO" in out  # the card, re-rendered from its context
    assert "no button [1]" in out  # the edited card has no Escalate button left to press


def test_blocks_output_is_one_block_kit_payload_per_line_and_the_notes_go_to_stderr() -> None:
    """Issue 38.8: `--blocks` mixed indented JSON with the shell's text. Now stdout is JSON Lines —
    each line one message's payload, as Block Kit Builder takes it — and everything else (the echo,
    which message a payload is and its buttons' numbers, private answers) is on stderr."""
    done = taubot("shell", "--demo", "--blocks", stdin="/tau status llama-ft-queued\n1\n/tau help\n"
                  "/tau status ray-pretrain-crash\n/tau runs --all\n")
    assert done.returncode == 0, done.stderr
    payloads = [json.loads(line) for line in done.stdout.splitlines()]  # every line is one document
    assert len(payloads) >= 5  # two cards, the handoff, the escalated card's edit, the runs list
    for payload in payloads:
        assert list(payload) == ["blocks"] and 0 < len(payload["blocks"]) <= 50
        for block in Block.parse_all(payload["blocks"]):  # slack_sdk's block models
            assert block is not None
            block.validate_json()
        if not re.search(r"<[@!]", json.dumps(payload)):  # no mention or date (taubot's own markup):
            validate_blocks(payload["blocks"])  # also taubot's check that a card carries no raw markup
    assert any("RayCluster" in json.dumps(p) for p in payloads)
    assert any("Escalation for *queue-owner*" in json.dumps(p) for p in payloads)  # the handoff ([1])
    notes = done.stderr
    assert "› /tau status ray-pretrain-crash" in notes and "(only you) taubot diagnoses TauGrid" in notes
    assert re.search(r"    ↳ in thread · buttons: \[1\] Escalate to queue-owner   \[2\] 📋 Details", notes), notes
    assert "▶ pressed [1] Escalate to queue-owner" in notes
    assert not [line for line in notes.splitlines() if '"blocks"' in line]  # no payload among the notes


def test_watch_in_the_shell_follows_the_run_until_it_succeeds() -> None:
    done = taubot("shell", "--demo", stdin="/tau status resnet-watch --watch --interval 15\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.count("✎ card updated") >= 2
    assert "Kueue admission: pending → done after at least" in out
    assert "Watching stopped at 10:31:45 UTC: the run finished (succeeded)" in out


def test_a_piped_session_ends_with_nothing_on_stderr() -> None:
    """Issue 38.6: the clusters' connection pools (the process loop's aiohttp sessions) are closed
    when the session ends, so no "Unclosed client session / connector" warning follows a transcript."""
    done = taubot("shell", "--demo", stdin="/tau status llama-ft-typo\n/tau status ray-pretrain-live --run-profile\n"
                  "/tau logs llama-ft-oom\n")
    assert done.returncode == 0 and "🔎 ray-pretrain-live · RayJob" in done.stdout
    assert done.stderr == ""


def test_unknown_input_gets_usage_not_a_traceback() -> None:
    done = taubot("shell", "--demo", stdin="/tau stauts x\nhello\n/tau status NOT_A_NAME\n")
    assert done.returncode == 0
    assert "unknown command 'stauts'" in done.stdout
    assert "type `/tau help`" in done.stdout
    assert "invalid run name 'NOT_A_NAME'" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_demo_plays_status_watch_and_escalation_and_exits_zero(tmp_path: Path) -> None:
    done = taubot("demo", tmpdir=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    out = done.stdout
    # The running Ray job's loss curve is written as a PNG whose path is printed (issue 29).
    [path] = re.findall(r"🖼 ray-pretrain-live: loss curve: (\S+\.png)", out)
    # In a fresh folder of this status's own, inside a fresh one of this shell's (issue 38.8).
    assert Path(path).parent.parent.parent == tmp_path and Path(path).parent.parent.name.startswith("taubot-charts-")
    assert Path(path).name == "ray-pretrain-live-loss-20261130T103000Z.png"
    from PIL import Image

    with Image.open(path) as image:
        image.load()  # every byte decodes
        assert image.format == "PNG" and image.size == (900, 990)  # loss, learning rate, time panel
    assert "First incomplete: Kueue admission" in out and "First incomplete: RayCluster" in out
    assert "⚠️ First incomplete: Submitted (warning)" in out and "layer 3: " in out
    assert "the run finished (succeeded)" in out
    assert "📣 Escalation for queue-owner" in out
    assert "🚨 Auto-posted by taubot: stalled at Image pull" in out and "Mute 24 h" in out
    assert "`gpu_utilization`: avg" in out and "Source: pod log" in out  # --run-profile and /tau logs
    assert "Manifest validation · Job team-vision/resnet-sweep-4" in out  # a pasted manifest



def test_a_fenced_manifest_or_the_lines_after_validate_are_validated() -> None:
    fenced = f"/tau validate\n```yaml\n{MANIFEST}```\n"
    after = f"/tau validate --workspace vision\n{MANIFEST}\n/tau help validate\n"
    for stdin in (fenced, after):
        done = taubot("shell", "--demo", stdin=stdin)
        assert done.returncode == 0, done.stderr
        out = done.stdout
        assert "no manifest" not in out and "type `/tau help`" not in out
        assert "resnet-sweep-4" in out and "Traceback" not in out + done.stderr
    assert "… kind: Job" in out  # the transcript shows the pasted lines as part of the command
    assert "explains one command" not in out and "--workspace W" in out  # the next line ran on its own


def test_button_numbers_stay_with_their_card_across_updates() -> None:
    done = taubot("shell", "--demo", stdin="/tau status llama-ft-queued\n/tau status resnet-watch --watch --interval 15\n")
    assert done.returncode == 0, done.stderr
    watch = done.stdout.split("› /tau status resnet-watch", 1)[1]
    stops = set(re.findall(r"\[(\d+)\] (?:⏹️ )?Stop watching", watch))
    assert len(stops) == 1 and watch.count("✎ card updated") >= 2, watch[:3000]


class _BackgroundShell:
    """The demo shell driven with streams: entries come from a queue, and each watch tick waits for
    the test's go-ahead (the Ticker's pace), so a line or a press lands between two ticks."""

    def __init__(self) -> None:
        import queue
        import threading

        self.printed: list[str] = []
        self.seen = threading.Condition()
        self.typed: queue.Queue[str | None] = queue.Queue()
        self.go = threading.Semaphore(0)
        self.session: threading.Thread | None = None

    def write(self, text: str) -> None:
        with self.seen:
            self.printed.append(text)
            self.seen.notify_all()

    def wait_for(self, needle: str) -> str:
        with self.seen:
            assert self.seen.wait_for(lambda: needle in "".join(self.printed), timeout=60), \
                "".join(self.printed)[-3000:]
            return "".join(self.printed)

    def pace(self, _due: object) -> float:
        self.go.acquire(timeout=60)
        return 0.0

    def run(self, lines: Callable[[_BackgroundShell], None]) -> str:
        """Start the shell, let ``lines`` type and wait, then end it; everything printed."""
        import threading

        from workers.cli.shell import demo_session

        with demo_session(self.write) as shell:
            self.session = threading.Thread(target=shell.run, args=(iter(self.typed.get, None),),
                                            kwargs={"echo": True, "background": True, "pace": self.pace})
            self.session.start()
            lines(self)
            self.typed.put(None)
            for _ in range(20):
                self.go.release()
            self.session.join(timeout=60)
        assert not self.session.is_alive()
        return "".join(self.printed)


def test_the_watch_runs_beside_the_prompt_and_stop_watching_can_be_pressed() -> None:
    stop = ""

    def lines(sh: _BackgroundShell) -> None:
        nonlocal stop
        sh.typed.put("/tau status resnet-watch --watch --interval 15")
        [stop] = re.findall(r"\[(\d+)\] (?:⏹️ )?Stop watching", sh.wait_for("Stop watching"))
        for _ in range(3):  # ticks at +15 s, +30 s, +45 s: the run started at +40 s
            sh.go.release()
        sh.wait_for("✎ card updated")
        sh.typed.put("/tau help status")  # the prompt answers while the watch goes on
        sh.wait_for("Example: `/tau status llama-ft-7b`")
        sh.typed.put(stop)
        sh.wait_for(f"▶ pressed [{stop}]")

    after = _BackgroundShell().run(lines).split(f"▶ pressed [{stop}]", 1)[1]
    assert "stopped" in after.lower() and "the run finished (succeeded)" not in after


def test_a_second_watch_of_a_watched_run_joins_the_first_card() -> None:
    """SPEC §7 (issue 38.8): the same `--watch` typed again while the first runs — in the demo,
    whose clock stands still between the two commands — joins the first watch: no second card,
    and the first card's Stop keeps working."""
    line, stop = "/tau status resnet-watch --watch --interval 15", ""

    def lines(sh: _BackgroundShell) -> None:
        nonlocal stop
        sh.typed.put(line)
        [stop] = re.findall(r"\[(\d+)\] (?:⏹️ )?Stop watching", sh.wait_for("Stop watching"))
        sh.typed.put(line)
        assert sh.wait_for("joined this watch").count("Stop watching") == 1  # no second card
        sh.typed.put(stop)
        sh.wait_for(f"▶ pressed [{stop}]")

    after = _BackgroundShell().run(lines).split(f"▶ pressed [{stop}]", 1)[1]
    assert "not pressed on the card" not in after and "stopped" in after.lower()


def test_the_readme_shell_line_with_placeholders_is_one_clear_line() -> None:
    env = {**os.environ, "TAUBOT_WORKSPACES_DIR": "…", "TAUBOT_IDENTITY_FILE": "…"}
    done = subprocess.run([sys.executable, "-m", "workers.cli", "shell", "--user", "U012ALICE", "--channel",
                           "C012ABCDEF"], input="", capture_output=True, text=True, cwd=REPO, timeout=60, env=env)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("taubot: error: TAUBOT_WORKSPACES_DIR: … is not a directory")


def _own_cluster(tmp_path: Path, **env: str) -> dict[str, str]:
    (tmp_path / "ws").mkdir(parents=True)
    (tmp_path / "ws" / "vision.yaml").write_text(
        "apiVersion: taugrid.io/v1alpha1\nkind: WorkspaceConnection\nmetadata: {name: vision}\n"
        "spec:\n  cluster: {context: aks-east}\n  namespace: team-vision\n  workspace: vision\n"
        "  localQueue: vision-default\n  slack: {channels: [C012ABCDEF]}\n")
    (tmp_path / "identity.yaml").write_text("users:\n  U012ALICE: {user: alice@example.com}\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("TAUBOT_")}
    return {**base, "TAUBOT_WORKSPACES_DIR": str(tmp_path / "ws"),
            "TAUBOT_IDENTITY_FILE": str(tmp_path / "identity.yaml"), **env}


def _shell(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers.cli", "shell", "--user", "U012ALICE", "--channel",
                           "C012ABCDEF", *args], input="/tau help\n", capture_output=True, text=True, cwd=REPO,
                          timeout=60, env=env)


def test_the_shell_says_which_redis_it_uses_and_never_picks_one_up(tmp_path: Path, redis_url: str) -> None:
    unset = _shell(_own_cluster(tmp_path))
    assert unset.returncode == 2 and "taubot shell needs a Redis" in unset.stderr
    assert "does not use whatever answers on :6379" in unset.stderr
    named = _shell(_own_cluster(tmp_path / "a", TAUBOT_REDIS_URL=redis_url))
    assert named.returncode == 0, named.stderr
    assert f"Redis: {redis_url} (TAUBOT_REDIS_URL)." in named.stdout
    memory = _shell(_own_cluster(tmp_path / "b"), "--redis", "memory")
    assert memory.returncode == 0 and "Redis: fakeredis in process (--redis memory" in memory.stdout
    gone = _shell(_own_cluster(tmp_path / "c"), "--redis", "redis://:hunter2@127.0.0.1:1/0")
    assert gone.returncode == 2
    [line] = gone.stderr.strip().splitlines()
    assert "no Redis answers at redis://:***@127.0.0.1:1/0" in line and "hunter2" not in line


RUNS_WITH_A_LOG = ("llama-ft-oom", "ray-pretrain-live", "ray-data-prep", "resnet-hang", "llama-ft-xid")


def test_every_demo_run_answers_status_and_logs_without_a_dead_end() -> None:
    """Issue 27: the demo's own advice (`/tau logs …`) must lead somewhere — every run's status
    (its card and its *Details*) reads all it needs, and a run that has a log shows it (pod log, or
    the Ray driver log). Driven in process, as a person types: a line, then the Details number."""
    from shell.demo import newest_button
    from shell.demo_cluster import RUNS
    from tests.fixtures.demo_shell import demo_shell
    from workers.contracts.ids import DETAILS_ACTION

    with demo_shell() as shell:
        for run in RUNS:
            status = shell.answer(f"/tau status {run.name}")
            status += shell.answer(str(newest_button(shell.shell, DETAILS_ACTION)))
            assert "📋 Details" in status and "unavailable" not in status, (run.name, status)
            if run.name in RUNS_WITH_A_LOG:
                log = shell.answer(f"/tau logs {run.name}")
                assert "No source answered" not in log and "the log is empty" not in log, (run.name, log)
                assert re.search(r"Last \d+ of \d+ lines", log), log
            if run.name == "vit-pretrain":  # never started: the kubelet's words, not an empty log
                log = shell.answer(f"/tau logs {run.name}")
                assert "is waiting to start: trying and failing to pull image" in log, log
            if run.name == "resnet-hang":
                assert "Runtime progress (layer 7) — NCCL watchdog timeout" in status
            if run.name == "llama-ft-xid":
                assert "Xid 79 (GPU has fallen off the bus)" in status
            if run.name == "ray-pretrain-live":
                assert "Durable evidence (layer 7) — record" in status and "Runtime progress" in status
        profile = shell.answer("/tau status ray-pretrain-live --run-profile")
        profile += shell.answer(str(newest_button(shell.shell, DETAILS_ACTION)))
    assert re.search(r"`gpu_utilization`: avg \d+(\.\d+)? %, max \d+ % \(16 GPUs\)", profile), profile
