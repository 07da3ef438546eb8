"""The failed-reads line of the phase card (SPEC §7): one line naming every read that failed, kept
on the first screen even when the rest of the card must be shortened to fit it."""

from __future__ import annotations

import json
from importlib import resources

from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.gaps import ReadGap
from workers.diagnosis.timeutil import parse_time
from workers.render.cards import (
    FIRST_SCREEN_CHARS,
    FIRST_SCREEN_LINES,
    build_phase_card,
    card_texts,
    render_phase_card,
    screen_size,
)

# ReadGap texts as the collector makes them from the reader's errors (workers/kube/reader.py
# `ReadError.describe`): a 500, a 403, a timeout.
GAPS = {
    "pods": ReadGap(kind="unavailable", text="unavailable (HTTP 500)"),
    "events": ReadGap(kind="forbidden", text="permission denied (list events)", detail="events is forbidden"),
    "resourceclaims": ReadGap(kind="unavailable", text="unavailable (timeout after 10 s)"),
}


def _card(gaps: dict[str, ReadGap], name: str = "l5-job-oomkilled") -> list[dict]:
    doc = json.loads((resources.files("workers") / "examples" / f"{name}.json").read_text())
    notes = doc["metadata"]["annotations"]
    d = evaluate(doc["items"], notes["taugrid.io/example-run"], parse_time(notes["taugrid.io/example-now"]),
                 gaps=gaps)
    return render_phase_card(build_phase_card(d, workspace="vision", operator_hints_allowed=False)).blocks


def test_every_failed_read_is_named_in_one_line_within_the_first_screen() -> None:
    blocks = _card(GAPS)
    said = [t for t in card_texts(blocks) if "Could not read" in t]
    assert said == ["⚠️ Could not read: pods (HTTP 500), events (permission denied), "
                    "resourceclaims (timeout after 10 s)"]
    chars, lines = screen_size(blocks)
    assert chars <= FIRST_SCREEN_CHARS and lines <= FIRST_SCREEN_LINES


def test_no_failed_read_no_line() -> None:
    assert not any("Could not read" in t for t in card_texts(_card({})))


def test_a_hostile_reason_is_escaped_and_the_line_stays_short() -> None:
    gaps = {"pods": ReadGap(kind="unavailable", text="unavailable (HTTP 429: <!channel> " + "x" * 2000 + ")")}
    blocks = _card(gaps)
    said = next(t for t in card_texts(blocks) if "Could not read" in t)
    assert "<!channel>" not in said and len(said) <= 300
    chars, lines = screen_size(blocks)
    assert chars <= FIRST_SCREEN_CHARS and lines <= FIRST_SCREEN_LINES
