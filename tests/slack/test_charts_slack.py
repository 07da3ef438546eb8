"""`/tau status` of a training run posts its loss curve as a PNG in the card's thread (files
upload v2 through the fake Slack: getUploadURLExternal, the upload POST, completeUploadExternal)."""

from __future__ import annotations

import io
from collections.abc import Callable

from PIL import Image

from tests.fakes.kube_api import KubeEmulator
from tests.fixtures.blocks import card_text

from .conftest import CHANNEL, SlackApp, example_objects
from .test_end_to_end import cluster, parent_and_card


def seed_training_logs(emu: KubeEmulator, objects: list[dict], run: str = "resnet-sweep-3") -> None:
    """The run's pods log HF Trainer dicts (transformers 4.46 ProgressCallback.on_log) from 10:20 to
    10:28, a minute apart, the loss falling from 2.0 to 1.2."""
    for pod in [o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"].startswith(f"{run}-")]:
        container = pod["spec"]["containers"][0]["name"]
        emu.pod_logs[(pod["metadata"]["namespace"], pod["metadata"]["name"], container)] = "".join(
            f"2026-11-30T10:{20 + i}:00.000000000Z {{'loss': {2 - i / 10}, 'grad_norm': 1.2, "
            f"'learning_rate': 4e-05, 'epoch': {i / 10}}}\n" for i in range(9))


def test_card_first_then_the_curve_in_the_thread_then_the_card_links_it(slack_app: SlackApp) -> None:
    """The card does not wait for matplotlib: it is posted before any upload call; the PNG (loss
    above, learning rate below) is uploaded into its thread; then the card is edited once to link
    the file by the permalink the upload answered."""
    objects = example_objects("l7-job-running-healthy")
    with cluster(slack_app, objects) as emu:
        seed_training_logs(emu, objects)
        status, _, _ = slack_app.command("status resnet-sweep-3")
        assert status == 200
        slack_app.work()
        parent, card = parent_and_card(slack_app)
    [png] = slack_app.fake.files()
    assert (png["filename"], png["channel"], png["thread_ts"]) == ("resnet-sweep-3-loss-20261130T103000Z.png",
                                                                  CHANNEL, parent["ts"])
    assert png["title"] == "resnet-sweep-3: loss curve"
    image = Image.open(io.BytesIO(png["content"]))
    image.load()
    assert image.size == (900, 990)  # the learning rate (4e-05 in every dict) and the time panel beneath
    calls = slack_app.fake.calls
    methods = [c.method for c in calls]
    card_post = next(i for i, c in enumerate(calls)
                     if c.method == "chat.postMessage" and c.params.get("thread_ts") == parent["ts"])
    complete = methods.index("files.completeUploadExternal")
    assert card_post < methods.index("files.getUploadURLExternal") < complete
    permalink = calls[complete].response["files"][0]["permalink"]
    [edit] = [i for i, c in enumerate(calls) if c.method == "chat.update" and c.params.get("ts") == card["ts"]]
    assert edit > complete
    assert f"📈 <{permalink}|loss curve> (PNG, in this thread)" in card_text(card["blocks"])
    assert "📈" not in card_text(calls[card_post].params["blocks"])  # nothing of it before the upload


def test_a_failed_upload_is_said_on_the_card(slack_app: SlackApp) -> None:
    objects = example_objects("l7-job-running-healthy")
    slack_app.fake.fail_next("files.getUploadURLExternal", "not_allowed_token_type")
    with cluster(slack_app, objects) as emu:
        seed_training_logs(emu, objects)
        slack_app.command("status resnet-sweep-3")
        slack_app.work()
        _, card = parent_and_card(slack_app)
    assert slack_app.fake.files() == []
    assert "The loss curve could not be attached (not_allowed_token_type)." in card_text(card["blocks"])


def test_the_link_edit_waits_for_the_workspaces_budget_as_its_own_job_not_in_the_worker(
        slack_app_factory: Callable[..., SlackApp]) -> None:
    """chat.update is tier 3 (about 50 a minute per workspace): once other cards used the budget,
    the edit that links the picture would wait about 1.2 s. The status job does not hold the worker
    for it (bench_warm: every next command waited too, ~1.2 s command → card at any RTT): it
    reserves the budget's next slot and leaves the edit to a job of its own at that time."""
    app = slack_app_factory(slack_updates_per_minute=1)
    objects = example_objects("l7-job-running-healthy")
    with cluster(app, objects) as emu:
        seed_training_logs(emu, objects)
        pacer = app.services.pacer
        assert pacer is not None
        while pacer.try_acquire("chat.update", "C0ELSEWHERE") == 0:  # other cards took the budget
            pass
        assert app.command("status resnet-sweep-3")[0] == 200
        app.work()
        _, card = parent_and_card(app)
        assert "📈" not in card_text(card["blocks"]) and app.fake.files()  # uploaded, not yet linked
        [link] = app.timed()
        assert link.startswith("charts-")
        app.clock.advance(65)  # the reserved slot has come (the budget refills on the app's clock)
        assert app.run_timed(link) == 1
        _, card = parent_and_card(app)
    assert "|loss curve> (PNG, in this thread)" in card_text(card["blocks"])
    assert app.timed() == []
