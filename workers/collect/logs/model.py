"""The log of a run as taubot reports it (SPEC §7a), and the pure parsing of raw log text.

`text` is the raw line (no Slack escaping; the kubelet's timestamp removed,
leading spaces kept), `time` the line's own RFC 3339 timestamp when it has
one. Lines are the last N in time order; `truncated` says older ones exist;
`unavailable` lists why each source tried before the one that answered
could not answer.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Literal

from pydantic import BaseModel, Field

from workers.outside.text import clean, redact_lines

Source = Literal["ray-dashboard", "pod", "kusto"]
DEFAULT_TAIL = 200
MAX_TAIL = 5000
# kubelet `timestamps=true`: RFC 3339 with nanoseconds, one space, the line (kubectl logs --timestamps)
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ")


class LogLine(BaseModel):
    time: str | None = None
    text: str


class LogsResult(BaseModel):
    run: str
    namespace: str | None = None
    kind: str | None = None
    source: Source | None = None
    pod: str | None = None
    container: str | None = None
    lines: list[LogLine] = Field(default_factory=list)
    truncated: bool = False
    unavailable: list[str] = Field(default_factory=list)
    requests: int = 0

    @property
    def answered(self) -> bool:
        return self.source is not None

    def contract(self) -> dict:
        """The JSON object of SPEC §7a: exactly these six keys."""
        return {
            "source": self.source,
            "pod": self.pod,
            "container": self.container,
            "lines": [line.model_dump() for line in self.lines],
            "truncated": self.truncated,
            "unavailable": list(self.unavailable),
        }


def split_timestamp(raw: str) -> LogLine:
    """`2026-11-30T10:01:02.123456789Z  step 5` → time + `' step 5'`; a line without one keeps it."""
    stamp, text = _split(raw)
    return LogLine(time=stamp, text=text)


def _split(raw: str) -> tuple[str | None, str]:
    match = _STAMP.match(raw)
    if match is None:
        return None, raw
    return match.group(1), raw[match.end():]


class Window:
    """The last ``tail`` segments of a log fed one `\\n`-line at a time, as plain (time, text) pairs.

    Why: a log can be a million lines (a `--logs FILE`, a long run); building an object per
    segment of all of it cost 1.85 GB. Only the kept segments exist at once, and models are
    built only for them. Carriage returns end a segment too (tqdm and Lightning redraw bars with
    `\\r`), but the kubelet stamps a line once, before all its redraws: the timestamp is read off
    the `\\n`-line first and every `\\r` segment keeps it (SPEC §11).

    ``pin``: a cheap test for segments worth keeping when they fall out of the window, and
    ``confirm`` the exact one: the newest confirmed of the last few pinned segments is kept,
    before the window — a checkpoint saved long before the log's end still names what to resume
    from. Only the cheap test runs on every segment that leaves.
    """

    PINNED = 16

    def __init__(self, tail: int, *, timestamps: bool, pin: Callable[[str], bool] | None = None,
                 confirm: Callable[[str], bool] | None = None) -> None:
        self.kept: deque[tuple[str | None, str]] = deque(maxlen=max(tail, 0))
        self.timestamps = timestamps
        self.seen = 0
        self.pin, self.confirm = pin, confirm
        self.leaving: deque[tuple[str | None, str]] = deque(maxlen=self.PINNED)

    def add(self, raw: str) -> None:
        stamp, text = _split(raw) if self.timestamps else (None, raw)
        kept, pin = self.kept, self.pin
        for part in text.split("\r") if "\r" in text else (text,):
            self.seen += 1
            if pin is not None and kept.maxlen and len(kept) == kept.maxlen and pin(kept[0][1]):
                self.leaving.append(kept[0])  # about to fall out of the window
            kept.append((stamp, part))

    @property
    def pinned(self) -> tuple[str | None, str] | None:
        confirm = self.confirm or (lambda _text: True)
        return next((pair for pair in reversed(self.leaving) if confirm(pair[1])), None)

    @property
    def truncated(self) -> bool:
        return self.seen > len(self.kept)

    def pairs(self) -> list[tuple[str | None, str]]:
        """The kept segments, oldest first (the pinned one, if any, before them)."""
        pinned = self.pinned
        return ([pinned] if pinned is not None else []) + list(self.kept)

    def lines(self) -> list[LogLine]:
        return [LogLine(time=t, text=x) for t, x in self.pairs()]


def _line(raw: str) -> str:
    return raw[:-1] if raw.endswith("\r") else raw  # "\r\n" ends a line like "\n"


def last_lines(text: str, tail: int, *, timestamps: bool) -> tuple[list[LogLine], bool]:
    """The last ``tail`` lines (`\\r` segments, see `Window`) of ``text`` and whether older lines
    were left out. Only the last ``tail`` `\\n`-lines are split off (each holds at least one
    segment): the objects made are bounded by ``tail``, not by the text. The empty remainder after
    a final newline is not a line."""
    if tail <= 0:
        return [], bool(text)
    parts = text.rsplit("\n", tail + 1)
    if parts and parts[-1] == "":
        parts.pop()
    older = len(parts) > tail
    window = Window(tail, timestamps=timestamps)
    for raw in parts[-tail:]:
        window.add(_line(raw))
    return window.lines(), older or window.truncated


def stream_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """`\\n`-lines of a byte stream (a file iterated in binary mode), decoded one at a time (a byte
    that is not UTF-8 becomes U+FFFD). Bytes, not text mode: universal newlines would turn the
    kubelet's `\\r` redraws into lines before their timestamp is read (SPEC §11)."""
    for raw in chunks:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        yield _line(raw.decode("utf-8", errors="replace"))


def shareable(result: LogsResult) -> LogsResult:
    """The log as it may be posted: every line redacted, stripped and clipped (a private key
    spanning lines removed whole), and the sources' reasons too (an error may quote a URL)."""
    texts = redact_lines(line.text for line in result.lines)
    lines = [line.model_copy(update={"text": text}) for line, text in zip(result.lines, texts, strict=True)]
    return result.model_copy(update={
        "lines": lines,
        "unavailable": [clean(reason, 400) for reason in result.unavailable],
    })


__all__ = ["DEFAULT_TAIL", "MAX_TAIL", "LogLine", "LogsResult", "Source", "Window", "last_lines", "shareable",
           "split_timestamp", "stream_lines"]
