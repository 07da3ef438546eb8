"""The status's pictures: PNGs that decode, at a size Slack previews legibly, None when no curve."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from PIL import Image

from tests.diagnosis.test_progress import EXAMPLES, at
from workers.render.charts import gpu_strip, label, loss_chart


def decoded(png: bytes | None) -> Image.Image:
    assert png is not None
    image = Image.open(io.BytesIO(png))
    image.load()  # decodes every byte: a truncated PNG fails here
    return image


def test_loss_curve_decodes_at_preview_size() -> None:
    image = decoded(loss_chart([(10.0 * i, 2.5 - i / 50) for i in range(60)], "resnet-sweep-3"))
    assert image.format == "PNG" and image.size == (900, 450)


def test_a_single_point_or_only_nan_is_no_curve() -> None:
    assert loss_chart([(1.0, 2.0)], "r") is None
    assert loss_chart([(1.0, float("nan")), (2.0, float("inf"))], "r") is None


def test_gpu_strip_draws_blank_gpus_as_no_data() -> None:
    strip = gpu_strip({"gpu-node-0/0": 97.0, "gpu-node-0/1": None, "gpu-node-1/0": 0.0}, "r")
    assert decoded(strip).size == (900, 450)
    assert gpu_strip({}, "r") is None


def test_cli_writes_the_loss_curve_and_prints_its_path(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("".join(f"{at(10 - i)} step={200 * i} loss={2 - i / 10}\n" for i in range(1, 7)))
    done = subprocess.run([sys.executable, "-m", "workers.cli", "diagnose", "resnet-sweep-3", "--from-file",
                           str(EXAMPLES / "l7-job-running-healthy.json"), "--logs", str(log), "--now",
                           "2026-11-30T10:30:00Z", "--format", "json", "--charts", str(tmp_path / "charts")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "charts" / "resnet-sweep-3-loss.png"
    assert f"# loss curve: {path}" in done.stderr
    assert decoded(path.read_bytes()).size == (900, 450)
    doc = json.loads(done.stdout)
    assert doc["charts"]["loss"][0] == {"step": 200.0, "loss": 1.9}
    assert doc["eta"]["unavailable"] == "the log states no total step count"


def test_learning_rate_beneath_the_loss_from_hf_dicts_and_megatron_lines() -> None:
    """transformers 4.46 ProgressCallback.on_log dicts and Megatron-LM training_log lines (reference
    training-logs.md) state the learning rate; it is drawn beneath the loss on the same step axis."""
    from workers.diagnosis.progress import parse_progress

    hf = parse_progress([(None, f"{{'loss': {2 - i / 10}, 'grad_norm': 1.2, 'learning_rate': {i * 1e-5}, "
                                f"'epoch': {i / 10}}}") for i in range(1, 6)])
    assert hf.rates == [(None, i * 1e-5) for i in range(1, 6)]
    megatron = parse_progress([(None, f" iteration {i * 100}/ 1000 | consumed samples: {i * 800} | "
                                      f"learning rate: 3.000E-04 | lm loss: {5 - i / 4:.6E} |")
                               for i in range(1, 4)])
    assert megatron.rates == [(100.0, 3e-4), (200.0, 3e-4), (300.0, 3e-4)]
    both = decoded(loss_chart([(None, 2 - i / 10) for i in range(1, 6)], "r", lr_curve=hf.rates))
    assert both.size == (900, 720)
    assert decoded(loss_chart([(1.0, 2.0), (2.0, 1.5)], "r", lr_curve=[(1.0, 1e-4)])).size == (900, 450)


def test_outside_text_in_chart_labels_is_cleaned_and_never_parsed_as_tex() -> None:
    """Issue 34: node names and metric labels come from outside; a `$…$` pair would be parsed by
    matplotlib's mathtext (an unbalanced one raises), a secret must not be drawn."""
    assert label("gpu-a3/$\\frac{1}{0$") == "gpu-a3/\\$\\frac{1}{0\\$"
    assert "hf_" not in label("node HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789")
    png = gpu_strip({"gpu-$a3/0": 90.0, "gpu-a3/1\x1b[31m$": 10.0}, "run-$x$")
    assert png is not None and png.startswith(b"\x89PNG")
