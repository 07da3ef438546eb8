"""`taubot demo`: a scripted session on the demo cluster, printed as the shell prints it.

A stuck run's status (layer 4), a crash (layer 5), a run that does not exist
(layer 3), a running Ray job with its GPU profile, a crash-looping run's log,
a manifest pasted after `/tau validate`, a `--watch` that follows a run from
the queue to success, an escalation of the first card with the handoff it
posts, and a sweep of the stall monitor auto-posting what is stuck. Every
step but the sweep is what a person could type into `taubot shell --demo`.
"""

from __future__ import annotations

import asyncio

from workers.contracts.ids import DETAILS_ACTION, ESCALATE_ACTION
from workers.monitor.run import run_once

from .demo_cluster import MISSING_RUN, WATCHED
from .repl import Shell

VALIDATE_MANIFEST = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: resnet-sweep-4
  labels: {kueue.x-k8s.io/queue-name: vision-default}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: trainer
          image: nvcr.io/nvidia/pytorch:24.05-py3
          resources:
            limits: {nvidia.com/gpu: 8}
"""
DETAILS = "details"  # a step that presses *Details* on the card just posted
SCRIPT: tuple[tuple[str, str], ...] = (
    ("A run stuck in the queue: the first phase that is not done, its owner, what to do.",
     "/tau status llama-ft-queued"),
    ("A Ray head that crash-loops: the answer is layer 5, and it is the researcher's.",
     "/tau status ray-pretrain-crash"),
    ("A run name that does not exist: layer 3.", f"/tau status {MISSING_RUN.name}"),
    ("A running Ray job: progress from its driver log, the experiment record, and with --run-profile "
     "its GPUs' utilisation from dcgm-exporter.", "/tau status ray-pretrain-live --run-profile"),
    ("The card's first screen is what is stuck, whose and what next; *Details* posts the rest in its "
     "thread: every phase and check, the evidence, and here the GPU profile.", DETAILS),
    ("The log of a run the kernel keeps OOM-killing: the last lines in the card, the tail as a file.",
     "/tau logs llama-ft-oom"),
    ("Before submitting: a manifest pasted after /tau validate is checked and dry-run as you.",
     "/tau validate\n```yaml\n" + VALIDATE_MANIFEST + "```"),
    ("Watching a run: the card is edited in place as it moves; each phase change is one reply.",
     f"/tau status {WATCHED} --watch --interval 15"),
)
MONITOR_SAY = ("The stall monitor sweeps the cluster as itself (read-only) and posts what has been stuck "
               "past its threshold — unasked, once per run and reason, grouped by shared cause.")


def newest_button(shell: Shell, action_id: str) -> int | None:
    """The number of the most recently offered button with ``action_id``, if any."""
    numbers = [n for n, b in shell.surface.buttons.items() if b.action_id == action_id]
    return max(numbers) if numbers else None


def play(shell: Shell) -> int:
    """Run the script; 0 when every step produced its card."""
    first_card_ts: str | None = None
    for say, line in SCRIPT:
        if line == DETAILS:
            line = str(newest_button(shell, DETAILS_ACTION))
        shell.write(f"\n# {say}\n› " + "\n… ".join(line.splitlines()) + "\n")
        before = set(shell.surface.messages)
        shell.line(line)
        if first_card_ts is None:
            new = [key[1] for key, m in shell.surface.messages.items() if key not in before and m["blocks"]]
            first_card_ts = new[0] if new else None
    escalate = next((b for b in shell.surface.buttons.values()
                     if b.action_id == ESCALATE_ACTION and b.ts == first_card_ts), None)
    if escalate is None:
        shell.write("the first card has no Escalate button\n")
        return 1
    shell.write(f"\n# Escalating the first card hands it to its owner, once.\n› {escalate.number}\n")
    shell.line(str(escalate.number))
    shell.write(f"\n# {MONITOR_SAY}\n› taubot monitor --once\n")
    report = asyncio.run(run_once(shell.services))
    shell.write(f"(swept {report.runs} runs: {report.stalled} stalled; posts: {report.posts})\n")
    return 0 if report.posts else 1


__all__ = ["SCRIPT", "newest_button", "play"]
