"""Make cluster-sourced text safe to post to Slack, and fit it in Block Kit limits.

Pod messages, object names and log lines are written by whoever controls a
container or a manifest; posted as-is they could ping a whole channel or plant
a phishing link in a card signed by the bot. Everything that comes from the
cluster goes through one of these functions before it reaches a template.

Decisions (SPEC §7, docs.slack.dev "Formatting text for app surfaces"):

* ``&``, ``<``, ``>`` become ``&amp;``, ``&lt;``, ``&gt;``. This is Slack's own
  rule and it disarms every *markup* mention or link at once: ``<!channel>``,
  ``<!here>``, ``<!everyone>``, ``<@U…>``, ``<#C…>``, ``<!subteam^S…>``,
  ``<http://…|label>`` can no longer be formed.
* Bare ``@word`` and ``#word`` get a zero-width space after the sigil. Slack
  auto-parses bare ``@here``/``@channel``/``@everyone``, ``@handle`` and
  ``#channel`` when a message is sent with ``link_names`` or a text object has
  ``verbatim: false`` (the default), so escaping ``<>`` alone is not enough.
  The ZWSP is invisible, so ``alice@example.com`` still reads the same.
* Scheme URLs (``…://``) get a zero-width space after the colon, and ``www.``
  one before its dot: Slack auto-links bare URLs, and a link in a card is a
  link the bot vouches for. Bare domains (``nvidia.com/gpu`` appears in every
  scheduler message) are left alone; templates should set ``"verbatim": true``
  on text objects that carry cluster text, which turns off the remaining
  auto-parsing too. Both layers are meant to be used together.
* Styling characters (``*``, ``_``, ``~``, backtick) are *not* altered by
  ``escape``: Slack has no escape for them, replacing them would corrupt names
  people copy into kubectl (``my_run``), and restyling cannot notify or link.
  Where exact rendering matters (names, reasons), use ``code`` — inside a code
  span Slack applies no styling — which only has to replace backticks.
* Lengths are counted in UTF-16 code units (what JavaScript's ``length``, and
  so Slack's limits, count). That is never less than Python's ``len``, so a
  result within ``limit`` units is also within ``limit`` characters however
  Slack counts. Cuts never split an escape entity, a surrogate pair, a
  combining sequence, an emoji ZWJ sequence or a flag; a cut is shown by ``…``.
"""

from __future__ import annotations

import re
import unicodedata

from workers.outside.text import Outside, outside

ELLIPSIS = "…"
ZWSP = "\u200b"
BACKTICK_STAND_IN = "\u02cb"  # MODIFIER LETTER GRAVE ACCENT: looks like a backtick, is not one

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_WORD = re.compile(r"\w")
_INLINE_CODE_FENCE = 2
_BLOCK_FENCE_OPEN = "```\n"
_BLOCK_FENCE_CLOSE = "\n```"


def slack_len(text: str) -> int:
    """Length as Slack counts it against its limits: UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


_LINE_BREAKS = re.compile(r"\r\n|[\r\n\v\f\x85\u2028\u2029]")
LINE_BREAK_MARK = " ⏎ "


def one_line(text: str) -> str:
    """Cluster text on one line: a line break shows as ``⏎``. A termination message or image
    name that could start a new line could forge one of the card's own lines ("✅ *Ready*")."""
    return _LINE_BREAKS.sub(LINE_BREAK_MARK, text)


def _door(text: Outside | str) -> Outside:
    """Outside text as the renderer takes it: an `Outside` as it is, anything else through the
    one door first (stripped and redacted, not clipped: the renderer fits it to its slot)."""
    return text if isinstance(text, Outside) else outside(text, limit=len(text) + 1)


def escape(text: Outside, limit: int | None = None) -> str:
    """Escape cluster text for a mrkdwn field so it can't mention, link, break markup or
    forge a line of the card.

    Line breaks become ``⏎`` (cluster text is always one line here; callers join
    their own lines after escaping), and a run of three backticks is replaced, so
    no text can open or close a code block. With ``limit``, the *escaped* result
    is cut to fit (entities count at their escaped size, which is what Slack
    measures) and ends with ``…`` when cut.
    """
    text = one_line(_door(text)).replace("```", BACKTICK_STAND_IN * 3)
    whole = _escaped_whole(text)
    if limit is None or slack_len(whole) <= limit:
        return whole
    return _fit(_escaped_clusters(text), limit)


def truncate(text: str, limit: int, *, tail: bool = False) -> str:
    """Cut ``text`` to at most ``limit`` UTF-16 units, marking a cut with ``…``.

    ``tail=True`` keeps the end instead (the last lines of a log are the ones
    that explain a crash), with the ``…`` in front.
    """
    if slack_len(text) <= limit:
        return text
    return _fit(_clusters(text), limit, tail=tail)


def code(text: Outside, limit: int) -> str:
    """An inline code span showing ``text`` exactly, whatever it contains.

    Backticks become a look-alike (Slack has no way to escape one inside a
    span), line breaks become spaces (a span is one line), the rest is escaped
    as in ``escape``. ``limit`` covers the whole span including its backticks.
    Empty text gives an empty string: ```` `` ```` would render literally.
    """
    if limit < _INLINE_CODE_FENCE + 1:
        raise ValueError(f"code() needs limit >= {_INLINE_CODE_FENCE + 1}, got {limit}")
    flat = re.sub(r"[\r\n\t]+", " ", _door(text)).replace("`", BACKTICK_STAND_IN)
    if not flat:
        return ""
    whole = _escaped_whole(flat)
    if slack_len(whole) <= limit - _INLINE_CODE_FENCE:
        return "`" + whole + "`"
    return "`" + _fit(_escaped_clusters(flat), limit - _INLINE_CODE_FENCE) + "`"


def code_block(text: Outside, limit: int, *, tail: bool = False) -> str:
    """A ``` block showing ``text`` (multi-line) exactly, escaped and cut to ``limit``.

    Backticks are replaced because a run of three would close the block early
    (and one at the very end would merge with the closing fence).
    ``tail=True`` keeps the last lines, for logs.
    """
    overhead = len(_BLOCK_FENCE_OPEN) + len(_BLOCK_FENCE_CLOSE)
    if limit < overhead + 1:
        raise ValueError(f"code_block() needs limit >= {overhead + 1}, got {limit}")
    body = _door(text).replace("\r\n", "\n").replace("`", BACKTICK_STAND_IN)
    if not body:
        return ""
    whole = _escaped_whole(body)
    fitted = (whole if slack_len(whole) <= limit - overhead
              else _fit(_escaped_clusters(body), limit - overhead, tail=tail))
    return _BLOCK_FENCE_OPEN + fitted + _BLOCK_FENCE_CLOSE


def clip(text: str, limit: int) -> str:
    """Cut already-escaped mrkdwn to at most ``limit`` units with ``…``, never inside an entity
    (`&lt;`) or a character, and closing an inline code span the cut left open."""
    if slack_len(text) <= limit:
        return text
    pieces: list[str] = []
    clusters = _clusters(text)
    i = 0
    while i < len(clusters):
        entity = next((e for e in _ENTITIES.values() if "".join(clusters[i:i + len(e)]) == e), None)
        pieces.append(entity or clusters[i])
        i += len(entity) if entity else 1
    out = _fit(pieces, limit - 1)
    if out.count("`") % 2:  # the cut fell inside a code span: close it, or drop it if nothing of it is left
        head = out[: -len(ELLIPSIS)]
        opened = head.rfind("`")
        if head[opened + 1:].strip():
            out = head + "`" + ELLIPSIS
        else:
            out = head[:opened].rstrip() + ELLIPSIS
    return out


def plain(text: Outside, limit: int) -> str:
    """Text for a ``plain_text`` object: Slack renders it literally (no mentions,
    links or entities), so only the length needs care. The ``emoji`` flag of the
    object is the template's business and is left as it is."""
    return truncate(_door(text), limit)


# ------------------------------------------------------------------ internals


# The rules of `_escaped_char` as one pattern, for the whole text in one pass: a card escapes
# dozens of strings per render, and a Python loop over every character was most of a watch
# tick's CPU (issue 28). The per-character form remains for cuts, which must know the clusters.
_ESCAPES = re.compile(r"[&<>]|[@#](?=\w|\Z)|:(?=//)|(?<!\w)[Ww]{3}(?=\.)")


def _escaped_match(m: re.Match[str]) -> str:
    found = m.group()
    # "@", "#" and ":" get the mark after them; "www" gets it after itself, so before its dot.
    return _ENTITIES.get(found) or found + ZWSP


def _escaped_whole(text: str) -> str:
    """``"".join(_escaped_clusters(text))``, computed without splitting the text."""
    return _ESCAPES.sub(_escaped_match, text)


def _escaped_char(text: str, i: int) -> str:
    """The escaped form of ``text[i]``, looking ahead where a rule needs context."""
    ch = text[i]
    if ch in _ENTITIES:
        return _ENTITIES[ch]
    nxt = text[i + 1] if i + 1 < len(text) else ""
    if ch in "@#" and (not nxt or _WORD.match(nxt)):
        # At the very end too: a template may put a word right after this text.
        return ch + ZWSP
    if ch == ":" and text.startswith("//", i + 1):
        return ch + ZWSP
    if ch == "." and i >= 3 and text[i - 3 : i].lower() == "www":
        if i == 3 or not _WORD.match(text[i - 4]):
            return ZWSP + ch
    return ch


def _joins_previous(prev: str, ch: str, ri_run: int) -> bool:
    """Whether ``ch`` continues the user-perceived character that ``prev`` is in.

    An approximation of Unicode grapheme clusters good enough to never cut a
    visible character in two: combining marks, variation selectors, emoji
    modifiers and tags, ZWJ sequences, regional-indicator pairs, CRLF.
    """
    cp = ord(ch)
    if unicodedata.category(ch) in ("Mn", "Me", "Mc"):
        return True
    if ch == "\u200d" or prev == "\u200d":
        return True
    if 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF:
        return True
    if 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F:
        return True
    if _is_regional_indicator(ch) and ri_run % 2 == 1:
        return True
    return prev == "\r" and ch == "\n"


def _is_regional_indicator(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _cluster_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    ri_run = 0
    for i, ch in enumerate(text):
        if spans and _joins_previous(text[i - 1], ch, ri_run):
            spans[-1] = (spans[-1][0], i + 1)
        else:
            spans.append((i, i + 1))
        ri_run = ri_run + 1 if _is_regional_indicator(ch) else 0
    return spans


def _clusters(text: str) -> list[str]:
    return [text[a:b] for a, b in _cluster_spans(text)]


def _escaped_clusters(text: str) -> list[str]:
    """Escaped output grouped by source cluster: the units a cut may not split."""
    return ["".join(_escaped_char(text, i) for i in range(a, b)) for a, b in _cluster_spans(text)]


def _fit(pieces: list[str], limit: int, *, tail: bool = False) -> str:
    """Join ``pieces`` whole, cutting with ``…`` if they exceed ``limit`` units."""
    if limit <= 0:
        return ""
    sizes = [slack_len(p) for p in pieces]
    if sum(sizes) <= limit:
        return "".join(pieces)
    budget = limit - slack_len(ELLIPSIS)
    kept: list[str] = []
    used = 0
    order = range(len(pieces) - 1, -1, -1) if tail else range(len(pieces))
    for i in order:
        piece, size = pieces[i], sizes[i]
        if used + size > budget:
            break
        kept.append(piece)
        used += size
    if tail:
        return ELLIPSIS + "".join(reversed(kept))
    return "".join(_at_word_end(kept, pieces[len(kept)] if len(kept) < len(pieces) else "")) + ELLIPSIS


LONGEST_WORD = 30  # `XIDErrorsFound`, `nvidia.com` and `CrashLoopBackOff` are far shorter


def _is_word(piece: str) -> bool:
    return bool(piece) and bool(_WORD.match(piece[0]))


def _at_word_end(kept: list[str], following: str) -> list[str]:
    """``kept`` ending where a word ends: a cut inside one (`XIDErrorsFou…`, `resume the r…`)
    backs off to the last non-word character (a space, `/`, `-`, `:`, an entity), dropping a
    trailing space. A run of word characters longer than `LONGEST_WORD` (a hash, a uid, padding)
    is no word anyone reads whole: it is cut inside, as dropping it would show nothing of it."""
    if kept and _is_word(kept[-1]) and _is_word(following):
        low = max(-1, len(kept) - 1 - LONGEST_WORD)
        boundary = next((i for i in range(len(kept) - 1, low, -1) if not _is_word(kept[i])), None)
        if boundary is not None:
            kept = kept[:boundary + 1]
    while kept and kept[-1].isspace():
        kept = kept[:-1]
    return kept
