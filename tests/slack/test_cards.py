"""Card rendering: what the phase card shows, and that cluster text can never break out of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.fakes.slack_api import block_errors
from tests.fixtures import k8s
from tests.fixtures.blocks import card_text
from workers.diagnosis.checks import Check, LayerReport
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import Diagnosis
from workers.render.buttons import CardButton, EscalatedNote
from workers.render.cards import (
    FIRST_SCREEN_CHARS,
    FIRST_SCREEN_LINES,
    STATE_EMOJI,
    CardError,
    build_error_card,
    build_phase_card,
    build_workspace_card,
    render_details,
    render_error_card,
    render_phase_card,
    render_workspace_card,
    screen_size,
    validate_blocks,
)
from workers.render.mrkdwn import ELLIPSIS
from workers.render.slots import AutoPostFooter, EscalationSlot, MuteNote, MuteSlot, WatchFooter

from .conftest import example_objects

NOW = k8s.T0 + timedelta(minutes=30)


def diagnose_example(name: str, run: str) -> Diagnosis:
    return evaluate(example_objects(name, judged_at=NOW), run, NOW)




def details_text(context) -> str:
    """What *Details* posts in the thread for this card (rendered and validated as Slack gets it)."""
    details = render_details(context.details)
    assert block_errors(details.blocks) == []
    return card_text(details.blocks)


def test_admission_card_shows_tree_focus_owner_and_what_admission_does_not_prove() -> None:
    d = diagnose_example("l4-job-waiting-for-quota", "llama-ft-7b")
    context = build_phase_card(d, workspace="vision", operator_hints_allowed=False)
    card = render_phase_card(context)
    text = card_text(card.blocks)
    assert block_errors(card.blocks) == []
    assert "🔎 llama-ft-7b · Job" in text
    assert "workspace `vision`" in text and "namespace `team-vision`" in text
    # The condensed tree: done phases on one line, the first incomplete with its summary, the
    # phases waiting behind it on one line (SPEC §7).
    assert "✅ Done: Submitted" in text
    assert "⏳ *First incomplete: Kueue admission* (pending) — 0/1 admitted queue=team-a" in text
    assert "➖ Skipped: RayCluster · DRA · RayJob" in text
    assert "Waiting behind it: ⏳ Scheduling · ⏳ Image pull · ⏳ Init · ⏳ Start · ⏳ Ready" in text
    assert "layer 4: Queue admission and quota" in text
    assert "insufficient unused quota" in text  # the evidence
    assert "*Owner:* queue-owner" in text
    assert "*Transient:* yes" in text
    assert "`tau run status llama-ft-7b`" in text
    assert text.count("waiting on Kueue admission") == 0  # five phases no longer say it on the card
    assert "kubectl" not in text  # no operator hints without the access review
    assert card.text.startswith("llama-ft-7b: Kueue admission")
    # Moved to *Details*: the full tree and what layer 4 does not prove.
    more = details_text(context)
    assert "✅ *Submitted*" in more and "➖ *RayCluster*" in more and "➖ *RayJob status*" in more
    assert "⏳ *Kueue admission* — 0/1 admitted queue=team-a" in more
    assert "admitted is not running" in more
    assert "insufficient unused quota" in more
    assert "kubectl" not in more


def test_operator_hints_only_when_allowed() -> None:
    d = diagnose_example("l4-job-waiting-for-quota", "llama-ft-7b")
    context = build_phase_card(d, workspace="vision", operator_hints_allowed=True)
    shown = details_text(context)  # in *Details*, for those allowed as before
    assert "kubectl get workload -n team-vision" in shown
    assert "&lt;" not in shown  # a hint is shown with the run's own names, or not at all (issue 38)
    assert "kubectl" not in card_text(render_phase_card(context).blocks)


def test_crashloop_rayjob_card() -> None:
    d = diagnose_example("l5-rayjob-head-crashloop", "ray-pretrain-13b")
    context = build_phase_card(d, workspace="vision", operator_hints_allowed=False, watch=True, run_profile=True)
    card = render_phase_card(context)
    text = card_text(card.blocks)
    assert "🔎 ray-pretrain-13b · RayJob" in text
    assert "⚠️ *First incomplete: RayCluster* (warning) — " in text and "layer 5:" in text
    assert "CrashLoopBackOff" in text and "No module named 'flash_attn'" in text
    assert "*Owner:* researcher" in text and "*Transient:* no" in text
    # The pod-level cause RayCluster borrows is named once, not again as its own line.
    assert text.count("1/3 pods: ray-head CrashLoopBackOff") == 1
    assert "⚠️ Start" in text  # …but its state is still shown behind the first incomplete
    # The watch footer and Stop button come from the watch flow, not from a plain card.
    assert "Watching" not in text and not [b for b in card.blocks if b["type"] == "actions"]
    assert "`--run-profile`: no GPU telemetry" in text
    assert "a Running pod means containers started, not progress" in details_text(context)


def test_every_phase_state_has_its_emoji() -> None:
    d = diagnose_example("l5-rayjob-head-crashloop", "ray-pretrain-13b")
    text = details_text(build_phase_card(d, workspace=None, operator_hints_allowed=False))
    for phase in d.phases:
        assert f"{STATE_EMOJI[phase.state]} *{phase.name}*" in text


def test_all_done_card() -> None:
    d = diagnose_example("l7-job-running-healthy", "resnet-sweep-3")
    context = build_phase_card(d, workspace="vision", operator_hints_allowed=False)
    text = card_text(render_phase_card(context).blocks)
    assert "*Every phase is done or skipped* · next is layer 7" in text
    assert "*Transient:* —" in text
    assert "Running container proves progress" in details_text(context)


def test_a_succeeded_run_says_so_and_what_its_evidence_is_not_what_to_check() -> None:
    d = diagnose_example("l7-job-succeeded", "clip-eval-2")
    context = build_phase_card(d, workspace="vision", operator_hints_allowed=False)
    text = card_text(render_phase_card(context).blocks)
    assert "✅ clip-eval-2 · Job" in text and "*The run succeeded*" in text
    assert "*Evidence:* the Job's status says it completed" in text
    assert "check" not in text.lower() and "/tau logs" not in text
    assert "OOMKilled" not in text  # an earlier attempt's ✔ row is not on the first screen…
    assert "trainer OOMKilled (exit 137)" in details_text(context)  # …but is never lost


HOSTILE = ("<!channel> <!here> <@U123> <#C999> <!subteam^S1> <https://evil.example|click> "
           "@here www.evil.example")


def hostile_crashloop() -> list[dict]:
    """A crash-looping Job whose pod message, container name and event carry markup."""
    j = k8s.job("r", at=0, active=1)
    wl = k8s.workload(j, at=1)
    pod = k8s.job_pod(j, node="aks-a100-0", containers=[
        k8s.crash_loop("trainer", exit_code=1, restart_count=3, message=HOSTILE * 40)])
    return [j, wl, pod]


def test_cluster_text_cannot_mention_link_or_overflow() -> None:
    d = evaluate(k8s.kube_list(*hostile_crashloop()), "r", NOW)
    assert any("<!channel>" in e for e in d.evidence) or "<!channel>" in d.phase("Container start").summary
    card = render_phase_card(build_phase_card(d, workspace="vision", operator_hints_allowed=True))
    validate_blocks(card.blocks)
    assert block_errors(card.blocks) == []
    text = card_text(card.blocks) + card.text
    for markup in ("<!channel>", "<!here>", "<@U123>", "<#C999>", "<!subteam", "<https://"):
        assert markup not in text
    assert "&lt;!channel&gt;" in text and "&lt;@\u200bU123&gt;" in text
    assert "@\u200bhere" in text  # bare @here disarmed too
    assert ELLIPSIS in text  # 40 copies were cut, visibly
    for block in card.blocks:
        for obj in [block.get("text"), *(block.get("fields") or []), *(block.get("elements") or [])]:
            if isinstance(obj, dict) and obj.get("type") == "mrkdwn":
                assert obj.get("verbatim") is True


def test_long_everything_stays_within_limits() -> None:
    d = evaluate(k8s.kube_list(*hostile_crashloop()), "r", NOW)
    huge = "x" * 10_000
    d = d.model_copy(update={
        "next_action": huge,
        "evidence": [huge] * 30,
        "phases": [p.model_copy(update={"summary": huge}) for p in d.phases],
    })
    card = render_phase_card(build_phase_card(d, workspace="w" * 63, operator_hints_allowed=True))
    assert block_errors(card.blocks) == []
    assert len(card.blocks) <= 50

    # Every footer at once as well (a watched, auto-posted, muted, escalated card): the first
    # screen still keeps SPEC §7's bounds, and the whole text is still in *Details*.
    context = build_phase_card(d, workspace="w" * 63, operator_hints_allowed=True, diagnosed_at=NOW, requests=9)
    stop = CardButton(action_id="stop_watching", text="⏹️ Stop watching", value="watch-" + "0" * 24)
    context = (context.with_slot(WatchFooter(status="👀 *Watching* every 30 s until 11:00 UTC; the thread gets "
                                             "one line per phase change.", updated="last refreshed 10:30:00 UTC",
                                             stop_button=stop))
               .with_slot(AutoPostFooter(status="🚨 *Auto-posted by taubot*: stalled at *Container start* "
                                                "(crash.exit) since 2026-11-30 10:01:00Z."))
               .with_slot(MuteSlot(note=MuteNote(by="U012ALICE", until=NOW)))
               .with_slot(EscalationSlot(note=EscalatedNote(owner="researcher", by="U012ALICE", at=NOW))))
    card = render_phase_card(context)
    assert block_errors(card.blocks) == []
    chars, lines = screen_size(card.blocks)
    assert chars <= FIRST_SCREEN_CHARS and lines <= FIRST_SCREEN_LINES
    text = card_text(card.blocks)
    assert "*First incomplete: Container start*" in text and "*Owner:* researcher" in text
    assert "xxx" + ELLIPSIS in text  # cut visibly…
    assert "x" * 1500 in details_text(context)  # …and in *Details* at its own, larger limits


def test_a_card_takes_each_feature_only_through_its_typed_slot() -> None:
    d = diagnose_example("l4-job-waiting-for-quota", "llama-ft-7b")
    context = build_phase_card(d, workspace="vision", operator_hints_allowed=False)
    with pytest.raises(TypeError):
        context.with_slot("🔕 muted", kind=MuteSlot)  # type: ignore[arg-type]
    muted = context.with_slot(MuteSlot(note=MuteNote(by="U012ALICE", until=NOW)))
    assert "🔕 Auto-posts muted by @U012ALICE until 2026-11-30 10:30 UTC." in card_text(
        render_phase_card(muted).blocks)
    assert muted.escalation == context.escalation and muted.watch is None  # no other slot touched


def test_a_cut_never_splits_an_entity_or_leaves_a_code_span_open() -> None:
    from workers.render.mrkdwn import clip

    assert clip("abc &lt;!channel&gt; def", 7) == "abc" + ELLIPSIS  # not "abc &l…"
    cut = clip("run `/tau logs some-very-long-run-name --previous` now", 20)
    assert cut.count("`") == 2 and cut.endswith(ELLIPSIS) and len(cut) <= 20


def test_unreachable_layers_are_not_shown_as_failures() -> None:
    report = LayerReport(layer=1, workspace="vision", ok=False, summary="API server: unavailable",
                         checks=[Check(name="API server", state="failed", detail="unavailable")],
                         owner="platform", transient=True, next_action="retry")
    from workers.collect.investigate import unreachable_diagnosis

    d = unreachable_diagnosis("r", "team-vision", report)
    context = build_phase_card(d, workspace="vision", operator_hints_allowed=False)
    text = card_text(render_phase_card(context).blocks)
    assert "*First incomplete: Workspace connection* · layer 1" in text
    assert text.count("API server: unavailable") == 1  # the same evidence line is shown once
    assert "Layers 2–8 were not checked" in text and "unreachable, not failing" in text
    assert "Pod scheduling" not in text and "Pod scheduling" not in details_text(context)
    assert "*Owner:* platform" in text


def test_error_card() -> None:
    card = render_error_card(build_error_card(command="/tau status r", error="boom <!channel>",
                                              job_id="tau-1", attempts=3))
    text = card_text(card.blocks)
    assert "`/tau status r` failed after 3 attempts." in text
    assert "boom &lt;!channel&gt;" in text and "`tau-1`" in text


def test_workspace_card() -> None:
    report = LayerReport(layer=2, workspace="vision", ok=False, summary="TauWorkspace vision: phase Degraded",
                         checks=[Check(name="phase", state="failed", detail="Degraded"),
                                 Check(name="RBACReady", state="ok", detail="True")],
                         owner="platform", transient=False, next_action="Platform action", phase="Degraded")
    text = card_text(render_workspace_card(build_workspace_card(
        report, command="/tau workspace status vision")).blocks)
    assert "layer 2 ❌ failed" in text
    assert "❌ *phase* — Degraded" in text and "✅ *RBACReady* — True" in text
    assert "*Owner:* platform" in text


@pytest.mark.parametrize("blocks", [
    [],
    [{"type": "nonsense"}],
    [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}],
    [{"type": "section", "text": {"type": "mrkdwn", "text": "hi <!channel>"}}],
    [{"type": "divider"}] * 51,
    [{"type": "section", "fields": [{"type": "mrkdwn", "text": "x" * 2001}]}],
])
def test_validate_blocks_refuses(blocks: list[dict]) -> None:
    with pytest.raises(CardError):
        validate_blocks(blocks)


def test_diagnosed_at_footer() -> None:
    d = diagnose_example("l4-job-waiting-for-quota", "llama-ft-7b")
    at = datetime(2026, 11, 30, 10, 30, tzinfo=UTC)
    text = card_text(render_phase_card(build_phase_card(
        d, workspace="vision", operator_hints_allowed=False, diagnosed_at=at, requests=6)).blocks)
    assert "diagnosed 2026-11-30 10:30:00 UTC · 6 Kubernetes API requests as you" in text


def test_gpu_profile_on_the_card_shows_observed_values_and_real_zero() -> None:
    from tests.fixtures.dcgm import Gpu, scrape
    from workers.diagnosis.profile_build import build_profile

    node = "aks-gpupool-00000000-vmss000000"
    job = k8s.job("train", gpus=2)
    pod = k8s.job_pod(job, node=node)
    name = pod["metadata"]["name"]
    body = scrape([Gpu(0, pod=name, namespace=k8s.NS, container="trainer", util=87, fb_used=40960, node=node),
                   Gpu(1, pod=name, namespace=k8s.NS, container="trainer", util=0, fb_used=0, node=node),
                   # another team's pod on the same node: must not count (dcgm-exporter.md labels)
                   Gpu(2, pod="other-0", namespace="team-speech", container="main", util=100,
                       fb_used=70000, node=node)], hostname=node)
    profile = build_profile([pod], {}, {node: body}, False, None)
    d = diagnose_example("l7-job-running-healthy", "resnet-sweep-3")
    context = build_phase_card(d, workspace="vision", operator_hints_allowed=False, run_profile=True,
                               profile=profile)
    first = card_text(render_phase_card(context).blocks)
    assert "GPU run profile in *Details*" in first and "43.5" in first  # the headline on the card
    text = details_text(context)  # every key in *Details*
    assert "*GPU run profile*" in text
    assert "`gpu_activity`: active" in text
    assert "`gpu_utilization`:" in text and "43.5" in text and "87" in text
    assert "`cuda_compute_process`: unavailable" in text
