"""One redaction for taubot's own log lines and for log text posted to Slack (issue 26.3, 26.5).

The corpus (`tests/fixtures/secrets.py`) goes through every way a line leaves
taubot: `redact`/`redact_lines` (what `/tau logs` posts), a log record's
message, its arguments and its traceback through the handler `install`
configures (text and JSON lines), and an audit record's fields.
"""

from __future__ import annotations

import io
import json
import logging

import pytest

from tests.fixtures.secrets import (
    CONTROL_LINES,
    CORPUS,
    FORBIDDEN,
    PEM_BLOCKS,
    Planted,
    found_anywhere,
    found_in,
    split_across_lines,
    variants,
)
from workers.outside.logsafe import AUDIT, audit, configure
from workers.outside.text import (
    REDACTED,
    SLACK_LOG_LINE,
    Outside,
    clean,
    outside,
    redact,
    redact_lines,
    strip_controls,
)

# Lines a training job prints that hold no secret; none may change (transformers 4.46 Trainer dict,
# tqdm, torchrun, Lightning, Ray's prefixes, a URL without credentials, words that trigger rules).
ORDINARY = (
    "{'loss': 1.9211, 'grad_norm': 0.61, 'learning_rate': 4e-05, 'epoch': 1.5}",
    " 45%|████▌     | 450/1000 [02:13<02:43,  3.37it/s]",
    "[rank0]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "Epoch 3: 100%|██████████| 782/782 [01:02<00:00, 12.5it/s, v_num=0, train_loss=0.412]",
    "(RayTrainWorker pid=4121, ip=10.0.3.17) max_tokens: 4096, num_passes: 3, tokens/s=18234",
    "Saving model checkpoint to s3://taugrid-ckpt/llama-ft-7b/checkpoint-500",
    "INFO:     10.0.3.1:52814 - \"GET /api/jobs/ HTTP/1.1\" 200 OK (see https://docs.ray.io/en/latest/)",
    "key_padding_mask shape torch.Size([8, 2048]); sorting by key: step",
)


@pytest.mark.parametrize("planted", CORPUS, ids=[p.shape for p in CORPUS])
def test_every_secret_shape_is_redacted(planted: Planted) -> None:
    out = redact(planted.line)
    assert found_in(out) == [] and REDACTED in out


@pytest.mark.parametrize("planted", PEM_BLOCKS, ids=[p.shape for p in PEM_BLOCKS])
def test_a_private_key_is_removed_whole_in_one_string_and_across_lines(planted: Planted) -> None:
    assert found_in(redact(planted.line)) == []
    lines = redact_lines(["step 4 ok", *planted.line.split("\n"), "step 5 ok"])
    assert found_in("\n".join(lines)) == []
    assert lines[0] == "step 4 ok" and lines[-1] == "step 5 ok"  # the lines around it are kept


def test_the_corpus_is_big_enough() -> None:
    """Issue 26: at least 20 shapes."""
    assert len({p.shape for p in (*CORPUS, *PEM_BLOCKS)}) >= 20


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_training_lines_are_left_alone(line: str) -> None:
    assert redact(line) == line == clean(line, 1000)


@pytest.mark.parametrize("line", CONTROL_LINES)
def test_control_characters_never_survive(line: str) -> None:
    for out in (clean(line), *redact_lines([line])):
        assert not [c for c in FORBIDDEN if c in out], repr(out)
    assert strip_controls("\x1b[31mERROR\x1b[0m loss") == "ERROR loss"
    assert strip_controls("a\tb\nc") == "a\tbc" and strip_controls("a\nb", keep_newlines=True) == "a\nb"


def test_a_colour_code_cannot_split_a_token_past_the_rules() -> None:
    line = "token xoxb-2044837266871-\x1b[0m2046592343219-q3Rk8ZtW1mNvB5yLpX0cDe7F"
    assert "2046592343219" not in redact_lines([line])[0]


def test_long_lines_are_clipped_with_a_marker() -> None:
    [line] = redact_lines(["x" * 5000])
    assert len(line) == SLACK_LOG_LINE and line.endswith("x …[4,500 more characters clipped]")
    assert clean("y" * 10_000_000, 600).endswith("more characters clipped]")  # a huge line is cut first


def _handler(json_lines: bool) -> tuple[logging.Handler, io.StringIO]:
    stream = io.StringIO()
    handler = configure(logging.StreamHandler(stream), json_lines=json_lines)
    handler.setFormatter(handler.formatter or logging.Formatter("%(name)s %(message)s"))
    return handler, stream


@pytest.mark.parametrize("json_lines", [False, True], ids=["text", "json"])
def test_no_log_line_taubot_writes_holds_a_secret(json_lines: bool) -> None:
    """Every corpus line as a message, as an argument, inside a traceback, in an audit field and
    from slack_sdk's webhook logger, through the handler `install` configures: 0 found."""
    handler, stream = _handler(json_lines)
    loggers = [logging.getLogger(n) for n in ("workers.flows.logs", "slack_bolt.App", "slack_sdk.webhook.client")]
    for lg in (*loggers, AUDIT):
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    try:
        for planted in (*CORPUS, *PEM_BLOCKS):
            for lg in loggers:
                lg.info(planted.line)
                lg.info("read failed: %s (%r)", planted.line, planted.line)
                try:
                    raise RuntimeError(planted.line)
                except RuntimeError:
                    lg.exception("job failed")
            audit("command", text=planted.line, value=[planted.line], nested={"k": planted.line})
        logging.getLogger("slack_sdk.webhook.client").info(
            "Going to retry the same request: POST http://127.0.0.1:43817/response/r1")
    finally:
        for lg in (*loggers, AUDIT):
            lg.removeHandler(handler)
            lg.propagate = True
    written = stream.getvalue()
    assert found_in(written) == []
    assert "/response/r1" not in written  # a response_url on any host, here the fake Slack's
    if json_lines:
        docs = [json.loads(line) for line in written.splitlines()]
        assert any("exc_info" in d for d in docs) and any(d.get("audit") for d in docs)
    else:
        assert "Traceback (most recent call last)" in written  # tracebacks kept, redacted


# ---------------------------------------------------------------- issue 34: the whole corpus


def test_the_corpus_has_a_hundred_shapes() -> None:
    assert len({p.shape for p in (*CORPUS, *PEM_BLOCKS)}) >= 100


@pytest.mark.parametrize("planted", CORPUS, ids=[p.shape for p in CORPUS])
def test_every_shape_is_redacted_however_it_is_hidden(planted: Planted) -> None:
    """A colour code or a zero-width character inside the secret, the line URL-encoded: the
    one door (`outside`) finds it in every form."""
    for kind, text in variants(planted):
        out = outside(text)
        assert found_anywhere(out) == [], (kind, out)


@pytest.mark.parametrize("planted", CORPUS, ids=[p.shape for p in CORPUS])
def test_a_secret_split_across_two_lines_goes_from_both(planted: Planted) -> None:
    lines, head, tail = split_across_lines(planted)
    first, second = redact_lines(lines)
    assert not (len(head) >= 6 and first.endswith(head)), first
    assert not (len(tail) >= 6 and second.startswith(tail)), second
    joined = outside("\n".join(lines))  # a termination message: one text with a line break in it
    assert planted.secrets[0] not in joined.replace("\n", "")


def test_the_door_is_idempotent_and_typed() -> None:
    once = outside("password=hunter2 \x1b[31mred\x1b[0m")
    assert isinstance(once, Outside) and outside(once) is once
    assert once == "password=[redacted] red"
    assert not isinstance(once + "x", Outside)  # a changed text must go through the door again


def test_hostile_input_for_the_old_backtracking_rule_is_answered_unchanged() -> None:
    """The old URL-userinfo rule backtracked cubically on 10,000 `a%3A%2F%2F` (~30 s). RE2 cannot
    backtrack; the time is measured by `bench.bench_redaction`, not here: this holds the answer
    (nothing in it is a secret, so nothing changes, decoded or not)."""
    hostile = "a%3A%2F%2F" * 10_000
    assert redact(hostile) == hostile
    assert outside(hostile, limit=len(hostile) + 1) == hostile
