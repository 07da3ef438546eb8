"""Two neighbouring lines, each holding a secret of its own (SPEC §11: "a secret split across
lines" is caught in the joined view of each pair of lines — and the lines' own secrets with it).

The joined view found a "secret" crossing the join — a token at the end of one line run together
with the key at the start of the next — and its spans were replaced before the line's own rules
ran: the key gone, the next line's value was no longer a key/value pair and was posted as it was
(`"private_key_id": "0f9e…"` below an `hf_` token, the neighbours of a crash-looping Ray head's
log). Every ordered pair of the corpus's lines, as log lines (`redact_lines`: cards, snippets,
`taubot logs`, MCP) and as one text of two lines (`outside`: termination messages, events).
"""

from __future__ import annotations

import pytest

from tests.fixtures.secrets import CORPUS, found_in
from workers.outside.text import outside, redact_lines

PAIRS = [(a, b) for a in CORPUS for b in CORPUS if a is not b]


def test_the_line_below_a_secret_keeps_none_of_its_own_as_a_log_line() -> None:
    kept = [(a.shape, b.shape) for a, b in PAIRS if found_in(" ".join(redact_lines([a.line, b.line])))]
    assert kept == [], f"{len(kept)} of {len(PAIRS)} pairs kept a secret: {kept[:5]}"


def test_the_line_below_a_secret_keeps_none_of_its_own_in_a_text_of_lines() -> None:
    kept = [(a.shape, b.shape) for a, b in PAIRS if found_in(str(outside(f"{a.line}\n{b.line}")))]
    assert kept == [], f"{len(kept)} of {len(PAIRS)} pairs kept a secret: {kept[:5]}"


@pytest.mark.parametrize("above", ["huggingface-cli login --token hf_MnBvCxZlKjHgFdSaPoIuYtReWq0987654321"])
def test_a_key_value_pair_below_a_token_is_redacted(above: str) -> None:
    [_, below] = redact_lines([above, '"private_key_id": "0f9e8d7c6b5a49382716f5e4d3c2b1a0aabbccdd"'])
    assert "0f9e8d7c6b5a49382716f5e4d3c2b1a0aabbccdd" not in below and "[redacted]" in below
