"""Hostile text in what a waiting or preempted run's card now says (issue 35): Kueue's preemption
message, the preemptor's event, the Workload's pending message and the ClusterQueue's conditions.

Anyone who may write a Workload's status or an Event in the namespace (a controller, a webhook,
a person with the RBAC) controls these texts; the same generated corpus as tests/slack/test_hostile.py
(mentions, links, fences, bidi and zero-width characters, 10 kB strings) goes into each, and the
card and its *Details* must neither mention, link nor hold a line taubot did not write. Shapes:
tests/diagnosis/test_preemption.py (Kueue's preemptionMessage, events.k8s.io/v1 `Preempted`),
tests/fixtures/k8s.py (Workload, ClusterQueue).
"""

from __future__ import annotations

import json

from tests.diagnosis.test_preemption import message, preempted, preemptor
from tests.fixtures import k8s
from tests.fixtures.secrets import FORBIDDEN
from workers.diagnosis.evaluate import evaluate
from workers.render.cards import build_phase_card, render_details, render_phase_card

from .conftest import EXAMPLE_NOW
from .test_hostile import OUR_LINE_STARTS, card_lines, corpus


def hostile_preempted(text: str) -> list[dict]:
    """A preempted, requeued run whose every Kueue text carries ``text``: the conditions' messages
    (after Kueue's own words, so the message still parses), the event's note, the preemptor's
    readable Workload's conditions, and a ClusterQueue whose conditions say it too."""
    objects = preempted("InClusterQueue", event=True, readable=True)
    for obj in objects:
        for cond in (obj.get("status") or {}).get("conditions") or []:
            cond["message"] = f"{cond.get('message') or ''}{text}"
        if obj.get("kind") == "Event" or "note" in obj:
            obj["note"] = f"{obj.get('note') or ''}; {text}"
    cq = k8s.cluster_queue("h100-shared")
    for cond in (cq.get("status") or {}).setdefault("conditions", [{"type": "Active", "status": "True"}]):
        cond["message"] = text
    return [*objects, cq]


def test_hostile_kueue_texts_never_mention_link_or_forge_a_line_on_a_preempted_runs_card() -> None:
    checked, shown = 0, 0
    for text in corpus(300, seed=3535):
        d = evaluate(hostile_preempted(text), "train", EXAMPLE_NOW)
        assert d.phase("Kueue admission").preemption is not None
        context = build_phase_card(d, workspace="vision", operator_hints_allowed=True)
        for blocks in (render_phase_card(context).blocks, render_details(context.details).blocks):
            raw = json.dumps(blocks, ensure_ascii=False)
            for bad in ("<!", "<@", "<#", "<http", "<https"):
                assert bad not in raw, (bad, text[:80])
            shown += "&lt;!" in raw or "&lt;@" in raw  # the hostile text is on the card, escaped
            assert not [c for c in FORBIDDEN if c in raw], text[:80]
            inside_block = False
            for line in card_lines(blocks):
                if line.startswith("```"):
                    inside_block = not inside_block or line.endswith("```") and len(line) > 3
                    continue
                if inside_block or not line.strip():
                    continue
                assert not line.startswith(("✅ *Ready* — every", "⚠️ *Owner*")), repr(line[:80])
                assert line.startswith(OUR_LINE_STARTS) or line[:1].isalpha() or line[:1] in "🔀⏸", \
                    repr(line[:80])
        checked += 1
    assert checked == 300 and shown > 100


def test_a_preemption_message_of_10_kb_is_parsed_and_clipped_not_posted_whole() -> None:
    _urgent, pre = preemptor()
    huge = message("InClusterQueue", pre, priorities=True) + "; " + "<!channel>" * 1000
    objects = preempted("InClusterQueue", event=True, readable=False)
    for obj in objects:
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") in ("Evicted", "Preempted"):
                cond["message"] = huge
    d = evaluate(objects, "train", EXAMPLE_NOW)
    context = build_phase_card(d, workspace="vision", operator_hints_allowed=False)
    raw = json.dumps(render_phase_card(context).blocks, ensure_ascii=False)
    assert "<!channel>" not in raw and raw.count("&lt;!channel&gt;") < 50
