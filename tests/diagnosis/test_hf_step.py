"""A Hugging Face Trainer log dict gives its step, whatever the order of its keys (issue 38.7).

The lines are `str(dict)` as transformers' ProgressCallback.on_log prints them (training-logs.md
§2.4 rows 3 and 4; transformers 5 prints the values as strings, reference §2.7), behind the
kubelet's `--timestamps` prefix as a pod log gives them.
"""

from __future__ import annotations

import pytest

from workers.diagnosis.progress import parse_progress

STAMP = "2026-11-30T10:29:00.000000000Z"


@pytest.mark.parametrize(("line", "step", "loss"), [
    ("{'loss': 1.8993, 'grad_norm': 0.74, 'learning_rate': 4.8e-05, 'epoch': 0.29, 'step': 290}", 290, 1.8993),
    ("{'loss': '5.391', 'step': '12', 'epoch': '0.01'}", 12, 5.391),  # transformers 5
    ("{'epoch': 0.29, 'step': 290, 'loss': 1.2}", 290, 1.2),  # keys in another order
    ("{'loss': 0.5, 'grad_norm': 1.2, 'learning_rate': 1e-05, 'epoch': 0.5}", None, 0.5),  # 4.46: no step
])
def test_the_step_of_a_log_dict_is_read(line: str, step: int | None, loss: float) -> None:
    progress = parse_progress([(STAMP, line)])
    assert progress.last_step == step
    assert progress.last_loss == pytest.approx(loss)


def test_a_summary_dict_without_a_loss_key_is_no_progress_line() -> None:
    """`train_loss` and `eval_loss` are not the training loss of a step (trainer.py's summaries)."""
    progress = parse_progress([(STAMP, "{'train_runtime': 1075.3, 'train_loss': 0.8125, 'epoch': 2.5}"),
                               (STAMP, "{'eval_loss': 0.3, 'epoch': 1.0}")])
    assert progress.last_step is None and progress.last_loss is None
