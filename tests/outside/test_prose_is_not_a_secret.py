"""Prose that names a secret-ish word is not a secret (a false positive cut a card's Next line).

The line is the NCCL watchdog's (training-logs.md §2.5, the current format), quoted after the
engine's own words "hang signature:" on the resnet-hang card.
"""

from __future__ import annotations

import pytest

from workers.outside.secrets import redact

NCCL = ("[rank0]:[E1130 10:15:00.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
        "Timeout(ms)=600000) ran for 600060 milliseconds before timing out.")


def test_a_quoted_log_line_after_signature_colon_is_kept_whole() -> None:
    text = f"The log shows a hang signature: {NCCL}"
    assert redact(text) == text


@pytest.mark.parametrize("text", ["password=[p@ss-w0rd", "signature: abcDEF0123456789", "sig=0123abcd"])
def test_values_after_equals_or_a_token_after_a_colon_are_still_redacted(text: str) -> None:
    assert "[redacted]" in redact(text)
