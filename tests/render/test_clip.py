"""Cards cut at word and span boundaries (issue 38, Build item 4).

A property test over a table of hostile strings and a fixed-seed generated set (hypothesis is not
installed in this venv): whatever the text and the room, a cut never ends inside a word (unless
it is a run of word characters longer than any word, a hash or padding), never leaves an inline code span open, never
leaves an empty span, and stays within the room.
"""

from __future__ import annotations

import random
import re

import pytest

from workers.render.mrkdwn import ELLIPSIS, LONGEST_WORD, clip, code, escape, slack_len

WORD = re.compile(r"\w")
HOSTILE = [
    # the XID card's first incomplete line, as the node-health check words it (demo llama-ft-xid)
    "⚠️ First incomplete: GPU/node health (warning) — aks-a100-38141759-vmss000008: XIDErrors=True "
    "XIDErrorsFound: XID errors present in kernel logs: Xid 79 (GPU has fallen off the bus)",
    "Next: A node the run's pods are bound to is unhealthy: the node-pool owner drains and repairs it "
    "(`tau cluster validate nodes`); then resume the run on healthy nodes.",
    "Evidence: `job-llama-ft-queued-6118f: QuotaReserved=False reason=Pending: couldn't assign flavors`",
    "`a` `b` `c` `d` `e` `f` `g` `h` `i` `j` `k` `l`",
    "supercalifragilisticexpialidocious-and-then-some-more-words",
    "x" * 300,
    "&lt;@U123&gt; &amp; &lt;!channel&gt; `&lt;pod-name&gt;` tail",
    "日本語のテキスト と `コード` と emoji 🧪🧪🧪 and words",
    "trailing space before the cut                         and more",
    "`unclosed span in the source` then `another one that is long enough to be cut somewhere`",
]


def _generated(seed: int = 38, count: int = 300) -> list[str]:
    rnd = random.Random(seed)
    words = ["XIDErrorsFound", "Xid", "79", " `code span` ", " `Xid 79` ", "&lt;", "&amp;", "—", "/", ":",
             "-", "node", "a100", "fallen", "bus", " ", "  ", "🧪", "é", "resume", "the", "run"]
    return ["".join(rnd.choice(words) + rnd.choice(["", " "]) for _ in range(rnd.randint(1, 40)))
            for _ in range(count)]  # well-formed mrkdwn, as the card's own lines are


def assert_good_cut(source: str, out: str, limit: int) -> None:
    assert slack_len(out) <= limit, (out, limit)
    assert out.count("`") % 2 == 0, f"open code span: {out!r}"
    assert "``" not in out or "``" in source, f"empty span: {out!r}"
    if out == source:
        return
    assert out.endswith(ELLIPSIS), out
    stem = out[: -len(ELLIPSIS)].rstrip("`")
    assert source.startswith(stem), (source, out)
    rest = source[len(stem):]
    if stem and rest and WORD.match(stem[-1]) and WORD.match(rest[0]):
        word = re.search(r"\w+$", stem).group()  # type: ignore[union-attr]
        # allowed only for a run longer than any word, or a first word longer than the room
        assert len(word) > LONGEST_WORD or word == stem, f"cut mid-word: {out!r} of {source!r}"


@pytest.mark.parametrize("source", HOSTILE + _generated())
@pytest.mark.parametrize("limit", [8, 17, 40, 81, 160])
def test_clip_never_cuts_mid_word_or_leaves_a_span_open(source: str, limit: int) -> None:
    if source.count("`") % 2:
        source += "`"  # clip takes the card's own, well-formed mrkdwn
    assert_good_cut(source, clip(source, limit), limit)


@pytest.mark.parametrize("source", HOSTILE[:3] + _generated(count=60))
@pytest.mark.parametrize("limit", [12, 30, 75])
def test_escape_and_code_cut_at_word_ends(source: str, limit: int) -> None:
    escaped = escape(source, limit)
    whole = escape(source)
    assert slack_len(escaped) <= limit
    if escaped != whole:
        stem = escaped[: -len(ELLIPSIS)]
        rest = whole[len(stem):]
        if stem and rest and WORD.match(stem[-1]) and WORD.match(rest[0]):
            word = re.search(r"\w+$", stem).group()  # type: ignore[union-attr]
            assert len(word) > LONGEST_WORD or word == stem, (escaped, whole)
    span = code(source, limit)
    assert span == "" or (span.startswith("`") and span.endswith("`") and span.count("`") == 2)
    assert slack_len(span) <= limit


def test_the_xid_line_keeps_whole_words() -> None:
    line = HOSTILE[0]
    for limit in range(20, len(line), 7):
        out = clip(line, limit)
        assert not out.endswith(("Fou" + ELLIPSIS, ": X" + ELLIPSIS)), out
