"""Reading training progress out of a log: pure, and driven by a table of real formats.

Why a table: every framework prints progress its own way, and hang and crash
signatures are fixed strings of PyTorch, NCCL and the Python runtime. Each
row names the format and where it comes from (shared/reference/training-logs.md
quotes them), so a new format is one row.

Real logs, as SPEC §11 has them: a kubelet line (one timestamp) can hold many
`\\r`-separated tqdm/Lightning redraws, and every segment keeps that line's
time; before matching, ANSI codes and the prefixes that launchers and loggers
put in front of a line (Ray's `(Name pid=N, ip=…)`, torchrun's `[rankN]:`,
`[INFO|trainer.py:3705] … >>`) are stripped — kept for display only. A crash is
the last traceback's exception line when nothing advanced after it (framework
hint lines, tqdm's final redraw and the launcher's summary may follow), or a
final error line that names the failure.

The output is facts, not a verdict: the last step and loss, the loss trend,
when progress was last seen, the last checkpoint, and the signature found.
`workers/diagnosis/progress_checks.py` turns them into the Runtime progress check.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, NamedTuple

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
    exclude: re.Pattern[str] | None = None  # lines of this shape that are not training progress


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
                   "transformers 4.46 trainer_callback.py ProgressCallback.on_log (str(dict)); "
                   "transformers 5 prints the values as strings ({'loss': '5.391', …}, reference §2.7)",
                   # Keys in any order (lookaheads): a greedy `.*` before `epoch|step` used to eat the
                   # `'step': N` it was meant to capture, so no HF dict ever gave a step (issue 38.7).
                   # `'global_step': N` too (a callback's own dict; the checkpoint dirs are named by it).
                   _re(r"""^\s*\{(?=.*['"]loss['"]\s*:\s*['"]?(?P<loss>""" + _NUM
                       + r""")['"]?\s*[,}])(?=.*['"](?:epoch|(?:global_)?step)['"]\s*:)"""
                       + r"""(?:(?=.*['"](?:global_)?step['"]\s*:\s*['"]?(?P<step>\d+)))?"""),
                   "step", "loss", "loss"),
    ProgressFormat("Megatron-LM iteration line", "epfLLM/Megatron-LLM#11 training log",
                   _re(r"\biteration\s+(?P<step>\d+)\s*/\s*(?P<total>\d+)\s*\|(?:.*\blm loss:\s*(?P<loss>"
                       + _NUM + r"))?"),
                   "step", "loss", "iteration"),
    ProgressFormat("PyTorch Lightning / tqdm bar", "tqdm std.py r_bar; lightning 2.4 tqdm_progress.py",
                   _re(r"(?P<step>\d+)/(?P<total>\d+)\s*\[(?:[^\]]*?\bloss=(?P<loss>" + _NUM
                       + r"))?[^\]]*\]"),
                   "step", "loss", "[",
                   # Bars of other work: transformers 5's nested `Writing model shards` bar at each
                   # checkpoint (reference §2.7), loading, data maps, evaluation and validation loops.
                   _re(r"^\s*(?:Writing|Loading|Saving)\b[^|]*shards|^\s*(?:Map|Filter|Tokeniz|Download|Fetch|"
                       r"Generat|Evaluat|Validat|Predict|Test|Sanity Checking)")),
    ProgressFormat("PyTorch Lightning rich bar",
                   "lightning 2.6 RichProgressBar, its one frame without a terminal (reference §2.7)",
                   _re(r"^Epoch \d+/\d+\s+[━╸╺\s]*\s(?P<step>\d+)/\d+\s+[\d:]+ • [\d:-]+"
                       r"(?:.*?\bloss:\s*(?P<loss>" + _NUM + r"))?"),
                   "step", "loss", "epoch"),
    ProgressFormat("step= / global_step= key-value", "NeMo/Lightning postfix, generic training loops",
                   _re(r"\b(?:global_step|step)\s*[=:]\s*(?P<step>\d+(?:\.\d+)?(?:e\+?\d+)?)"
                       r"(?:.*?\bloss\s*[=:]\s*(?P<loss>" + _NUM + r"))?"),
                   "step", "loss", "step"),
    ProgressFormat("iteration N", "generic training loops",  # `Iteration 500: loss=1.6` gives both
                   _re(r"\biteration\s+(?P<step>\d+)\b(?:.*?\bloss\s*[=:]\s*(?P<loss>" + _NUM + r"))?"),
                   "step", "loss", "iteration"),
    ProgressFormat("loss value", "generic training loops", _re(r"\bloss\s*[=:]\s*(?P<loss>" + _NUM + r")\b"),
                   None, "loss", "loss"),
)

CHECKPOINTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Hugging Face Trainer", _re(r"Saving model checkpoint to (?P<path>\S+)")),
    # transformers 5 step checkpoints log only these (reference §2.7); the checkpoint is the directory.
    ("Hugging Face Trainer (transformers 5)",
     _re(r"(?:Configuration|Model weights|tokenizer config file|Special tokens file|chat template) saved in "
         r"(?P<path>\S*?checkpoint-\d+)(?:/|\s|$)")),
    ("Lightning ModelCheckpoint", _re(r"saving model to '(?P<path>[^']+)'")),
    ("TensorFlow", _re(r"Saving checkpoints? for \d+ into (?P<path>\S+)")),
    # Home-made loops: any save line naming a path (`saved checkpoint …/ckpt_step200.pt`).
    ("generic", _re(r"\b(?:saved|saving|wrote|writing)\b[^\n]*?checkpoint[^\n]*?"
                    r"(?P<path>(?:[\w.~-]*/)+[\w.=-]+)")),
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
    # torch >= 2.2 logs it through its own logger: `E1201 20:22:25.388000 27635 torch/distributed/
    # elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 3 (pid: 27711) of binary:
    # …` (recorded: tests/fixtures/logs/real/torchrun-rank-traceback.log; torch 2.13 api.py).
    Signature("torchrun worker failed", "torch 2.13 elastic/multiprocessing/api.py (recorded run)",
              _re(r"\bfailed \(exitcode: -?\d+\) local_rank: \d+ \(pid: \d+\) of binary"), "crash",
              "a torchrun worker process failed"),
    # The ChildFailedError summary read without its header line (a tail cut above it): the block's
    # `Root Cause (first observed failure):` heading (torch elastic errors/__init__.py; recorded run).
    Signature("torchrun root cause", "torch elastic ChildFailedError summary (recorded run)",
              _re(r"^Root Cause \(first observed failure\):"), "crash", "a torchrun worker process failed"),
    # NCCL's own error codes as PyTorch raises them: `NCCL error in: …ProcessGroupNCCL.cpp:1970,
    # unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5` /
    # `ncclUnhandledCudaError: Call to CUDA function failed.` (NVIDIA/nccl src/init.cc
    # ncclGetErrorString; pastes in docs/reference/training-logs-ranks.md) and the older
    # `RuntimeError: NCCL Error 2: unhandled system error`.
    Signature("NCCL error", "NVIDIA/nccl src/init.cc ncclGetErrorString; torch NCCLUtils.hpp",
              _re(r"\bnccl(?:UnhandledCudaError|SystemError|InternalError|InvalidUsage|RemoteError)\b|"
                  r"\bNCCL Error \d+:|\bNCCL error in: |NCCL communicator was aborted"), "crash",
              "an NCCL error ended the collective"),
    # Ray's exceptions as the driver prints them, often with no `Traceback` line above (a tail, or
    # Ray's own formatting): `ray.exceptions.RayTaskError(RuntimeError): ray::main_task() (pid=7773,
    # ip=172.17.0.2)`, `ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing
    # this task.` (ray 2.60 python/ray/exceptions.py; pastes in docs/reference/training-logs-ranks.md).
    Signature("Ray task error", "ray 2.60 python/ray/exceptions.py RayTaskError",
              _re(r"^(?:ray\.exceptions\.)?RayTaskError(?:\(\w+\))?: "), "crash", "a Ray task failed"),
    Signature("Ray actor died", "ray 2.60 python/ray/exceptions.py ActorDiedError",
              _re(r"^(?:ray\.exceptions\.)?(?:ActorDiedError|RayActorError|ActorUnavailableError): "),
              "crash", "a Ray actor died"),
    # The raylet's report of a dead worker: it names the worker's IP, no rank (ray src/ray/raylet/
    # node_manager.cc: `A worker died or was killed while executing a task by an unexpected system
    # error. … Worker IP address: 33.137.92.88 Worker port: … Worker PID: …`).
    Signature("Ray worker died", "ray src/ray/raylet/node_manager.cc (raylet)",
              _re(r"A worker died or was killed while executing a task"), "crash",
              "a Ray worker process died"),
    Signature("segmentation fault", "glibc/absl signal handlers (`*** SIGSEGV received at time=…`)",
              _re(r"^\*\*\* SIG(?:SEGV|BUS|ABRT|FPE|ILL) received at time=|^Segmentation fault\b"), "crash",
              "the process died of a signal"),
)
LAUNCHERS = frozenset({"torchrun child failed", "torchrun worker failed",
                       "torchrun root cause"})  # signatures that only say "a worker failed"
# One pass over a line first: most lines match no signature and no checkpoint, and a single
# alternation is several times cheaper than trying each row (bench/bench_progress.py).
_ANY_SIGNATURE = re.compile("|".join(f"(?:{s.regex.pattern})" for s in SIGNATURES), re.IGNORECASE)
# The run's total steps when a line states it (tqdm and Megatron state it in the progress line
# itself): HF Trainer's `  Total optimization steps = {max_steps:,}` (trainer.py), Lightning's
# `max_steps=N` (Trainer arguments echoed, and "`max_steps=N` reached.").
_TOTAL = _re(r"Total optimization steps\s*=\s*(?P<total>[\d,]+)|\bmax_steps\s*[=:]\s*(?P<max>\d+)")
POINTS_KEPT = 500  # (time, step, loss) of the last progress lines, for the ETA and the curve
# The learning rate a progress line states: HF Trainer's log dict `'learning_rate': 4e-05`
# (transformers trainer.py `_maybe_log_save_evaluate`; transformers 5 quotes the value) and
# Megatron-LM's `learning rate: 3.000E-04 |` (training.py training_log).
_LEARNING_RATE = _re(r"""['"]learning_rate['"]\s*:\s*['"]?(?P<hf>""" + _NUM
                     + r""")|\blearning rate:\s*(?P<mg>""" + _NUM + r")")
_ANY_CHECKPOINT = re.compile(r"checkpoint|saving model", re.IGNORECASE)
# Anywhere in the line: a traceback can start glued to an unfinished bar (`…it/s]Traceback (most…`).
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failure)\b")
# The launcher's own wrapper around a worker's failure: the worker's exception names the cause.
_LAUNCHER_EXCEPTION = re.compile(r"ChildFailedError|elastic\.multiprocessing", re.IGNORECASE)
# CPython's emergency dump when stderr itself broke (a DataLoader worker's death, reference §2.7).
_EMERGENCY_EXCEPTION = re.compile(r"^object type name: (?P<exc>[A-Za-z_]\w*)")
# A final error line that names the failure without a traceback (SPEC §11).
FINAL_ERRORS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("launcher: worker return code", _re(r"exits with return code = -?[1-9]\d*")),  # DeepSpeed launcher
    ("torchrun child failed", _re(r"ChildFailedError")),
    ("application error", _re(r"\b(?:ERROR|CRITICAL|FATAL)\b.*\b[A-Z]\w*(?:Error|Exception)\b")),
)
# Lines that may follow a crash's exception line without undoing it.
_TRAILER = re.compile(
    r"^\s*$|CUDA kernel errors might be asynchronously reported|CUDA_LAUNCH_BLOCKING|TORCH_USE_CUDA_DSA|"
    r"device-side assertions|^=+$|^-+$|^Failures:|^Root Cause|^<NO_OTHER_FAILURES>|^\[\d+\]:$|"
    r"^\s+(?:time|host|rank|exitcode|error_file|traceback)\s*:|^\S+ FAILED$|^lost sys\.stderr|"
    r"^object (?:address|refcount|type|repr)|^Exception ignored",
    re.IGNORECASE)
CRASH_TRAILING_LINES = 60  # other lines after an exception line that still leave it the final crash
TRACEBACK_WINDOW = 400  # lines kept for the crash analysis: Lightning's tracebacks alone run to ~75

# What launchers and loggers put in front of a line (SPEC §11), stripped before matching.
_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_PREFIX = re.compile(
    r"^(?:"
    r"\([\w.:<>-]+ pid=\d+(?:, ip=[\w.:-]+)?\)\s?"              # Ray worker/actor: (RayTrainWorker pid=81)
    r"|\((?:raylet|gcs_server|autoscaler|dashboard_agent)(?:, ip=[\w.:-]+)?\)\s?"  # Ray's own: (raylet)
    r"|\[(?:rank|default)\d+\]:\s?"                                # torchrun/elastic: [rank3]: / [default0]:
    r"|\[transformers\] "                                          # transformers 5's logger
    r"|\[(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\|[\w.-]+:\d+\] [\d-]+ [\d:,.]+ >> "  # HF logging
    r"|\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d+\s+(?:INFO|WARNING|DEBUG)\s+[\w.]+:\d+ -- "  # Ray header
    r")")


def clean(text: str) -> str:
    """The line as formats are matched: ANSI codes and launcher/logger prefixes removed."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    for _ in range(3):  # prefixes nest: `[rank0]:(RayTrainWorker pid=81) …`
        if not text or text[0] not in "([0123456789":  # every prefix starts with one of these
            break
        stripped = _PREFIX.sub("", text, count=1)
        if stripped is text or stripped == text:
            break
        text = stripped
    return text


def strip_ansi(text: str) -> str:
    """The text without ANSI escape sequences (Ray colours its worker prefixes)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def display(text: str) -> str:
    """The line as shown: prefixes kept, ANSI codes and other control characters removed."""
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text.strip()


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
    total: float | None = None  # the run's total steps, when a line states it
    points: list[tuple[datetime | None, float | None, float | None]] = field(default_factory=list)
    rates: list[tuple[float | None, float]] = field(default_factory=list)  # (step, learning rate)
    last_error: str | None = None  # the newest error-looking line of the last lines, as displayed

    @property
    def last_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None

    def trend(self) -> str | None:
        """falling / rising / flat over the last points (at least 3), or None."""
        points = [x for x in self.losses[-10:] if usable(x)]
        if len(points) < 3:
            return None
        half = len(points) // 2
        before, after = sum(points[:half]) / half, sum(points[half:]) / (len(points) - half)
        if abs(after - before) <= 0.01 * max(abs(before), 1e-9):
            return "flat"
        return "falling" if after < before else "rising"


USABLE_LIMIT = 1e100  # beyond it a loss is stated (as the log said) but not averaged or scaled


def usable(x: float) -> bool:
    """A value the trend and the sparkline compute with: finite and within ±1e100 (a log may say
    `nan`, `inf` or `1.7e308`; sums and ranges of those overflow, SPEC §11)."""
    return math.isfinite(x) and abs(x) <= USABLE_LIMIT


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _segments(lines: Iterable[tuple[str | None, str]]) -> Iterable[tuple[str | None, str]]:
    """Each kubelet line's `\\r`-separated redraws, every one with that line's timestamp."""
    for stamp, text in lines:
        if "\r" in text:
            for part in text.split("\r"):
                if part:
                    yield stamp, part
        else:
            yield stamp, text


def checkpoint_path(text: str) -> str | None:
    """The path a checkpoint-save line names (``text`` already `clean`ed), else None."""
    if not _ANY_CHECKPOINT.search(text):
        return None
    for _label, regex in CHECKPOINTS:
        match = regex.search(text)
        if match:
            return match.group("path").rstrip(".,'\"")
    return None


def mentions_checkpoint(raw: str) -> bool:
    """The cheap test before `saves_checkpoint` (substrings, no regex), for readers that look at
    every line of a long log: each checkpoint wording matched says "checkpoint" or "saving model"."""
    return "heckpoint" in raw or "aving model" in raw or "HECKPOINT" in raw or "AVING MODEL" in raw


def saves_checkpoint(raw: str) -> bool:
    """Whether a raw log line saves a checkpoint: a reader that keeps only a log's tail keeps the
    newest such line too, so the recovery still names what to resume from."""
    return _ANY_CHECKPOINT.search(raw) is not None and checkpoint_path(clean(raw)) is not None


def parse_progress(lines: Iterable[tuple[str | None, str]]) -> Progress:
    """Fold (time, text) lines, oldest first, into `Progress`."""
    out = Progress()
    tail: deque[_Seen] = deque(maxlen=TRACEBACK_WINDOW)
    last_stamp: str | None = None
    at: datetime | None = None
    for stamp, raw in _segments(lines):
        if stamp != last_stamp:  # a line's segments share one timestamp: parse it once
            at = parse_time(stamp) if stamp else None
            last_stamp = stamp
        text = clean(raw)
        out.lines += 1
        if at is not None:
            out.first_line_at = out.first_line_at or at
            out.last_line_at = at
        if _ANY_SIGNATURE.search(text):
            sig = next(sig for sig in SIGNATURES if sig.regex.search(text))
            # A crash's summary names the line (SPEC §11: summaries from evidence), clipped.
            summary = sig.summary if sig.kind == "hang" else f"{sig.summary}: {display(text)[:160]}"
            out.found = Found(sig.name, sig.kind, summary, display(raw)[:300], at)
        saved = checkpoint_path(text)
        if saved is not None:
            out.last_checkpoint, out.checkpoint_at = saved, at
        lowered = text.lower()
        advanced = progress = False
        if "total optimization steps" in lowered or "max_steps" in lowered:
            stated = _TOTAL.search(text)
            if stated:
                out.total = _number((stated.group("total") or stated.group("max") or "").replace(",", ""))
        for fmt in PROGRESS:
            if fmt.needle not in lowered:
                continue
            match = fmt.regex.search(text)
            if match is None or (fmt.exclude is not None and fmt.exclude.search(text)):
                continue
            step = _number(match.group(fmt.step_group)) if fmt.step_group else None
            loss = _number(match.group(fmt.loss_group)) if fmt.loss_group else None
            if step is None and loss is None and fmt.step_group != "step":
                continue
            out.recognised += 1
            progress = True
            if fmt.name not in out.formats:
                out.formats.append(fmt.name)
            if step is not None:
                advanced = out.last_step is None or step != out.last_step
                out.last_step = step
            else:
                advanced = True
            if "total" in fmt.regex.groupindex and match.group("total"):
                out.total = _number(match.group("total"))
            out.points.append((at, step, loss))
            if len(out.points) > 2 * POINTS_KEPT:
                del out.points[:-POINTS_KEPT]
            if "learning" in lowered and (rate := _LEARNING_RATE.search(text)):
                lr = _number(rate.group("hf") or rate.group("mg"))
                if lr is not None:
                    out.rates.append((step, lr))
                    if len(out.rates) > 2 * POINTS_KEPT:
                        del out.rates[:-POINTS_KEPT]
            if loss is not None:
                out.losses.append(loss)
            if advanced and at is not None:
                out.last_progress_at = at
            break
        tail.append(_Seen(at, text, raw, progress, advanced, stamp))
    del out.points[:-POINTS_KEPT]
    del out.rates[:-POINTS_KEPT]
    out.last_error = _last_error(tail)
    if out.found is None or out.found.kind != "hang":
        crash = _final_crash(list(tail))
        if crash is not None:
            # A named crash signature (CUDA OOM, a DataLoader worker) says more than "traceback";
            # the launcher's "a worker failed" says less than the worker's own exception.
            named = (out.found is not None and out.found.kind == "crash"
                     and out.found.signature not in LAUNCHERS)
            out.found = out.found if named else crash
    return out


# An error-looking line: what a failed run's summary names when no signature or traceback did
# (SPEC §11: never "shows no error" when the last lines carry one).
_ERROR_WORD = re.compile(r"\b(?:error|exception|fatal|failed|failure|killed|aborted|abort|segmentation fault|"
                         r"core dumped|exitcode: -?[1-9]|exit code -?[1-9]|return code = -?[1-9])\b",
                         re.IGNORECASE)
LAST_ERROR_LINES = 40  # how far back from the end an error line still names a failed run's cause


def _last_error(tail: deque[_Seen] | list[_Seen]) -> str | None:
    """The newest error-looking line among the last non-blank lines, as displayed; None when none."""
    seen = 0
    for item in reversed(tail):
        text = item.text.strip()
        if not text:
            continue
        seen += 1
        if seen > LAST_ERROR_LINES or item.advanced:
            return None
        if _exception_line(text) or _ERROR_WORD.search(text):
            return display(item.raw)[:300]
    return None


def _exception_line(text: str) -> bool:
    """`ValueError: …` at the start of a line (source lines of the traceback are indented)."""
    return not text[:1].isspace() and _EXCEPTION_LINE.match(text) is not None


class _Seen(NamedTuple):
    """One segment among the last lines, as the crash analysis reads it."""

    at: datetime | None
    text: str  # cleaned: what formats match
    raw: str  # as logged: what is displayed
    progress: bool  # a progress line
    advanced: bool  # progress moved on this line
    stamp: str | None


def _went_on(after: list[_Seen]) -> bool:
    """Progress after an exception line means the process went on — unless it all comes from one
    kubelet line: a bar on stdout without a newline is flushed at exit in one piece, stamped after
    the traceback on stderr (recorded: lightning-crash-tqdm.log)."""
    moved = [s for s in after if s.advanced]
    if not moved:
        return False
    stamps = {s.stamp for s in moved}
    return None in stamps or len(stamps) > 1


def _final_crash(tail: list[_Seen]) -> Found | None:
    """The process's final crash among the last lines, if any: the last traceback whose exception
    line nothing went on after, else a final error line naming the failure."""
    exceptions: list[tuple[datetime | None, str, str]] = []  # (time, exception line, raw) per traceback
    i = 0
    while i < len(tail):
        if not _TRACEBACK.search(tail[i].text):
            i += 1
            continue
        j = i + 1
        while j < len(tail) and not _exception_line(tail[j].text) and not _TRACEBACK.search(tail[j].text):
            j += 1
        if j < len(tail) and _exception_line(tail[j].text):
            rest = tail[j + 1:]
            others = sum(1 for s in rest if not s.progress and not _TRAILER.search(s.text))
            if not _went_on(rest) and others <= CRASH_TRAILING_LINES:
                exceptions.append((tail[i].at, tail[j].text.strip(), tail[j].raw))
        elif j >= len(tail) or _TRACEBACK.search(tail[j].text):
            emergency = next((m for s in tail[i + 1:j] if (m := _EMERGENCY_EXCEPTION.match(s.text))), None)
            if emergency is not None and not _went_on(tail[j:]):
                exceptions.append((tail[i].at, f"{emergency['exc']} (the traceback was cut off)", ""))
        i = j if j > i else i + 1
    if exceptions:
        return _root_cause(exceptions, tail)
    for seen in reversed(tail):
        if _TRAILER.search(seen.text):
            continue
        if seen.advanced:
            return None
        for name, regex in FINAL_ERRORS:
            if regex.search(seen.text):
                return Found(name, "crash", f"the process failed: {display(seen.text)[:160]}",
                             display(seen.raw)[:300], seen.at)
        return None
    return None


_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")


def _root_cause(exceptions: list[tuple[datetime | None, str, str]], tail: list[_Seen]) -> Found:
    """The crash to name: the last exception — or, when that is the launcher's own wrapper
    (torchrun's `ChildFailedError`), the worker exception its "Root Cause" rank raised (its peers
    then fail too, on the closed connection), else the first worker's."""
    cause = exceptions[-1]
    if _LAUNCHER_EXCEPTION.search(cause[1]):
        workers = [e for e in exceptions if not _LAUNCHER_EXCEPTION.search(e[1])]
        root = next((k for k, s in enumerate(tail) if s.text.startswith("Root Cause")), None)
        rank = None if root is None else next(
            (m[1] for s in tail[root:] if (m := _ROOT_RANK.match(s.text))), None)
        by_rank = [e for e in workers if rank is not None and e[2].lstrip().startswith(f"[rank{rank}]:")]
        cause = by_rank[0] if by_rank else (workers[0] if workers else cause)
    at, line, raw = cause
    return Found("traceback", "crash", f"the process crashed: {line[:160]}", display(raw or line)[:300], at)


def sparkline(values: list[float]) -> str:
    """▁▂▃▅▇ of the last points (at least 5), scaled to their own range."""
    points = [v for v in values if usable(v)][-20:]
    if len(points) < 5:
        return ""
    bars = "▁▂▃▄▅▆▇█"
    low, high = min(points), max(points)
    span = (high - low) or 1.0
    return "".join(bars[min(7, int((v - low) / span * 7.999))] for v in points)


__all__ = ["CHECKPOINTS", "PROGRESS", "SIGNATURES", "Found", "Progress", "checkpoint_path", "clean",
           "display", "mentions_checkpoint", "parse_progress", "saves_checkpoint", "sparkline", "strip_ansi"]
