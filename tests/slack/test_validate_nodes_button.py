"""Issue 14: *Validate these nodes* on a card whose answer is layer 6 (GPU/node health).

Real HTTP to the app, real Redis and rq, the Kubernetes API emulator (which plays
the kubelet finishing each validation pod, through its `on_change` hook) and the
fake Slack. The button exists only for a requester whose RBAC may create the
pods; a press runs them as the presser, whatever the requester could do.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from bench.synth import RUN_NAME, synthetic_snapshot
from tests.diagnosis.test_node_health import HARDWARE_XID, node
from tests.fakes.kube_api import KubeEmulator, running_emulator
from tests.fakes.slack_signing import block_action_body
from tests.fixtures.blocks import card_text
from tests.live.conftest import workspace_objects, write_descriptor
from workers.contracts.ids import VALIDATE_NODES_ACTION

from .conftest import ALICE, CHANNEL, SlackApp
from .test_watch import BOB, CAROL, identity_file

VALIDATION_NS = "taugrid-validation"


@pytest.fixture
def app(slack_app_factory: Callable[..., SlackApp], tmp_path: Path) -> SlackApp:
    return slack_app_factory(identity_file=identity_file(tmp_path))


def run_on_a_node_with_xid_79() -> list[dict[str, Any]]:
    """A 16-pod Job on two A100 nodes (bench/synth.py shapes), one of them with the NPD
    condition XIDErrors=True for Xid 79 (GPU fallen off the bus). Each node carries the
    kubelet's `kubernetes.io/hostname` label, as every real node does."""
    items = synthetic_snapshot(16, "Job", failing_pod_index=None)["items"]
    names = sorted({p["spec"]["nodeName"] for p in items if p.get("kind") == "Pod"})
    nodes = [node(**{"metadata.name": n}) for n in names]
    nodes[0] = {**HARDWARE_XID, "metadata": {**HARDWARE_XID["metadata"], "name": names[0]}}
    for n in nodes:
        n["metadata"]["labels"] = {**n["metadata"]["labels"], "kubernetes.io/hostname": n["metadata"]["name"]}
    return [*workspace_objects(), *items, *nodes]


@contextmanager
def cluster(app: SlackApp) -> Iterator[KubeEmulator]:
    with running_emulator(run_on_a_node_with_xid_79()) as emu:
        write_descriptor(app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        emu.on_change.append(lambda kind, obj: kubelet(emu, kind, obj))
        yield emu


def kubelet(emu: KubeEmulator, kind: str, obj: dict[str, Any]) -> None:
    """Play the kubelet: a validation pod runs to its end as soon as it is created; on the Xid 79
    node `dcgmi diag` fails (its table line as DCGM 4 prints it)."""
    if kind != "ADDED" or obj.get("kind") != "Pod" or obj["metadata"].get("namespace") != VALIDATION_NS:
        return
    failed = obj["spec"]["nodeName"].endswith("000000")
    obj["status"] = {"phase": "Failed" if failed else "Succeeded", "containerStatuses": [
        {"name": "validate", "state": {"terminated": {"exitCode": 1 if failed else 0,
                                                       "reason": "Error" if failed else "Completed"}}}]}
    if failed:
        emu.pod_logs[(VALIDATION_NS, obj["metadata"]["name"], None)] = (
            "Successfully ran diagnostic for group.\n"
            "| Deployment              | Fail - GPU 3: DCGM_FR_GPU_LOST                         |\n")
    emu.upsert(obj)


def pod_creates(emu: KubeEmulator) -> int:
    """Validation pods the API server was asked to create (its dry run of one left out)."""
    return len([r for r in emu.requests if r.method == "POST" and r.path.endswith("/pods")
                and "dryRun" not in r.query])


def the_card(app: SlackApp) -> dict[str, Any]:
    """The card's postMessage parameters, with the ts Slack answered (where its button is)."""
    [card] = [c for c in app.fake.calls_to("chat.postMessage") if c.params.get("thread_ts")]
    return {**card.params, "ts": card.response["ts"]}


def buttons(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    blocks = card["blocks"] if isinstance(card["blocks"], list) else json.loads(card["blocks"])
    return {e["action_id"]: e for b in blocks if b["type"] == "actions" for e in b["elements"]}


def press(app: SlackApp, card: dict[str, Any], user: str, response_id: str, *, channel: str = CHANNEL,
          message_ts: str | None = None) -> None:
    """Press the card's button as Slack would (on the card's own message unless told otherwise)."""
    button = buttons(card)[VALIDATE_NODES_ACTION]
    body = block_action_body(VALIDATE_NODES_ACTION, button["value"], user_id=user, channel_id=channel,
                             message_ts=message_ts or card["ts"], thread_ts=card["thread_ts"],
                             message={"blocks": []}, response_url=app.fake.response_url(response_id))
    status, _, seconds = app.post(body)
    assert status == 200 and seconds < 3
    app.work()


def test_layer_six_card_offers_validation_and_a_press_runs_the_pods_as_the_presser(app: SlackApp) -> None:
    with cluster(app) as emu:
        app.command(f"status {RUN_NAME}")
        app.work()
        card = the_card(app)
        text = card_text(card["blocks"] if isinstance(card["blocks"], list) else json.loads(card["blocks"]))
        assert "*First incomplete: GPU/node health*" in text
        assert buttons(card)[VALIDATE_NODES_ACTION]["text"]["text"] == "🩺 Validate these 2 nodes"
        reviews = [r.body["spec"]["resourceAttributes"] for r in emu.requests
                   if r.path.endswith("/selfsubjectaccessreviews")
                   and r.header_values("Impersonate-User") == ["alice@example.com"]]
        assert {"verb": "create", "resource": "pods", "group": "", "namespace": VALIDATION_NS} in reviews

        emu.clear_requests()
        press(app, card, BOB, "r-bob")
        creates = [r for r in emu.requests if r.method == "POST" and r.path.endswith("/pods")
                   and "dryRun" not in r.query]
        assert len(creates) == 2
        assert all(r.header_values("Impersonate-User") == ["bob@example.com"] for r in creates)
        assert sorted(r.body["spec"]["nodeName"] for r in creates) == sorted(
            n["metadata"]["name"] for n in emu.objects() if n["kind"] == "Node")
        assert not [o for o in emu.objects() if o["kind"] == "Pod" and o["metadata"]["namespace"] == VALIDATION_NS]
        replies = app.fake.thread(CHANNEL, card["thread_ts"])
        result = card_text(replies[-1]["blocks"])
        assert "Cluster validation · vision · layer 6 ❌ failed" in result
        assert "1/2 nodes healthy (need 2)" in result
        assert "DCGM_FR_GPU_LOST" in result
        assert "pods created as `bob@\u200bexample.com`" in result  # a zero-width space: no mailto link


def test_no_button_for_a_requester_who_may_not_create_the_pods(app: SlackApp) -> None:
    with cluster(app) as emu:
        emu.forbid("create", "pods", user="alice@example.com", namespace=VALIDATION_NS)
        app.command(f"status {RUN_NAME}")
        app.work()
        card = the_card(app)
        assert VALIDATE_NODES_ACTION not in buttons(card)


def test_a_presser_without_the_rbac_gets_a_refusal_and_no_pod(app: SlackApp) -> None:
    with cluster(app) as emu:
        app.command(f"status {RUN_NAME}", user_id=ALICE)
        app.work()
        card = the_card(app)
        emu.forbid("create", "pods", user="carol@example.com", namespace=VALIDATION_NS)
        emu.clear_requests()
        press(app, card, CAROL, "r-carol")
        assert [r for r in emu.requests if r.method == "POST" and r.path.endswith("/pods")] == []
        result = card_text(app.fake.thread(CHANNEL, card["thread_ts"])[-1]["blocks"])
        assert "refused: permission denied (create pods) in namespace taugrid-validation" in result
        assert "no pod was created" in result
        press(app, card, BOB, "r-bob")  # a refused press did not spend the offer
        assert len([r for r in emu.requests if r.method == "POST" and r.path.endswith("/pods")
                    and "dryRun" not in r.query]) == 2


def test_a_tampered_button_value_is_refused_before_the_queue(app: SlackApp) -> None:
    with cluster(app):
        app.command(f"status {RUN_NAME}")
        app.work()
        card = the_card(app)
        forged = {**card, "blocks": [{"type": "actions", "elements": [
            {**buttons(card)[VALIDATE_NODES_ACTION], "value": "forged.deadbeef"}]}]}
        queued = len(app.queue.job_ids)
        press(app, forged, BOB, "r-forged")
        assert len(app.queue.job_ids) == queued
        [reply] = app.fake.wait_for_responses("r-forged")
        assert "taubot did not issue this button, so nothing was validated" in reply["text"]


def test_an_offer_is_single_use_and_counts_only_on_its_own_card(app: SlackApp) -> None:
    """Issue 26.6: a press replayed, from another channel or on another message creates no pod;
    each is told why, privately."""
    with cluster(app) as emu:
        app.command(f"status {RUN_NAME}")
        app.work()
        card = the_card(app)

        press(app, card, BOB, "r-other-channel", channel="C0OTHERCH")
        press(app, card, BOB, "r-other-message", message_ts="1764464220.000100")
        assert pod_creates(emu) == 0
        for response_id in ("r-other-channel", "r-other-message"):
            [reply] = app.fake.wait_for_responses(response_id)
            assert "not pressed on the card taubot offered it on" in reply["text"]
        press(app, card, BOB, "r-first")
        assert pod_creates(emu) == 2
        press(app, card, BOB, "r-replay")
        press(app, card, ALICE, "r-second")
        assert pod_creates(emu) == 2  # neither the replay nor a second presser created any
        for response_id in ("r-replay", "r-second"):
            [reply] = app.fake.wait_for_responses(response_id)
            assert f"already validated from this card (pressed by <@{BOB}>)" in reply["text"]
        results = [m for m in app.fake.thread(CHANNEL, card["thread_ts"])
                   if "Cluster validation" in card_text(m.get("blocks") or [])]
        assert len(results) == 1


def test_an_offer_that_ran_nothing_is_not_spent_and_works_once_the_namespace_admits_the_pods(
        app: SlackApp) -> None:
    """Pod Security refuses the privileged validation pod (the namespace not yet labelled
    `pod-security.kubernetes.io/enforce=privileged`): the press says so and creates no pod — and
    the single-use offer stays unspent, so the same button validates once the platform fixed the
    namespace (it said 'already validated' for nodes nothing had validated)."""
    from tests.live.test_cluster_validate import pod_security

    enforced = [True]
    refuse = pod_security("baseline")
    with cluster(app) as emu:
        emu.admit("pods", lambda pod, caller: refuse(pod, caller) if enforced[0] else None)
        app.command(f"status {RUN_NAME}")
        app.work()
        card = the_card(app)

        press(app, card, BOB, "r-refused")
        assert pod_creates(emu) == 0
        refusal = card_text(app.fake.thread(CHANNEL, card["thread_ts"])[-1]["blocks"])
        assert 'violates PodSecurity "baseline:latest"' in refusal and "no pod was created" in refusal
        enforced[0] = False  # the platform labels the namespace privileged
        press(app, card, BOB, "r-after-fix")
        assert pod_creates(emu) == 2
        result = card_text(app.fake.thread(CHANNEL, card["thread_ts"])[-1]["blocks"])
        assert "1/2 nodes healthy" in result, result
        press(app, card, ALICE, "r-third")  # it ran: now the offer is spent
        assert pod_creates(emu) == 2
        [reply] = app.fake.wait_for_responses("r-third")
        assert f"already validated from this card (pressed by <@{BOB}>)" in reply["text"]
