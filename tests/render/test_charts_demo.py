"""The demo's statuses draw what a hang and a lost GPU look like (issue 38, Build item 5), read live
from the demo cluster in process (the Kubernetes API emulator with the demo's Nodes, dcgm-exporter
`/metrics` and kubelet-stamped logs: shell/demo_cluster.py, bench/make_examples.py); and the
terminal surface gives each status's pictures a fresh folder of their own."""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from PIL import Image

from shell.demo_cluster import FAULTY_NODE, GPU_NODE, IDENTITY, START, DemoCluster, demo_cluster
from workers.cli.charts import write_charts
from workers.collect.investigate import diagnose_live
from workers.collect.report import RunReport
from workers.config.workspaces import load_descriptors
from workers.contracts.identity import Identity
from workers.flows.status import pictures
from workers.render.chart_model import GpuStrip, LossChart
from workers.render.charts import gpu_figure, loss_figure, png
from workers.surfaces.terminal import TerminalSurface


@pytest.fixture(scope="module")
def demo() -> Iterator[DemoCluster]:
    with demo_cluster() as cluster:
        yield cluster


async def status(demo: DemoCluster, run: str) -> RunReport:
    """What `/tau status <run> --run-profile` reads in the demo, as its user, at the demo's start."""
    return await diagnose_live(load_descriptors(demo.workspaces_dir), run=run,
                               identity=Identity(user=IDENTITY["user"], groups=tuple(IDENTITY["groups"])),
                               now=START, workspace="vision", profile=True)


def decoded(data: bytes | None) -> Image.Image:
    assert data is not None
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


async def test_llama_ft_xid_draws_the_gpu_that_fell_off_the_bus(demo: DemoCluster) -> None:
    """Its pod holds all 8 GPUs of the node with Xid 79; the exporter there reports 7: GPU 7 is
    drawn as missing (`no data`), between the node's GPU 6 and the next node's GPU 0."""
    live = await status(demo, "llama-ft-xid")
    assert live.profile is not None and len(live.profile.per_gpu_utilization) == 15
    [loss, gpus] = pictures(live, START)
    assert (gpus.what, gpus.filename) == ("GPU utilisation strip", "llama-ft-xid-gpus-20261130T103000Z.png")
    strip = gpus.model
    assert isinstance(strip, GpuStrip)
    assert [(b.node, b.gpu) for b in strip.bars] == [(FAULTY_NODE, i) for i in range(8)] + [
        (GPU_NODE.format(9), i) for i in range(8)]
    [silent] = strip.without_data
    assert (silent.node, silent.gpu, silent.state) == (FAULTY_NODE, 7, "missing")
    assert [g.label for g in strip.groups] == ["vmss000008", "vmss000009"]
    fig = gpu_figure(strip)
    assert fig.axes[0].patches[7].get_hatch() == "//"
    assert decoded(png(fig)).size == (900, 450)
    assert decoded(gpus.draw()).size == strip.size
    assert isinstance(loss.model, LossChart) and loss.model.time is not None


async def test_ray_pretrain_live_plots_steps_and_marks_its_last_progress_and_now(demo: DemoCluster) -> None:
    """KubeRay's submitter log carries the driver's HF dicts (`'step': N`) with the kubelet's
    stamps: the loss is drawn against the step, and the time panel marks 10:29 and 10:30."""
    live = await status(demo, "ray-pretrain-live")
    [loss, _gpus] = pictures(live, START)
    chart = loss.model
    assert isinstance(chart, LossChart) and chart.loss is not None
    assert chart.loss.by_step and list(chart.loss.xs) == [float(s) for s in range(100, 290, 10)]
    t = chart.time
    assert t is not None and not t.stalled
    assert t.last_progress_at == START - timedelta(minutes=1) and t.now == START
    assert t.gap_text == "last progress 1 min before now"
    fig = loss_figure(chart)
    assert fig.axes[0].lines[0].get_xdata()[0] == 100.0
    assert fig.axes[-1].get_xlabel() == "time (UTC)"
    assert decoded(png(fig)).size == chart.size == (900, 990)


async def test_cli_charts_of_a_live_profile_draw_the_missing_gpu_too(demo: DemoCluster, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`taubot diagnose llama-ft-xid --workspace vision --run-profile --charts DIR`: the strip the CLI
    writes has the silent GPU as the status's has (the run's pods and the Nodes it read)."""
    live = await status(demo, "llama-ft-xid")
    write_charts(argparse.Namespace(charts=str(tmp_path)), live.diagnosis, START, profile=live.profile,
                 linked=live.linked, objects=live.objects)
    gpus = tmp_path / "llama-ft-xid-gpus-20261130T103000Z.png"
    assert capsys.readouterr().err.splitlines() == [
        f"# loss curve: {tmp_path / 'llama-ft-xid-loss-20261130T103000Z.png'}", f"# GPU utilisation strip: {gpus}"]
    image = decoded(gpus.read_bytes()).convert("RGB")
    assert image.size == (900, 450)
    colours = {colour: count for count, colour in image.getcolors(maxcolors=900 * 450) or []}
    grey = colours.get((200, 200, 200), 0)  # MISSING_GREY, #c8c8c8
    assert grey > 1000  # the silent GPU's bar, drawn across the axis


async def test_resnet_hang_says_no_progress_since_its_last_step(demo: DemoCluster) -> None:
    live = await status(demo, "resnet-hang")
    chart = pictures(live, START)[0].model
    assert isinstance(chart, LossChart) and chart.time is not None
    assert chart.time.stalled and chart.time.gap_text == "no progress for 25 min"


def test_each_status_writes_its_pictures_into_a_fresh_folder_of_its_own(tmp_path: Path) -> None:
    """Never one shared folder under fixed names: a picture left from hours before, under the same
    name, is never the path printed for the new one."""
    out: list[str] = []
    surface = TerminalSurface(out.append, files_dir=tmp_path)
    stale = tmp_path / "r-loss-20261130T103000Z.png"
    stale.write_bytes(b"old")
    first = surface.upload_image("C1", "1.000000", "r-loss-20261130T103000Z.png", b"one", "r: loss curve")
    again = surface.upload_image("C1", "1.000000", "r-gpus-20261130T103000Z.png", b"two", "r: GPU strip")
    second = surface.upload_image("C1", "2.000000", "r-loss-20261130T103000Z.png", b"three", "r: loss curve")
    escaping = surface.upload_image("C1", "3.000000", "../../x.png", b"four", "r: loss curve")
    paths = [Path(str(p)) for p in (first, again, second, escaping)]
    assert paths[0].parent == paths[1].parent != paths[2].parent  # one folder per status
    assert all(p.parent.parent == tmp_path and p.parent.name.startswith("status-") for p in paths)
    assert paths[3].name == "x.png" and paths[3].read_bytes() == b"four"
    assert stale.read_bytes() == b"old" and paths[0].read_bytes() == b"one" and paths[2].read_bytes() == b"three"
    assert out[0] == f"    🖼 r: loss curve: {paths[0]}\n"
    fresh = TerminalSurface(out.append)  # no folder given: a fresh temporary one per surface
    made = Path(str(fresh.upload_image("C1", "1.000000", "r-loss.png", b"x", "r: loss curve")))
    try:
        assert made.parent.parent.name.startswith("taubot-charts-") and made.parent.parent != tmp_path
    finally:
        made.unlink()
        made.parent.rmdir()
        made.parent.parent.rmdir()
