"""Reading training progress out of a log: pure, and driven by a table of real formats.

Why a table: every framework prints progress its own way, and hang and crash
signatures are fixed strings of PyTorch, NCCL and the Python runtime. Each
row names the format and where it comes from (shared/reference/training-logs.md
quotes them), so a new format is one row. Lines are split on `\\r` as well
as newlines by the log readers (tqdm and Lightning redraw bars with `\\r`).

The output is facts, not a verdict: the last step and loss, the loss trend,
when progress was last seen, the last checkpoint, and the signature found.
`workers/diagnosis/runtime.py` turns them into the Runtime progress check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from .timeutil import parse_time

Owner = Literal["researcher", "node-pool-owner"]


@dataclass(frozen=True)
class ProgressFormat:
    name: str
    source: str
    regex: re.Pattern[str]
    step_group: str | None = None
    loss_group: str | None = None
    needle: str = ""  # a substring every match contains: a cheap test before the regex


@dataclass(frozen=True)
class Signature:
    name: str
    source: str
    regex: re.Pattern[str]
    kind: Literal["hang", "crash"]
    summary: str


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_NUM = r"[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf)"

PROGRESS: tuple[ProgressFormat, ...] = (
    ProgressFormat("Hugging Face Trainer log dict",
                   "transformers 4.46 trainer_callback.py ProgressCallback.on_log (str(dict))",
                   _re(r"""^\s*\{.*['"]loss['"]\s*:\s*(?P<loss>""" + _NUM
                       + r""").*['"](?:epoch|step)['"]\s*:(?:.*['"]step['"]\s*:\s*(?P<step>\d+))?"""),
                   "step", "loss", "loss"),
    ProgressFormat("Megatron-LM iteration line", "epfLLM/Megatron-LLM#11 training log",
                   _re(r"\biteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|(?:.*\blm loss:\s*(?P<loss>"
                       + _NUM + r"))?"),
                   "step", "loss", "iteration"),
    ProgressFormat("PyTorch Lightning / tqdm bar", "tqdm std.py r_bar; lightning 2.4 tqdm_progress.py",
                   _re(r"(?P<step>\d+)/(?P<total>\d+)\s*\[(?:[^\]]*?\bloss=(?P<loss>" + _NUM
                       + r"))?[^\]]*\]"),
                   "step", "loss", "["),
    ProgressFormat("step= / global_step= key-value", "NeMo/Lightning postfix, generic training loops",
                   _re(r"\b(?:global_step|step)\s*[=:]\s*(?P<step>\d+(?:\.\d+)?(?:e\+?\d+)?)"
                       r"(?:.*?\bloss\s*[=:]\s*(?P<loss>" + _NUM + r"))?"),
                   "step", "loss", "step"),
    ProgressFormat("iteration N", "generic training loops", _re(r"\biteration\s+(?P<step>\d+)\b"), "step",
                   None, "iteration"),
    ProgressFormat("loss value", "generic training loops", _re(r"\bloss\s*[=:]\s*(?P<loss>" + _NUM + r")\b"),
                   None, "loss", "loss"),
)

CHECKPOINTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Hugging Face Trainer", _re(r"Saving model checkpoint to (?P<path>\S+)")),
    ("Lightning ModelCheckpoint", _re(r"saving model to '(?P<path>[^']+)'")),
    ("generic", _re(r"(?:saved|saving|wrote) checkpoint[^\n]*?(?P<path>\S*checkpoint[-_]\d+\S*)")),
)

SIGNATURES: tuple[Signature, ...] = (
    Signature("NCCL watchdog timeout", "pytorch c10d ProcessGroupNCCL.cpp (hiyouga/LlamaFactory#7396)",
              _re(r"Watchdog caught collective operation timeout"), "hang",
              "NCCL watchdog timeout: a collective hung"),
    Signature("NCCL heartbeat monitor", "pytorch c10d ProcessGroupNCCL.cpp (pytorch/pytorch PR #116268)",
              _re(r"Heartbeat monitor timed out|watchdog got stuck for \d+ seconds"), "hang",
              "NCCL heartbeat monitor: the watchdog itself hung"),
    Signature("faulthandler dump", "Python faulthandler.dump_traceback_later (pytorch/pytorch PR #54818)",
              _re(r"^Timeout \(\d+:\d\d:\d\d\)!|"
                  r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\)"),
              "hang", "faulthandler dumped the stacks of a hung process"),
    Signature("CUDA out of memory", "torch.cuda.OutOfMemoryError (pytorch/pytorch#16417)",
              _re(r"CUDA out of memory"), "crash", "CUDA out of memory"),
    Signature("DataLoader worker killed", "torch.utils.data (pytorch/pytorch#108861)",
              _re(r"DataLoader worker \(pid \d+\) is killed by signal"), "crash",
              "a DataLoader worker was killed (shared memory or OOM)"),
    Signature("Python fatal error", "CPython faulthandler", _re(r"^Fatal Python error: "), "crash",
              "the Python process died (fatal error)"),
    Signature("torchrun child failed", "torch.distributed.elastic (showlab/EgoVLP#21)",
              _re(r"ChildFailedError|elastic\.multiprocessing\.api:failed \(exitcode"), "crash",
              "a torchrun worker process failed"),
)
# One pass over a line first: most lines match no signature and no checkpoint, and a single
# alternation is several times cheaper than trying each row (bench/bench_progress.py).
_ANY_SIGNATURE = re.compile("|".join(f"(?:{s.regex.pattern})" for s in SIGNATURES), re.IGNORECASE)
_ANY_CHECKPOINT = re.compile(r"checkpoint|saving model", re.IGNORECASE)
_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")
TRACEBACK_WINDOW = 40


@dataclass
class Found:
    signature: str
    kind: Literal["hang", "crash"]
    summary: str
    line: str
    at: datetime | None


@dataclass
class Progress:
    """What a log says about progress."""

    lines: int = 0
    recognised: int = 0
    last_step: float | None = None
    losses: list[float] = field(default_factory=list)
    last_progress_at: datetime | None = None
    last_line_at: datetime | None = None
    first_line_at: datetime | None = None
    last_checkpoint: str | None = None
    checkpoint_at: datetime | None = None
    found: Found | None = None
    formats: list[str] = field(default_factory=list)

    @property
    def last_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    def trend(self) -> str | None:
        """falling / rising / flat over the last points (at least 3), or None."""
        points = [x for x in self.losses[-10:] if x == x and abs(x) != float("inf")]
        if len(points) < 3:
            return None
        half = len(points) // 2
        before, after = sum(points[:half]) / half, sum(points[half:]) / (len(points) - half)
        if abs(after - before) <= 0.01 * max(abs(before), 1e-9):
            return "flat"
        return "falling" if after < before else "rising"


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_progress(lines: Iterable[tuple[str | None, str]]) -> Progress:
    """Fold (time, text) lines, oldest first, into `Progress`."""
    out = Progress()
    tail: list[tuple[datetime | None, str]] = []
    for stamp, text in lines:
        at = parse_time(stamp) if stamp else None
        out.lines += 1
        if at is not None:
            out.first_line_at = out.first_line_at or at
            out.last_line_at = at
        tail.append((at, text))
        if len(tail) > TRACEBACK_WINDOW:
            tail.pop(0)
        if _ANY_SIGNATURE.search(text):
            sig = next(sig for sig in SIGNATURES if sig.regex.search(text))
            out.found = Found(sig.name, sig.kind, sig.summary, text.strip()[:300], at)
        if _ANY_CHECKPOINT.search(text):
            for _label, regex in CHECKPOINTS:
                match = regex.search(text)
                if match:
                    out.last_checkpoint = match.group("path").rstrip(".,'\"")
                    out.checkpoint_at = at
                    break
        lowered = text.lower()
        for fmt in PROGRESS:
            if fmt.needle not in lowered:
                continue
            match = fmt.regex.search(text)
            if match is None:
                continue
            step = _number(match.group(fmt.step_group)) if fmt.step_group else None
            loss = _number(match.group(fmt.loss_group)) if fmt.loss_group else None
            if step is None and loss is None and fmt.step_group != "step":
                continue
            out.recognised += 1
            if fmt.name not in out.formats:
                out.formats.append(fmt.name)
            if step is not None:
                advanced = out.last_step is None or step != out.last_step
                out.last_step = step
            else:
                advanced = True
            if loss is not None:
                out.losses.append(loss)
            if advanced and at is not None:
                out.last_progress_at = at
            break
    # A traceback among the last lines, ending in an exception line: the process crashed.
    if out.found is None or out.found.kind != "hang":
        for i, (at, text) in enumerate(tail):
            if _TRACEBACK.match(text.strip()):
                last = next((t for _, t in reversed(tail[i:]) if t.strip()), "")
                if _EXCEPTION_LINE.match(last.strip()):
                    crash = out.found if out.found and out.found.kind == "crash" else None
                    out.found = crash or Found("traceback", "crash",
                                               f"the process crashed: {last.strip()[:160]}",
                                               last.strip()[:300], at)
                break
    return out


def sparkline(values: list[float]) -> str:
    """▁▂▃▅▇ of the last points (at least 5), scaled to their own range."""
    points = [v for v in values if v == v and abs(v) != float("inf")][-20:]
    if len(points) < 5:
        return ""
    bars = "▁▂▃▄▅▆▇█"
    low, high = min(points), max(points)
    span = (high - low) or 1.0
    return "".join(bars[min(7, int((v - low) / span * 7.999))] for v in points)


__all__ = ["CHECKPOINTS", "PROGRESS", "SIGNATURES", "Found", "Progress", "parse_progress", "sparkline"]
