"""The per-GPU utilisation strip from `--run-profile`: the run's own GPUs only, a blank value as
`no data` (never 0 %), drawn as a PNG that decodes (dcgm-exporter shapes: tests/fixtures/dcgm.py)."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from tests.fixtures.dcgm import exporter_pod, scrape
from workers.render.charts import gpu_strip

from .test_profile import NODE_A, job_run, live, mine, other_team, register


async def test_strip_holds_the_runs_gpus_only(tmp_path: Path) -> None:
    _, pod, objs = job_run()
    exp = exporter_pod(NODE_A)
    objs.append(exp)
    body = scrape([mine(pod, 0, 87, 40000, NODE_A), mine(pod, 1, None, 0, NODE_A), other_team(2, NODE_A)],
                  hostname=NODE_A)
    result, _ = await live(objs, tmp_path, "train", setup=lambda emu: register(emu, exp, body))
    assert result.profile is not None
    assert result.profile.per_gpu_utilization == {f"{NODE_A}/0": 87.0, f"{NODE_A}/1": None}
    image = Image.open(io.BytesIO(gpu_strip(result.profile.per_gpu_utilization, "train") or b""))
    image.load()
    assert image.size == (900, 450)
