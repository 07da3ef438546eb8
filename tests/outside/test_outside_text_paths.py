"""Issue 34: secrets planted in every outside field of every bundled example never reach a card.

Every bundled example (workers/examples: real-shaped Kueue, KubeRay, kubelet and scheduler
objects, see their README) gets a secret planted in every `message`/`note` string — condition
and event messages, container termination messages, the RayJob's status message — and in the
run's log lines; the diagnosis is then rendered as the phase card, its *Details*, a monitor
group card and the escalation handoff, and every Block Kit text field (and the notification text) is
searched for any planted secret in any form. 0 found.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures import k8s
from tests.fixtures.secrets import CORPUS, Planted, found_anywhere
from tests.slack.conftest import example_objects
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import LogEvidence
from workers.flows.escalation import render_handoff
from workers.records.offers import AccessCheck, StoredDiagnosis
from workers.render.cards import (
    build_group_card,
    build_phase_card,
    card_texts,
    render_details,
    render_group_card,
    render_phase_card,
)

EXAMPLES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "workers" / "examples").glob("*.json"))
NOW = k8s.T0 + timedelta(minutes=30)
# One secret of each kind of hiding: as printed, behind a colour code, with a zero-width
# character, in a termination message with a line break inside the token.
SHAPES = [p for p in CORPUS if p.shape in {
    "hf token in env", "aws key in termination message", "slack bot token", "postgres url with password",
    "url password with slash", "kubeconfig client-key-data", "cookie header", "wandb login key",
    "azure sas token", "bearer header", "mysql -p password", "base64 of an env line"}]


def _hidden(planted: Planted, how: str) -> str:
    secret = planted.secrets[0]
    half = len(secret) // 2
    if how == "ansi":
        return planted.line.replace(secret, secret[:half] + "\x1b[1m" + secret[half:])
    if how == "zero-width":
        return planted.line.replace(secret, secret[:half] + "\u200d" + secret[half:])
    return planted.line


def _plant(node: Any, text: str) -> Any:
    if isinstance(node, dict):
        return {k: (f"{v} {text}" if k in ("message", "note") and isinstance(v, str) else _plant(v, text))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_plant(v, text) for v in node]
    return node


def _run_name(objects: list[dict[str, Any]], example: str) -> str:
    for obj in objects:
        if obj.get("kind") in ("RayJob", "Job") and not obj["metadata"].get("ownerReferences"):
            return obj["metadata"]["name"]
    return example  # a not-found example: the name asked for




@pytest.mark.parametrize("how", ["printed", "ansi", "zero-width"])
@pytest.mark.parametrize("example", EXAMPLES)
def test_no_planted_secret_reaches_any_card(example: str, how: str) -> None:
    seen: list[str] = []
    for planted in SHAPES:
        text = _hidden(planted, how)
        objects = _plant(example_objects(example, judged_at=NOW), text)
        logs = LogEvidence(lines=[(None, "{'loss': 1.2, 'learning_rate': 4e-05, 'epoch': 0.5}"), (None, text),
                                  (None, "Traceback (most recent call last):"), (None, f"RuntimeError: {text}")])
        d = evaluate(objects, _run_name(objects, example), NOW, logs=logs)
        context = build_phase_card(d, workspace="vision", operator_hints_allowed=True)
        card = render_phase_card(context)
        seen += [card.text, *card_texts(card.blocks)]
        if context.details is not None:
            details = render_details(context.details)
            seen += [details.text, *card_texts(details.blocks)]
        group = render_group_card(build_group_card(f"ClusterQueue {text}", [(d.run.name, text, text)],
                                                   status=""))
        seen += [group.text, *card_texts(group.blocks)]
        record = StoredDiagnosis(
            id="r1", run=d.run.name, namespace=d.run.namespace, kind=d.run.kind, workspace="vision",
            layer=d.layer, layer_title=d.layer_info.title, first_incomplete=d.first_incomplete,
            evidence=[*d.evidence, text], next_action=text, owner=d.owner, transient=d.transient,
            submitted_by=None, access=AccessCheck(resource="jobs", group="batch", namespace="team-vision",
                                                  name=d.run.name),
            channel="C012ABCDEF", thread_ts="1764464220.000100", requested_by="U012ALICE",
            diagnosed_at=NOW)
        for submitter in (None, "U012ALICE"):
            handoff = render_handoff(record, clicker="U012ALICE", route=None, submitter=submitter,
                                     thread_link=None)
            seen += [handoff.text, *card_texts(handoff.blocks)]
        seen += [d.next_action, *d.evidence, *(p.summary for p in [*d.phases, *d.checks])]
    leaked = sorted({s for t in seen for s in found_anywhere(t.replace("\u200b", ""))})
    assert leaked == []
    assert any("[redacted]" in t for t in seen)  # the planted text did reach the cards, redacted
