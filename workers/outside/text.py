"""Outside text: the one path by which a string from the cluster or a tool may leave taubot.

Every string taubot did not write itself — log lines, termination messages,
event/condition/status messages, RayJob messages, HTTP error bodies, metric
names, object names and labels — reaches Slack, taubot's own logs and the
audit log only as an `Outside`: a `str` that has been through `outside()`,
which strips control characters first (ANSI escapes, bidi overrides,
zero-width characters, other C0/C1), then redacts secrets
(`workers.outside.secrets`), then clips. Escaping for Slack happens at render
(`workers/render/mrkdwn.py`), whose functions take `Outside` and pass anything
else through `outside()` first, so no path can skip the redaction even if its
author forgets (the type checker flags such a caller; the suite's hostile
tests find it).

`Outside` is a `str` subclass: any change to one (slicing, concatenation,
`.strip()`) gives a plain `str` again, which must go through `outside()`
again — two clean halves can make a secret whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import re2
from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from .secrets import REDACTED, redact, replace, spans

MAX_LINE = 600  # taubot's own log lines
SLACK_LOG_LINE = 500  # one cluster log line in a card or the attached tail

# ---------------------------------------------------------------- controls

_OPTIONS = re2.Options()
_ANSI = re2.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
                    r"|\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
                    r"|[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
                    r"|[@-Z\\-_])"  # two-character escapes
                    r"|\x{9b}[0-?]*[ -/]*[@-~]", _OPTIONS)  # the C1 form of CSI
# Bidi controls, zero-width characters (a ZWSP or a joiner inside a token hides it from every
# rule), the word joiner and the BOM, and the soft hyphen.
_INVISIBLE = "\u00ad\u061c\u180e\u200b\u200c\u200d\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
_CONTROLS = re2.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_INVISIBLE}]", _OPTIONS)
_CONTROLS_AND_NEWLINES = re2.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_INVISIBLE}]", _OPTIONS)


def strip_controls(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` without escape sequences, bidi and zero-width controls and C0/C1 characters (tab kept)."""
    if text.isascii() and text.isprintable():  # one C pass: nothing to remove
        return text
    if "\x1b" in text or "\x9b" in text:
        text = _ANSI.sub("", text)
    return (_CONTROLS if keep_newlines else _CONTROLS_AND_NEWLINES).sub("", text)


# ---------------------------------------------------------------- the type


class Outside(str):
    """Text from outside taubot that has been stripped and redacted (made only by `outside()`)."""

    __slots__ = ()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any,
                                     handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        """As a pydantic field: whatever is assigned goes through the door on the way in."""
        return core_schema.no_info_plain_validator_function(
            _validated, json_schema_input_schema=core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(str, when_used="json"))


def clip(text: str, limit: int, *, total: int | None = None) -> str:
    """``text`` cut to ``limit`` characters, the last of them a marker saying how much was cut
    (counted from ``limit`` of ``total``, the original length when ``text`` was cut before)."""
    total = len(text) if total is None else total
    if total <= limit:
        return text
    marker = f" …[{total - limit:,} more characters clipped]"
    return text[: max(limit - len(marker), 0)] + marker


_MARGIN = 1024  # searched beyond a text's budget, since a redaction can shorten what precedes
_BOUNDARY = 256  # longer than any one secret a rule matches (a PEM key goes whole to its END)


def clean(text: str, limit: int = MAX_LINE, *, keep_newlines: bool = False) -> str:
    """Controls stripped, secrets redacted, clipped: the one pass for any text leaving taubot."""
    cut = limit + _MARGIN
    if len(text) <= cut:
        return clip(_redacted(strip_controls(text, keep_newlines=keep_newlines)), limit)
    # The rest would be clipped away: not searched. A secret the cut splits is no longer whole
    # for its rule, so the last `_BOUNDARY` characters before the cut are dropped after the
    # redaction (an earlier redaction may have shortened the text enough to show them).
    redacted = _redacted(strip_controls(text[:cut], keep_newlines=keep_newlines))
    return clip(redacted[: len(redacted) - _BOUNDARY], limit, total=len(text))


def _redacted(stripped: str) -> str:
    """Redacted whole, and, for a text of several lines (a termination message, a traceback),
    also in the joined view of each pair of neighbouring lines."""
    if "\n" not in stripped:
        return redact(stripped)
    lines = stripped.split("\n")
    joined = _joined_secrets(lines)
    if any(joined):
        lines = [_with_own(line, marks) if marks else line for line, marks in zip(lines, joined, strict=True)]
    return redact("\n".join(lines))


OUTSIDE_LIMIT = 20_000  # longer than any one slot of a card; *Details* and snippets pass their own


def outside(text: object, limit: int = OUTSIDE_LIMIT, *, keep_newlines: bool = True) -> Outside:
    """The one door: any value from outside as `Outside` text (stripped, redacted, clipped).

    An `Outside` passes unchanged (the door is idempotent); ``None`` is the empty text; a
    non-string (a hostile number, a list in a status field) is shown as its `str`."""
    if isinstance(text, Outside):
        return text
    if text is None:
        return Outside("")
    raw = text if isinstance(text, str) else str(text)
    return Outside(clean(raw, limit, keep_newlines=keep_newlines))


def _validated(value: Any) -> Outside:
    return outside(value)


# ---------------------------------------------------------------- lines


def redact_url_text(text: str) -> str:
    """For a logger that only logs capability URLs (slack_sdk's webhook client logs the
    response_url it posts to, whatever its host): every URL goes."""
    return _ANY_URL.sub(f"[url {REDACTED}]", redact(text))


_ANY_URL = re2.compile(r"(?i)[a-z][a-z0-9+.-]*://[^\s'\"<>]+", _OPTIONS)
_PEM_BEGIN = re2.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----", _OPTIONS)
_PEM_END = re2.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----", _OPTIONS)
_JOIN_WINDOW = 128  # characters of each line's edge joined with its neighbour's


def _joined_secrets(lines: list[str]) -> list[list[tuple[int, int]]]:
    """Per line, the spans of secrets that only exist when a line is joined to the next (a
    token wrapped at a terminal's width, `password=` at a line's end and its value below)."""
    marks: list[list[tuple[int, int]]] = [[] for _ in lines]
    for i in range(len(lines) - 1):
        left, right = lines[i][-_JOIN_WINDOW:], lines[i + 1][:_JOIN_WINDOW]
        if not left or not right:
            continue
        offset = len(lines[i]) - len(left)
        joined = left + right
        for start, end in spans(joined):
            if start < len(left) < end:  # crosses the join: neither line alone shows it
                marks[i].append((offset + start, offset + len(left)))
                marks[i + 1].append((0, end - len(left)))
    return marks


def _with_own(line: str, marks: list[tuple[int, int]]) -> str:
    """``line`` with the spans of a secret crossing its join (``marks``) and its own secrets replaced
    in one pass. One pass, because a mark replaced first may take what a rule needs to find a
    secret further on — the key of a key/value pair at the line's start, joined to a token at the
    end of the line above, left `[redacted] "0f9e…"`: 286 of the 9,506 ordered pairs of the test
    corpus's lines kept a secret that way."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted([*marks, *spans(line)]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return replace(line, merged)


def redact_lines(lines: Iterable[str], limit: int = SLACK_LOG_LINE) -> list[Outside]:
    """Log lines to post: controls stripped, each line and each pair of neighbours redacted
    (a secret split across two lines goes from both), a PEM key spanning lines removed up to its
    END line, each line clipped."""
    stripped: list[str] = []
    in_key = False
    for raw in lines:
        line = strip_controls(raw)
        if in_key:
            end = _PEM_END.search(line)
            if end is None:
                stripped.append(f"[private key {REDACTED}]")
                continue
            in_key = False
            line = f"[private key {REDACTED}]" + line[end.end():]
        begin = _PEM_BEGIN.search(line)
        if begin is not None and _PEM_END.search(line, begin.end()) is None:
            in_key = True
            line = line[: begin.start()] + f"[private key {REDACTED}]"
        stripped.append(line)
    joined = _joined_secrets(stripped)
    out: list[Outside] = []
    for line, marks in zip(stripped, joined, strict=True):
        if marks:
            line = _with_own(line, marks)
        out.append(Outside(clean(line, limit)))
    return out


__all__ = ["MAX_LINE", "OUTSIDE_LIMIT", "REDACTED", "SLACK_LOG_LINE", "Outside", "clean",
           "clip", "outside", "redact", "redact_lines", "redact_url_text", "strip_controls"]
