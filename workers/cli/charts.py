"""`--charts DIR` of `taubot diagnose`: the status's pictures as PNG files whose paths are printed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from workers.diagnosis.linkage import RunObjects
from workers.diagnosis.models import Diagnosis
from workers.diagnosis.profile import GpuProfile, gpu_capacity, gpus_held
from workers.render.charts import status_pictures  # matplotlib itself only when a picture is drawn

from .errors import UsageError


def write_charts(args: argparse.Namespace, d: Diagnosis, now: datetime, *, profile: GpuProfile | None = None,
                 linked: RunObjects | None = None, objects: Iterable[dict] = ()) -> None:
    """``--charts DIR``: the loss curve (with its time panel up to ``now``, the diagnosis's time)
    and, live with --run-profile, the per-GPU strip (a GPU the run's pods hold that sent no sample
    drawn missing), as PNG files named for the run, the chart and ``now``
    (`resnet-sweep-3-loss-20261130T103000Z.png`): a picture of an earlier diagnosis in DIR never
    passes for this one, and only the paths written now are printed. Each path goes to stderr, so
    stdout stays the answer (text or JSON)."""
    directory = getattr(args, "charts", None)
    if not directory:
        return
    if profile is None:
        pictures = status_pictures(d, now)
    else:
        held = gpus_held(linked.pods) if linked is not None else {}
        pictures = status_pictures(d, now, utilization=profile.per_gpu_utilization, held=held,
                                   capacity=gpu_capacity(objects))
    for picture in pictures:
        png = picture.draw()
        if png is None:
            print(f"# {picture.what}: not drawn (too few points)", file=sys.stderr)
            continue
        path = Path(directory) / picture.filename
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png)
        except OSError as exc:
            raise UsageError(f"cannot write --charts {path}: {exc.strerror or exc}") from None
        print(f"# {picture.what}: {path}", file=sys.stderr)


__all__ = ["write_charts"]
