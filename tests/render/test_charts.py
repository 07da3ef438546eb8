"""The status's pictures (issue 38, Build item 5): the chart model a test can read — the x axis,
the time marks, the GPUs and which have no data — and the PNG drawn from it, decoded at the
promised size. Figures are checked as matplotlib holds them before saving (axis labels, the x
values, the markers' positions), not only as pixels."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import pytest
from PIL import Image

from tests.diagnosis.test_progress import EXAMPLES, at
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import Diagnosis, LogEvidence, ProgressTimeline
from workers.diagnosis.progress import parse_progress
from workers.render.chart_model import (
    NO_TIME_NOTE,
    LossChart,
    chart_filename,
    gpu_strip_model,
    loss_chart_model,
    status_loss_chart,
    x_label,
)
from workers.render.charts import gpu_figure, gpu_strip, label, loss_chart, loss_figure, png, status_pictures

NOW = datetime(2026, 11, 30, 10, 30, tzinfo=UTC)  # the example's `taugrid.io/example-now`
RUN = "resnet-sweep-3"
EXAMPLE = json.loads((EXAMPLES / "l7-job-running-healthy.json").read_text())["items"]
NODE = "aks-a100-38141759-vmss{:06d}"  # the examples' GPU node pool (bench/make_examples.py)


def decoded(data: bytes | None) -> Image.Image:
    assert data is not None
    image = Image.open(io.BytesIO(data))
    image.load()  # decodes every byte: a truncated PNG fails here
    assert image.format == "PNG"
    return image


def diagnosed(lines: list[tuple[str | None, str]], unchanged_since: datetime | None = None) -> Diagnosis:
    """The example's running Job (two pods) diagnosed at 10:30 with ``lines`` as its log."""
    return evaluate(EXAMPLE, RUN, NOW, logs=LogEvidence(lines=lines, source="pod log",
                                                        unchanged_since=unchanged_since))


def chart_of(lines: list[tuple[str | None, str]], **kw: object) -> LossChart:
    chart = status_loss_chart(diagnosed(lines, **kw), NOW)  # type: ignore[arg-type]
    assert chart is not None
    return chart


# --------------------------------------------------------------------------- 1. steps from every format

# Three lines a minute apart, ending a minute before now, in each format that states a step
# (SPEC §5a "Progress lines"; shared/reference/training-logs.md §2.4, rows as numbered there).
FORMATS = {
    # row 3: transformers PR #6998 (HF Trainer with `step`)
    "HF dict with step": ("{{'loss': {loss}, 'learning_rate': 4.9113474e-05, 'epoch': 0.05, 'step': {step}}}",
                          True),
    # row 3: huggingface/blog#56, the 2020 JSON form
    "HF JSON with step": ('{{"loss": {loss}, "learning_rate": 4.8e-05, "epoch": 0.03, "step": {step}}}', True),
    # SPEC §5a `global_step`: a TrainerCallback's on_log dict keyed by the Trainer's global_step
    "HF dict with global_step": ("{{'loss': {loss}, 'global_step': {step}}}", True),
    # row 5: Lightning-AI/pytorch-lightning#9242 (tqdm bar, postfix loss)
    "Lightning bar": ("Epoch 1:  51%|█████     | {step}/1970 [00:21<00:20,  4.70it/s, loss={loss}, v_num=0]", True),
    # row 6: pytorch/pytorch#118369 (NeMo bar with global_step in the postfix; the bar's N wins)
    "NeMo bar": ("Epoch 0:   6%|██  | {step}/500150 [6:28:43<94:39:17,  1.37it/s, loss={loss}, v_num=95nc, "
                 "reduced_train_loss=2.590, global_step=3.2e+4, consumed_samples=2.56e+7]", True),
    # SPEC §5a `step=N` key-value lines (generic loops)
    "step=N": ("step={step} loss={loss} lr=3e-4", True),
    "global_step=N": ("global_step={step} loss={loss}", True),
    # row 8: epfLLM/Megatron-LLM#11
    "Megatron": (" iteration      {step}/  250000 | consumed samples:       124928 | elapsed time per iteration "
                 "(ms): 86545.2 | learning rate: 9.150E-06 | global batch size:  1024 | lm loss: {loss} | "
                 "loss scale: 1.0 |", True),
    # SPEC §5a `iteration N` (generic loops)
    "iteration N": ("Iteration {step}: loss={loss}", True),
    # row 12: microsoft/huggingface-transformers PR #7 (a tqdm bar with no loss)
    "tqdm bar": ("98%|█████████▊| {step}/2120 [26:01<00:22,  1.49it/s]", False),
}


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_format_that_states_a_step_gives_a_step_axis(name: str) -> None:
    template, has_loss = FORMATS[name]
    steps = [2080.0, 2090.0, 2100.0]
    lines = [(at(3 - i), template.format(step=int(s), loss=f"{2.5 - i / 10:.4f}")) for i, s in enumerate(steps)]
    chart = chart_of(lines)
    assert chart.time is not None and [y for _, y in chart.time.points] == steps
    assert chart.time.y_label == "step"
    if not has_loss:  # steps but no loss: the progress over time is the picture
        assert chart.loss is None and chart.what == "progress chart"
        fig = loss_figure(chart)
        assert list(fig.axes[0].lines[0].get_ydata()) == steps
        assert decoded(png(fig)).size == chart.size == (900, 450)
        return
    assert chart.loss is not None and chart.loss.by_step and list(chart.loss.xs) == steps
    assert x_label(chart.loss) == "training step"
    fig = loss_figure(chart)
    loss_ax = fig.axes[0]
    assert list(loss_ax.lines[0].get_xdata()) == steps
    shown = [ax.get_xlabel() for ax in fig.axes]
    assert "training step" in shown and not any("no step" in text for text in shown)
    plt.close(fig)  # the figure is what is checked here; other tests decode the PNG


def test_only_a_log_that_states_no_step_is_said_to_give_none() -> None:
    """transformers 4.46's current dict has `epoch` but no `step` (reference row 1): the x axis is
    the line's order and says so. When some lines state a step, x is the step and the others are
    counted as not drawn — never "the log gives no step"."""
    current = [(at(3 - i), f"{{'loss': {2 - i / 10}, 'grad_norm': 1.2, 'learning_rate': 4e-05, 'epoch': {i / 10}}}")
               for i in range(3)]
    chart = chart_of(current)
    assert chart.loss is not None and not chart.loss.by_step and list(chart.loss.xs) == [1.0, 2.0, 3.0]
    assert x_label(chart.loss) == "progress line, in order (the log states no step)"
    mixed = loss_chart_model([(None, 2.2), (100.0, 2.0), (None, 1.95), (110.0, 1.9)], "r")
    assert mixed is not None and mixed.loss is not None and list(mixed.loss.xs) == [100.0, 110.0]
    assert x_label(mixed.loss) == "training step (2 values without a step not drawn)"


# --------------------------------------------------------------------------- 2. the time axis

def hf(step: int, loss: float) -> str:
    """transformers PR #6998's dict with `step` (training-logs.md §2.4 row 3)."""
    return f"{{'loss': {loss}, 'learning_rate': 4.9e-05, 'epoch': {step / 1000}, 'step': {step}}}"


NCCL_TIMEOUT = ("[rank0]:[E1130 10:15:00.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, "
                "NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.")
# hiyouga/LlamaFactory#7396 (training-logs.md §2.5, the current format)


def vline_x(fig_ax, label_start: str) -> float:  # noqa: ANN001 - a matplotlib Axes
    [line] = [ln for ln in fig_ax.lines if ln.get_label().startswith(label_start)]
    xs = set(mdates.date2num(x) if isinstance(x, datetime) else float(x) for x in line.get_xdata())
    assert len(xs) == 1  # a vertical line
    return xs.pop()


def test_a_hung_run_shows_the_gap_from_its_last_progress_line_to_now() -> None:
    """Steps until 10:05, then the NCCL watchdog at 10:15 (the demo's resnet-hang): the time
    panel's last point is 10:05, the markers sit at 10:05 and 10:30, and the gap is said."""
    lines = [(at(29 - i), hf(10 * (i + 1), 2.9 - i / 20)) for i in range(5)] + [(at(15), NCCL_TIMEOUT)]
    chart = chart_of(lines)
    t = chart.time
    assert t is not None and t.stalled
    assert t.points[-1][0] == NOW - timedelta(minutes=25) == t.last_progress_at and t.now == NOW
    assert t.gap_seconds == 25 * 60 and t.gap_text == "no progress for 25 min"
    assert t.last_label == "last progress 10:05 UTC"
    fig = loss_figure(chart)
    time_ax = fig.axes[-1]
    assert time_ax.get_xlabel() == "time (UTC)" and time_ax.get_title(loc="left") == "no progress for 25 min"
    assert vline_x(time_ax, "now") == pytest.approx(mdates.date2num(NOW))
    assert vline_x(time_ax, "last progress") == pytest.approx(mdates.date2num(NOW - timedelta(minutes=25)))
    assert mdates.date2num(NOW) <= time_ax.get_xlim()[1]  # `now` is inside the axis, not cut off
    assert decoded(png(fig)).size == chart.size == (900, 990)  # loss, learning rate, time


def test_a_progressing_run_says_the_gap_neutrally() -> None:
    lines = [(at(5 - i), hf(100 + 10 * i, 2.0 - i / 20)) for i in range(5)]
    t = chart_of(lines).time
    assert t is not None and not t.stalled
    assert t.gap_text == "last progress 1 min before now" and t.last_progress_at == NOW - timedelta(minutes=1)


def test_where_no_line_has_a_time_the_chart_says_so_instead_of_inventing_an_axis() -> None:
    chart = chart_of([(None, hf(100 + 10 * i, 2.0 - i / 20)) for i in range(4)])
    assert chart.time is None and chart.time_note == NO_TIME_NOTE
    fig = loss_figure(chart)
    assert [ax.get_ylabel() for ax in fig.axes] == ["loss (as logged, unitless)", "learning rate"]  # no time axis
    assert "the log's lines carry no time" in fig.axes[-1].get_xlabel()
    assert decoded(png(fig)).size == (900, 720)


def test_an_untimed_log_unchanged_since_an_earlier_read_marks_that_time() -> None:
    """Ray's Jobs API gives no line a time; taubot's earlier read saw the same tail at 09:56 (the
    first-sighting store, LogEvidence.unchanged_since): the panel marks that time and `now`."""
    chart = chart_of([(None, hf(100 + 10 * i, 2.0 - i / 20)) for i in range(4)],
                     unchanged_since=NOW - timedelta(minutes=34))
    t = chart.time
    assert t is not None and t.points == () and t.last_progress_at == NOW - timedelta(minutes=34)
    assert t.gap_text == "log unchanged for 34 min (by taubot's earlier reads)"
    assert t.last_label == "log unchanged since 09:56 UTC"
    fig = loss_figure(chart)
    assert vline_x(fig.axes[-1], "now") == pytest.approx(mdates.date2num(NOW))
    png(fig)


def test_the_status_engine_keeps_each_progress_lines_time() -> None:
    d = diagnosed([(at(3), hf(10, 2.0)), (None, "step=20 loss=1.9"), (at(1), hf(30, 1.8))])
    assert d.progress_timeline == ProgressTimeline(
        points=[(NOW - timedelta(minutes=3), 10.0, 2.0), (NOW - timedelta(minutes=1), 30.0, 1.8)],
        last_progress_at=NOW - timedelta(minutes=1))
    assert [s for s, _ in d.loss_curve] == [10.0, 20.0, 30.0]


# --------------------------------------------------------------------------- 3. the GPU strip

def test_gpus_in_numeric_order_nodes_in_natural_order() -> None:
    util = {f"{NODE.format(10)}/{i}": 90.0 for i in (10, 2, 0, 1)}
    util |= {f"{NODE.format(9)}/{i}": 30.0 for i in (1, 0)}
    strip = gpu_strip_model(util, "r")
    assert strip is not None
    assert [(b.node[-2:], b.gpu) for b in strip.bars] == [("09", 0), ("09", 1), ("10", 0), ("10", 1),
                                                         ("10", 2), ("10", 10)]
    assert [g.label for g in strip.groups] == ["vmss000009", "vmss000010"]
    assert strip.x_label == "GPU index, by node (aks-a100-38141759-…)"
    fig = gpu_figure(strip)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "0", "1", "2", "10"]
    assert all(t.get_rotation() == 0 for t in ax.get_xticklabels())  # nothing rotated
    [nodes] = ax.child_axes  # the node names: a secondary x axis beneath the indices
    assert [t.get_text() for t in nodes.get_xticklabels()] == ["vmss000009", "vmss000010"]
    assert all(t.get_rotation() == 0 for t in nodes.get_xticklabels())
    assert decoded(png(fig)).size == (900, 450)


def test_a_gpu_the_run_holds_but_that_sent_no_sample_is_drawn_missing_never_left_out() -> None:
    """The demo's llama-ft-xid: its pod holds all 8 GPUs of …vmss000008, whose GPU 7 fell off the
    bus (Xid 79) and reports nothing; …vmss000009 reports all 8."""
    util = {f"{NODE.format(8)}/{i}": 87.0 for i in (4, 0, 3, 6, 1, 2, 5)} | {f"{NODE.format(9)}/{i}": 88.0
                                                                          for i in range(8)}
    held = {NODE.format(8): 8, NODE.format(9): 8}
    strip = gpu_strip_model(util, "llama-ft-xid", held=held, capacity=held)
    assert strip is not None and len(strip.bars) == 16
    [silent] = strip.without_data
    assert (silent.node, silent.gpu, silent.state, silent.utilization) == (NODE.format(8), 7, "missing", None)
    assert strip.title == "llama-ft-xid: GPU utilisation — 1 of 16 GPUs no data"
    fig = gpu_figure(strip)
    ax = fig.axes[0]
    patch = ax.patches[7]
    assert patch.get_hatch() == "//" and patch.get_height() == 100  # drawn across, never as 0 %
    assert [t.get_text() for t in ax.texts] == ["no data"]
    assert decoded(png(fig)).size == (900, 450)
    # Without the node's capacity the index is not known: drawn as `?`, still drawn.
    unknown = gpu_strip_model(util, "r", held=held)
    assert unknown is not None and [(b.gpu, b.index_text) for b in unknown.without_data] == [(None, "?")]


def test_blank_values_and_an_unread_node_are_no_data_not_zero() -> None:
    """A blank sentinel (None) and a value no bar can draw are `no data`; a node whose exporter
    could not be read has every GPU the run holds there drawn as missing."""
    strip = gpu_strip_model({f"{NODE.format(1)}/0": None, f"{NODE.format(1)}/1": math.nan,
                             f"{NODE.format(1)}/2": 0.0}, "r", held={NODE.format(2): 2})
    assert strip is not None
    assert [(b.gpu, b.state, b.utilization) for b in strip.bars] == [
        (0, "no data", None), (1, "no data", None), (2, "measured", 0.0), (None, "missing", None),
        (None, "missing", None)]
    # No GPU sent a sample (no exporter, no permission): no strip; the profile says why.
    assert gpu_strip_model({}, "r", held={NODE.format(2): 8}) is None and gpu_strip({}, "r") is None


def test_one_nodes_name_is_said_once_in_full_and_many_gpus_keep_legible_labels() -> None:
    one = gpu_strip_model({f"{NODE.format(1)}/{i}": 50.0 for i in range(8)}, "r")
    assert one is not None and one.x_label == f"GPU index on node {NODE.format(1)}"
    assert [g.label for g in one.groups] == [""]
    many = gpu_strip_model({f"{NODE.format(n)}/{i}": 50.0 for n in range(6) for i in range(8)}, "r")
    assert many is not None and not many.index_labels  # 48 indices would not read at 360 px
    assert all(len(g.label) <= 9 for g in many.groups) and len({g.label for g in many.groups}) == 6
    decoded(png(gpu_figure(many)))


# --------------------------------------------------------------------------- 4. file names

def test_file_names_say_the_run_the_chart_and_the_time_and_are_safe() -> None:
    assert chart_filename("ray-pretrain-live", "loss", NOW) == "ray-pretrain-live-loss-20261130T103000Z.png"
    assert chart_filename("../../etc/passwd", "gpus", NOW) == "etc-passwd-gpus-20261130T103000Z.png"
    assert chart_filename(".hidden", "loss", NOW).startswith("hidden-")
    secret = chart_filename("run HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "loss", NOW)
    assert "hf_AbCd" not in secret and "/" not in secret
    d = diagnosed([(at(2 - i), hf(10 * i, 2.0 - i / 10)) for i in range(3)])
    assert [p.filename for p in status_pictures(d, NOW, utilization={})] == [
        f"{RUN}-loss-20261130T103000Z.png", f"{RUN}-gpus-20261130T103000Z.png"]


def test_cli_writes_each_chart_under_the_run_chart_and_time_and_prints_only_those(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("".join(f"{at(10 - i)} step={200 * i} loss={2 - i / 10}\n" for i in range(1, 7)))
    charts = tmp_path / "charts"
    charts.mkdir()
    stale = charts / f"{RUN}-loss-20261130T070000Z.png"  # an earlier diagnosis's, hours before
    stale.write_bytes(b"stale")
    done = subprocess.run([sys.executable, "-m", "workers.cli", "diagnose", RUN, "--from-file",
                           str(EXAMPLES / "l7-job-running-healthy.json"), "--logs", str(log), "--now",
                           "2026-11-30T10:30:00Z", "--format", "json", "--charts", str(charts)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    path = charts / f"{RUN}-loss-20261130T103000Z.png"
    assert done.stderr.splitlines() == [f"# loss curve: {path}"]
    assert decoded(path.read_bytes()).size == (900, 720)  # the loss and its time panel
    assert stale.read_bytes() == b"stale"
    doc = json.loads(done.stdout)
    assert doc["charts"]["loss"][0] == {"step": 200.0, "loss": 1.9}


# --------------------------------------------------------------------------- 5. hostile numbers and labels

def test_a_single_point_or_only_nan_is_no_curve() -> None:
    assert loss_chart([(1.0, 2.0)], "r") is None
    assert loss_chart([(1.0, float("nan")), (2.0, float("inf"))], "r") is None


def test_hostile_steps_and_times_never_crash_and_are_left_out() -> None:
    timeline = ProgressTimeline(points=[(NOW - timedelta(minutes=3), -10.0, 2.0),
                                        (NOW - timedelta(minutes=2), 1e308, math.nan),
                                        (NOW - timedelta(minutes=1), math.inf, 1.0),
                                        (NOW, 0.0, 0.9)], last_progress_at=NOW + timedelta(minutes=5))
    chart = loss_chart_model([(-10.0, 2.0), (1e308, math.nan), (math.inf, 1.0), (0.0, 0.9)], "r",
                             timeline=timeline, now=NOW, stalled=True)
    assert chart is not None and chart.loss is not None and list(chart.loss.xs) == [-10.0, 0.0]
    assert chart.time is not None and [y for _, y in chart.time.points] == [-10.0, 0.0]
    assert chart.time.gap_text == "no progress for 0 s"  # a line stamped after now: never a negative gap
    decoded(png(loss_figure(chart)))


def test_learning_rate_beneath_the_loss_from_hf_dicts_and_megatron_lines() -> None:
    """transformers 4.46 ProgressCallback.on_log dicts and Megatron-LM training_log lines (reference
    training-logs.md) state the learning rate; it is drawn beneath the loss on the same step axis."""
    hf_rates = parse_progress([(None, f"{{'loss': {2 - i / 10}, 'grad_norm': 1.2, 'learning_rate': {i * 1e-5}, "
                                      f"'epoch': {i / 10}}}") for i in range(1, 6)])
    assert hf_rates.rates == [(None, i * 1e-5) for i in range(1, 6)]
    megatron = parse_progress([(None, f" iteration {i * 100}/ 1000 | consumed samples: {i * 800} | "
                                      f"learning rate: 3.000E-04 | lm loss: {5 - i / 4:.6E} |")
                               for i in range(1, 4)])
    assert megatron.rates == [(100.0, 3e-4), (200.0, 3e-4), (300.0, 3e-4)]
    both = decoded(loss_chart([(None, 2 - i / 10) for i in range(1, 6)], "r", lr_curve=hf_rates.rates))
    assert both.size == (900, 720)
    assert decoded(loss_chart([(1.0, 2.0), (2.0, 1.5)], "r", lr_curve=[(1.0, 1e-4)])).size == (900, 450)
    chart = loss_chart_model([(100.0, 2.0), (200.0, 1.5)], "r", lr=megatron.rates)
    assert chart is not None and chart.shared_step_axis
    fig = loss_figure(chart)
    assert fig.axes[0].get_xlabel() == "" and fig.axes[1].get_xlabel().startswith("training step")
    png(fig)


def test_outside_text_in_chart_labels_is_cleaned_and_never_parsed_as_tex() -> None:
    """Issue 34: node names and metric labels come from outside; a `$…$` pair would be parsed by
    matplotlib's mathtext (an unbalanced one raises), a secret must not be drawn."""
    assert label("gpu-a3/$\\frac{1}{0$") == "gpu-a3/\\$\\frac{1}{0\\$"
    assert "hf_" not in label("node HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789")
    data = gpu_strip({"gpu-$a3/0": 90.0, "gpu-a3/1\x1b[31m$": 10.0}, "run-$x$")
    assert data is not None and data.startswith(b"\x89PNG")
