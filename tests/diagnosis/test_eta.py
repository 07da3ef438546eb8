"""Training ETA (layer 7): rate over the last window of timed progress lines, time left, expected end.

Line shapes are the real formats of tests/diagnosis/test_progress.py (tqdm std.py r_bar, Megatron-LM's
iteration line, HF Trainer's `Total optimization steps = {max_steps:,}` from trainer.py, the generic
`step=` key-value) with kubelet timestamps; what is asserted is what the user reads.
"""

from __future__ import annotations

from workers.render.cards import phase_tree_text, queue_line
from workers.render.tree_text import render_text

from .test_progress import MEGATRON, TQDM, at, diagnose

RUN = ("l7-job-running-healthy", "resnet-sweep-3")


def test_tqdm_total_gives_rate_time_left_and_end() -> None:
    # 200 steps a minute from 9 to 4 minutes ago; 920 of 2,120 left at 3.33 steps/s → 4 min 36 s.
    lines = [(at(10 - i), TQDM.format(p=i * 10, n=200 * i)) for i in range(1, 7)]
    d = diagnose(*RUN, lines)
    assert d.eta is not None and d.eta.unavailable is None
    assert round(d.eta.steps_per_second, 2) == 3.33 and round(d.eta.remaining_seconds) == 276
    assert ("*ETA:* ends about 2026-11-30 10:30 UTC (in 4 min 36 s): step 1,200 of 2,120 at 3.33 steps/s over "
            "the last 5 min") in phase_tree_text(d)
    assert queue_line(d).startswith("*ETA:* ends about 2026-11-30 10:30 UTC")  # the card's first screen
    assert "eta: ends about 2026-11-30 10:30 UTC" in render_text(d)
    assert d.contract()["eta"]["expected_end"] == "2026-11-30T10:30:36Z"


def test_megatron_total_and_a_slow_rate_in_steps_per_hour() -> None:
    lines = [(at(10 - i), MEGATRON.format(n=100 + i, loss=f"{2.6 - i / 50:.6E}")) for i in range(6)]
    d = diagnose(*RUN, lines)
    assert d.eta is not None and d.eta.total == 250000
    assert "step 105 of 250,000 at 60 steps/h" in phase_tree_text(d)
    assert "(in 173 d 12 h)" in phase_tree_text(d)


def test_hf_stated_total_with_step_lines() -> None:
    lines = [(at(20), "  Total optimization steps = 10,000")]
    lines += [(at(10 - i), f"step={1000 + 60 * i} loss={2.0 - i / 100:.2f}") for i in range(6)]
    d = diagnose(*RUN, lines)
    assert d.eta is not None and d.eta.total == 10000
    assert "step 1,300 of 10,000 at 1.00 steps/s" in phase_tree_text(d)


def test_lightning_max_steps_is_a_total() -> None:
    lines = [(at(20), "`Trainer.fit` config: max_steps=5000")]
    lines += [(at(10 - i), f"global_step={100 * i}") for i in range(1, 5)]
    assert diagnose(*RUN, lines).eta.total == 5000


def test_no_total_no_eta() -> None:
    lines = [(at(10 - i), f"step={1000 + 60 * i} loss={2.0 - i / 100:.2f}") for i in range(6)]
    d = diagnose(*RUN, lines)
    assert d.eta is not None and d.eta.expected_end is None
    assert "*ETA:* none: the log states no total step count" in phase_tree_text(d)
    assert "ETA" not in queue_line(d)
    assert d.contract()["eta"]["remaining_seconds"] is None


def test_a_stalled_run_gets_no_eta() -> None:
    # The same bar, stopped 45 minutes ago while the pods run: the stall is the answer, no ETA.
    lines = [(at(60 - i), TQDM.format(p=i, n=20 * i)) for i in range(1, 16)]
    d = diagnose(*RUN, lines)
    assert d.phase("Runtime progress").reason == "progress.stalled"
    assert d.eta is not None and d.eta.expected_end is None
    assert "ends about" not in phase_tree_text(d)
    assert "*ETA:* none: the run is not progressing" in phase_tree_text(d)


def test_untimed_lines_make_no_rate() -> None:
    lines = [(None, TQDM.format(p=i * 10, n=200 * i)) for i in range(1, 7)]
    d = diagnose(*RUN, lines)
    assert d.eta is None or d.eta.expected_end is None
