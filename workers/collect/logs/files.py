"""A run's log given as a file (`taubot diagnose --logs FILE`, or standard input), read bounded.

Why bounded: such a file can be a whole run's log — a real 1,000,000-line log read whole, with
an object per line, peaked at 1.85 GB. Only its last `FILE_WINDOW` segments are kept (ten times
the lines a live status reads, `PROGRESS_TAIL`), plus the newest checkpoint save from before
them, so the recovery still names what to resume from. A file is read from its end, so the work
is the window's, not the file's; standard input is streamed through the same window. The source
says how much was left out, so the check's evidence never calls the window the whole log.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import BinaryIO

from workers.diagnosis.models import LogEvidence, PodLog
from workers.diagnosis.progress import mentions_checkpoint, saves_checkpoint

from .model import Window, split_timestamp, stream_lines

FILE_WINDOW = 20_000
BLOCK = 1 << 20
CHECKPOINT_LINES = 64  # lines that mention a checkpoint tried before the window, newest first
_NEEDLES = (b"checkpoint", b"saving model")  # what `mentions_checkpoint` looks for, lower-cased


def read_log(chunks: Iterable[bytes], *, name: str, window: int = FILE_WINDOW) -> LogEvidence:
    """``chunks``: a stream of `\\n`-lines (standard input in binary mode), as `kubectl logs
    --timestamps` printed it; lines without a timestamp are kept and only lose timing (SPEC §5a)."""
    kept = Window(window, timestamps=True, pin=mentions_checkpoint, confirm=saves_checkpoint)
    for line in stream_lines(chunks):
        kept.add(line)
    source = f"file {name}"
    if kept.truncated:
        source += f", its last {len(kept.kept):,} of {kept.seen:,} lines"
    return LogEvidence(lines=kept.pairs(), source=source)


def _segments(data: bytes) -> int:
    return data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")


def _line_start(stream: BinaryIO, pos: int) -> int:
    """The offset of the line that holds byte ``pos``: just after the newline before it."""
    while pos > 0:
        size = min(BLOCK, pos)
        stream.seek(pos - size)
        found = stream.read(size).rfind(b"\n")
        if found >= 0:
            return pos - size + found + 1
        pos -= size
    return 0


def _checkpoint_before(stream: BinaryIO, end: int) -> tuple[str | None, str] | None:
    """The newest checkpoint save in the file's bytes before ``end`` (a line start), searched
    backwards block by block (bytes.rfind; only lines that mention a checkpoint are decoded)."""
    carry, pos, tried = b"", end, 0
    while pos > 0 and tried < CHECKPOINT_LINES:
        size = min(BLOCK, pos)
        pos -= size
        stream.seek(pos)
        block = stream.read(size) + carry
        cut = block.find(b"\n") + 1 if pos > 0 else 0  # before it: a line that began earlier
        carry, scan = block[:cut], block[cut:]
        lowered, limit = scan.lower(), len(scan)
        while tried < CHECKPOINT_LINES:
            at = max(lowered.rfind(needle, 0, limit) for needle in _NEEDLES)
            if at < 0:
                break
            start = scan.rfind(b"\n", 0, at) + 1
            stop = scan.find(b"\n", at)
            line = split_timestamp(next(stream_lines([scan[start:stop if stop >= 0 else limit]])))
            tried += 1
            for part in reversed(line.text.split("\r")):
                if saves_checkpoint(part):
                    return line.time, part
            limit = start
    return None


def _size(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e6 else f"{n / 1e3:,.0f} KB"


def read_log_file(stream: BinaryIO, *, name: str, window: int = FILE_WINDOW) -> LogEvidence:
    """A seekable file, read from its end: the blocks that hold its last ``window`` segments
    (back to the start of the line they begin in, for its timestamp), then — when that is not
    the whole file — the newest checkpoint save before them."""
    if not stream.seekable():
        return read_log(stream, name=name, window=window)
    size = stream.seek(0, os.SEEK_END)
    pos, segments = size, 0
    while pos > 0 and segments <= window:
        step = min(BLOCK, pos)
        pos -= step
        stream.seek(pos)
        segments += _segments(stream.read(step))
    start = _line_start(stream, pos)
    stream.seek(start)
    kept = Window(window, timestamps=True, pin=mentions_checkpoint, confirm=saves_checkpoint)
    for line in stream_lines(stream):
        kept.add(line)
    source = f"file {name}"
    if start > 0 or kept.truncated:
        source += f", its last {len(kept.kept):,} lines (of {_size(size)})"
    pinned = _checkpoint_before(stream, start) if start > 0 and kept.pinned is None else None
    return LogEvidence(lines=([pinned] if pinned else []) + kept.pairs(), source=source)


RANK_LINES = 500  # a rank's tail, offline as live (SPEC §5c: at most 500 lines per pod)
MAX_RANK_FILES = 64  # pods per judgement (SPEC §5c)


def read_pod_logs(specs: list[tuple[str, BinaryIO]], *, known_pods: set[str] | None = None) -> LogEvidence:
    """``--logs POD=FILE`` given once per pod: each pod's last `RANK_LINES` lines, judged as the
    live read of all ranks is (SPEC §5c). Beyond `MAX_RANK_FILES` pods the first ones are kept and
    the evidence says so, as a live read samples beyond its bound."""
    ranks: list[PodLog] = []
    for pod, stream in specs[:MAX_RANK_FILES]:
        one = read_log_file(stream, name=pod, window=RANK_LINES)
        ranks.append(PodLog(pod=pod, lines=one.lines, truncated="its last" in (one.source or "")))
    sampled = (f"{MAX_RANK_FILES} of {len(specs)} pod logs read (bound {MAX_RANK_FILES})"
               if len(specs) > MAX_RANK_FILES else None)
    unknown = sorted(r.pod for r in ranks if known_pods is not None and r.pod not in known_pods)
    source = f"{len(ranks)} pod log files" + (f"; not pods of the run in the dump: {', '.join(unknown[:3])}"
                                               if unknown else "")
    return LogEvidence(ranks=ranks, ranks_sampled=sampled, source=source)


__all__ = ["FILE_WINDOW", "MAX_RANK_FILES", "RANK_LINES", "read_log", "read_log_file", "read_pod_logs"]
