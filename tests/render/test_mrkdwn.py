"""Cluster text posted as mrkdwn can neither notify, link, nor exceed Block Kit limits."""

from __future__ import annotations

import re

import pytest

from workers.render.mrkdwn import (
    BACKTICK_STAND_IN,
    ELLIPSIS,
    code,
    code_block,
    escape,
    plain,
    slack_len,
    truncate,
)

# A pod message as an attacker controlling a container's termination message
# could write it (Slack markup from docs.slack.dev "Formatting text").
HOSTILE = (
    "<!channel> hi <@U123> <https://evil|click> @here http://x.y "
    "<!subteam^S0PLATFORM> <#C0GENERAL> @everyone @Channel www.evil.example"
)

DANGEROUS = [
    re.compile(r"<[!@#]"),  # special mentions, user/channel/group mentions
    re.compile(r"<https?:", re.I),  # markup links
    re.compile(r"(?<![\w])@(here|channel|everyone)\b", re.I),  # bare broadcast mentions
    re.compile(r"https?://", re.I),  # auto-linked bare URLs
    re.compile(r"\bwww\.", re.I),
]


def _assert_harmless(out: str) -> None:
    for pattern in DANGEROUS:
        assert not pattern.search(out), f"{pattern.pattern} in {out!r}"
    assert "<" not in out and ">" not in out


@pytest.mark.parametrize("render", [escape, lambda t: code(t, 3000), lambda t: code_block(t, 3000)])
def test_hostile_text_is_harmless(render) -> None:  # noqa: ANN001 - a renderer under test
    _assert_harmless(render(HOSTILE))


def test_escape_keeps_text_readable() -> None:
    out = escape("a & b <c> alice@example.com nvidia.com/gpu")
    assert out.replace("\u200b", "") == "a &amp; b &lt;c&gt; alice@example.com nvidia.com/gpu"


def test_existing_entities_are_shown_not_interpreted() -> None:
    assert escape("&lt;!channel&gt;") == "&amp;lt;!channel&amp;gt;"


def test_trailing_sigil_cannot_join_following_template_text() -> None:
    assert escape("ping @") + "here" != "ping @here"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("abcdef", 6, "abcdef"),
        ("abcdefg", 6, "abcde" + ELLIPSIS),
        ("abc", 1, "a"[:0] + ELLIPSIS),
        ("abc", 0, ""),
    ],
)
def test_truncate_table(text: str, limit: int, expected: str) -> None:
    assert truncate(text, limit) == expected


def test_truncate_tail_keeps_the_end() -> None:
    assert truncate("line1\nline2\nboom", 6, tail=True) == ELLIPSIS + "\nboom"


@pytest.mark.parametrize(
    ("unit", "count"),
    [
        ("é", 5000),  # precomposed: one unit each
        ("e\u0301", 3000),  # combining accent: never separated from its base
        ("🚀", 2000),  # astral: two UTF-16 units each, never split
        ("👩‍🔬", 800),  # ZWJ sequence (woman scientist)
        ("🇩🇪", 900),  # flag: a regional-indicator pair
    ],
)
def test_unicode_is_counted_and_cut_whole(unit: str, count: int) -> None:
    text = unit * count
    out = truncate(text, 3000)
    assert slack_len(out) <= 3000 and len(out) <= 3000
    assert out.endswith(ELLIPSIS)
    kept = out[: -len(ELLIPSIS)]
    # the cut falls between whole visible characters: nothing half-drawn
    assert kept == unit * (len(kept) // len(unit))
    assert slack_len(kept) > 3000 - 1 - slack_len(unit)  # and no more was cut than needed


def test_escape_with_limit_never_splits_an_entity() -> None:
    out = escape("<" * 100, 10)
    assert out == "&lt;" * 2 + ELLIPSIS
    assert slack_len(escape("&" * 3000, 3000)) <= 3000


def test_code_is_one_exact_span() -> None:
    out = code("a`b\nc *bold* _x_", 100)
    assert out == f"`a{BACKTICK_STAND_IN}b c *bold* _x_`"
    assert out.count("`") == 2


def test_code_limits_include_fences() -> None:
    out = code("x" * 100, 20)
    assert len(out) == 20 and out.startswith("`") and out.endswith(ELLIPSIS + "`")
    assert code("", 10) == ""
    with pytest.raises(ValueError):
        code("x", 2)


def test_code_block_cannot_be_closed_early() -> None:
    out = code_block("x```\n<!here>`", 100)
    assert out.startswith("```\n") and out.endswith("\n```")
    assert out.count("```") == 2
    _assert_harmless(out)


def test_code_block_tail_for_logs() -> None:
    log = "\n".join(f"step {i}" for i in range(1000)) + "\nCUDA error: out of memory"
    out = code_block(log, 300, tail=True)
    assert len(out) <= 300
    assert out.endswith("CUDA error: out of memory\n```")
    assert out.startswith("```\n" + ELLIPSIS)


def test_plain_only_truncates() -> None:
    assert plain("<!channel> :rocket: & co", 100) == "<!channel> :rocket: & co"
    assert plain("x" * 80, 75) == "x" * 74 + ELLIPSIS


def test_escaping_a_whole_text_at_once_gives_what_escaping_it_cluster_by_cluster_gives() -> None:
    """Issue 28: text that fits is escaped in one pass (`_escaped_whole`), text that must be cut
    cluster by cluster; both must agree character for character, or a card's escaping would
    depend on its length. Deterministic: a fixed seed over the characters every rule looks at."""
    import random

    from workers.render.mrkdwn import _escaped_clusters, _escaped_whole

    pieces = [*"aw W.@#:/&<>`_*1", "\u0301", "\u200d", "👍🏽", "🇫🇷", "é", "www", "WwW.", "://", "@here",
              "#chan", "<!channel>", "https://evil.example"]
    rng = random.Random(28)
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        assert _escaped_whole(text) == "".join(_escaped_clusters(text)), text


def test_every_renderer_sends_raw_text_through_the_door() -> None:
    """Issue 34: `escape`, `code`, `code_block` and `plain` take `Outside`; a plain `str` handed to
    one by a path that forgot the door is stripped and redacted all the same."""
    from workers.render.mrkdwn import code, code_block, escape, plain

    raw = "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 \x1b[31mred\u202e"
    for out in (escape(raw), code(raw, 200), code_block(raw, 200), plain(raw, 200)):
        assert "hf_AbCd" not in out and "\x1b" not in out and "\u202e" not in out and "[redacted]" in out
