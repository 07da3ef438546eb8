"""`--charts DIR` of `taubot diagnose`: the status's pictures as PNG files whose paths are printed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workers.diagnosis.models import Diagnosis

from .errors import UsageError


def write_charts(args: argparse.Namespace, d: Diagnosis, gpus: dict[str, float | None] | None = None) -> None:
    """``--charts DIR``: the loss curve (and, live with --run-profile, the per-GPU utilisation
    strip) as PNG files; each path goes to stderr, so stdout stays the answer (text or JSON)."""
    directory = getattr(args, "charts", None)
    if not directory:
        return
    from workers.render.charts import gpu_strip, loss_chart  # matplotlib only when asked

    run = d.run.name
    pictures = [("loss curve", f"{run}-loss.png", loss_chart(d.loss_curve, run, lr_curve=d.lr_curve))]
    if gpus is not None:
        pictures.append(("GPU utilisation strip", f"{run}-gpus.png", gpu_strip(gpus, run)))
    for what, filename, png in pictures:
        if png is None:
            print(f"# {what}: not drawn (too few points)", file=sys.stderr)
            continue
        path = Path(directory) / filename
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png)
        except OSError as exc:
            raise UsageError(f"cannot write --charts {path}: {exc.strerror or exc}") from None
        print(f"# {what}: {path}", file=sys.stderr)


__all__ = ["write_charts"]
