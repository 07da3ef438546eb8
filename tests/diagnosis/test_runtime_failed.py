"""SPEC §11: a log that was read is never `skipped`; a failed run whose log shows no error is a
warning that names the failure's evidence from elsewhere (the RayJob's message, an exit code)."""

from __future__ import annotations

from datetime import timedelta

from tests.fixtures import k8s
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import LogEvidence

NOW = k8s.T0 + timedelta(minutes=30)
# Hugging Face Trainer's log dicts (transformers trainer_callback.py ProgressCallback.on_log), as the
# driver printed them before the process was killed without a word.
LINES = [("2026-11-30T10:10:00Z", "{'loss': 1.9, 'grad_norm': 1.1, 'learning_rate': 4e-05, 'epoch': 0.1}"),
         ("2026-11-30T10:11:00Z", "{'loss': 1.8, 'grad_norm': 1.0, 'learning_rate': 4e-05, 'epoch': 0.2}")]


def test_a_failed_rayjob_whose_log_shows_no_error_is_a_warning_with_the_rayjobs_message() -> None:
    rj = k8s.rayjob("ray-pretrain-13b", job_status="FAILED", deployment_status="Failed",
                    message="Job entrypoint command failed with exit code 137")
    d = evaluate([rj], "ray-pretrain-13b", NOW, k8s.NS, logs=LogEvidence(lines=LINES, source="ray-dashboard"))
    check = d.phase("Runtime progress")
    assert (check.state.value, check.reason) == ("warning", "progress.failed_silent")
    assert check.summary.startswith("the run failed; its last lines show no error")
    assert "exit code 137" in check.summary and d.owner == "researcher"
