"""The log of a run as taubot reports it (SPEC §7a), and the pure parsing of raw log text.

`text` is the raw line (no Slack escaping; the kubelet's timestamp removed,
leading spaces kept), `time` the line's own RFC 3339 timestamp when it has
one. Lines are the last N in time order; `truncated` says older ones exist;
`unavailable` lists why each source tried before the one that answered
could not answer.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

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
    match = _STAMP.match(raw)
    if match is None:
        return LogLine(time=None, text=raw)
    return LogLine(time=match.group(1), text=raw[match.end():])


def last_lines(text: str, tail: int, *, timestamps: bool) -> tuple[list[LogLine], bool]:
    """The last ``tail`` lines of ``text`` and whether older lines were left out.

    Carriage returns end a line too (tqdm and Lightning redraw bars with `\\r`), but the
    kubelet stamps a line once, before all its redraws: the timestamp is read off the
    `\\n`-line first and every `\\r` segment keeps it (SPEC §11). The empty remainder
    after a final newline is not a line.
    """
    raw = re.split(r"\r?\n", text)
    if raw and raw[-1] == "":
        raw.pop()
    if not any("\r" in r for r in raw[-tail:] if tail > 0):
        truncated = len(raw) > tail
        kept = raw[-tail:] if tail > 0 else []
        return [split_timestamp(r) if timestamps else LogLine(text=r) for r in kept], truncated
    out: list[LogLine] = []
    for r in raw:
        line = split_timestamp(r) if timestamps else LogLine(text=r)
        if "\r" in line.text:
            out.extend(LogLine(time=line.time, text=part) for part in line.text.split("\r"))
        else:
            out.append(line)
    return (out[-tail:] if tail > 0 else []), len(out) > tail


__all__ = ["DEFAULT_TAIL", "MAX_TAIL", "LogLine", "LogsResult", "Source", "last_lines", "split_timestamp"]
