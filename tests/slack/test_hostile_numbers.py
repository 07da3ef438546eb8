"""Values in a log may be huge, NaN or infinite (SPEC §11, issue 34 item 3): a loss of `1.7e308`
made matplotlib raise (`ValueError: arange: cannot compute length`) after the card was posted, and
the user got an error card besides. Now the chart leaves out what it cannot draw and the thread
says so; the card stands and no error card follows."""

from __future__ import annotations

import io
import math

from PIL import Image

from tests.fakes.kube_api import KubeEmulator
from workers.diagnosis.eta import training_eta
from workers.diagnosis.progress import parse_progress, sparkline
from workers.render.charts import left_out, left_out_text, loss_chart
from workers.render.forecast import duration_text, eta_text

from .conftest import CHANNEL, SlackApp, example_objects
from .test_cards import card_text
from .test_end_to_end import cluster

RUN = "resnet-sweep-3"
HOSTILE = {3: "1.7e308", 5: "nan", 7: "inf"}  # minutes past 10:20 whose loss no chart can draw


def seed_hostile_logs(emu: KubeEmulator, objects: list[dict], losses: dict[int, str]) -> None:
    """HF Trainer dicts (transformers 4.46 ProgressCallback.on_log: str(dict), so `nan`, `inf` and
    `1.7e308` appear as Python prints them) a minute apart from 10:20, the loss falling from 2.0,
    with ``losses`` replacing the loss of those minutes."""
    for pod in [o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"].startswith(f"{RUN}-")]:
        container = pod["spec"]["containers"][0]["name"]
        emu.pod_logs[(pod["metadata"]["namespace"], pod["metadata"]["name"], container)] = "".join(
            f"2026-11-30T10:{20 + i}:00.000000000Z {{'loss': {losses.get(i, 2 - i / 10)}, "
            f"'learning_rate': 4e-05, 'epoch': {i / 10}}}\n" for i in range(9))


def thread_texts(slack_app: SlackApp) -> tuple[list[dict], list[str]]:
    """The thread's messages (card first) and each one's text with its blocks' text."""
    posts = [p for p in slack_app.fake.calls_to("chat.postMessage") if p.response.get("ok")]
    [parent] = [p for p in posts if not p.params.get("thread_ts")]
    replies = slack_app.fake.thread(CHANNEL, parent.response["ts"])
    return replies, [f"{m.get('text', '')}\n{card_text(m.get('blocks') or [])}".strip() for m in replies]


def test_a_huge_nan_and_inf_loss_leave_the_card_standing_and_the_thread_says_what_was_left_out(
        slack_app: SlackApp) -> None:
    objects = example_objects("l7-job-running-healthy")
    with cluster(slack_app, objects) as emu:
        seed_hostile_logs(emu, objects, HOSTILE)
        assert slack_app.command(f"status {RUN}")[0] == 200
        slack_app.work()
        replies, texts = thread_texts(slack_app)
    assert not any("could not finish" in t or "Nothing was diagnosed" in t for t in texts), texts
    card = replies[0]
    assert RUN in card_text(card["blocks"])  # the diagnosis card, first
    assert "|loss curve> (PNG, in this thread)" in card_text(card["blocks"])  # the rest was drawn
    [png] = slack_app.fake.files()
    image = Image.open(io.BytesIO(png["content"]))
    image.load()
    assert image.size == (900, 990)  # loss, learning rate and the time panel (the lines are stamped)
    assert "The loss curve left out 3 values it cannot draw (1.7e308, nan, inf)." in texts[1:]


def test_a_curve_of_only_hostile_values_is_not_drawn_and_the_thread_says_why(slack_app: SlackApp) -> None:
    objects = example_objects("l7-job-running-healthy")
    with cluster(slack_app, objects) as emu:
        seed_hostile_logs(emu, objects, {i: ("nan", "inf", "-inf", "1.7e308")[i % 4] for i in range(9)})
        slack_app.command(f"status {RUN}")
        slack_app.work()
        replies, texts = thread_texts(slack_app)
    assert not any("could not finish" in t for t in texts), texts
    assert slack_app.fake.files() == []
    assert "📈" not in card_text(replies[0]["blocks"])
    assert ("The loss curve left out 9 values it cannot draw (nan, inf, -inf, 1.7e308, nan and 4 more); "
            "too few values were left to draw it.") in texts[1:]


HF = "{{'loss': {loss}, 'learning_rate': {lr}, 'epoch': 0.5}}"


def test_the_chart_leaves_out_what_it_cannot_draw_and_never_raises() -> None:
    curve = [(10.0, 2.0), (20.0, 1.7e308), (30.0, math.nan), (40.0, math.inf), (50.0, -math.inf),
             (60.0, 1.5), (70.0, 1e100), (80.0, -1e100), (math.inf, 1.2), (1e300, 1.1)]
    png = loss_chart(curve, "r", lr_curve=[(10.0, 4e-5), (20.0, math.inf), (30.0, 1e308), (60.0, 3e-5)])
    assert png is not None
    assert Image.open(io.BytesIO(png)).size == (900, 720)
    assert [repr(v) for v in left_out(curve)] == ["1.7e+308", "nan", "inf", "-inf", "1.2", "1.1"]
    assert loss_chart([(None, 1.7e308), (None, math.nan), (None, 2.0)], "r") is None  # one point left
    assert left_out_text("loss curve", [math.nan, math.inf, 1.7e308]) == (
        "The loss curve left out 3 values it cannot draw (nan, inf, 1.7e308).")
    assert left_out_text("loss curve", []) == ""


def test_parsed_hostile_values_are_kept_as_said_and_nothing_downstream_raises() -> None:
    lines = [(f"2026-11-30T10:{20 + i}:00Z", HF.format(loss=loss, lr=lr))
             for i, (loss, lr) in enumerate([("2.0", "4e-05"), ("1.7e308", "4e-05"), ("nan", "inf"),
                                             ("inf", "4e-05"), ("-1.7e308", "4e-05"), ("1.8", "1e308"),
                                             ("1.7", "4e-05")])]
    progress = parse_progress(lines)
    losses = [loss for _at, _step, loss in progress.points]
    assert losses[1] == 1.7e308 and math.isnan(losses[2]) and losses[3] == math.inf
    assert progress.trend() == "falling"
    assert sparkline([2.0, 1.7e308, -1.7e308, math.nan, math.inf, 1.9, 1.8, 1.7, 1.6]) == "█▆▄▂▁"
    assert len(sparkline([*losses, 1.6, 1.5])) == 5  # the usable ones; no ValueError on their range
    progress.total = math.inf
    assert "no ETA can use" in eta_text(training_eta(progress, progressing=True))
    step_lines = [(f"2026-11-30T10:{20 + i}:00Z", f"step={s} loss={loss}")
                  for i, (s, loss) in enumerate([("1", "2.0"), ("2", "nan"), ("1e999", "inf"), ("3", "1.7e308")])]
    stepped = parse_progress([(None, "max_steps=99999999999999999999999999999999"), *step_lines])
    eta = training_eta(stepped, progressing=True)
    assert eta.expected_end is None and "100 years" in (eta.unavailable or "")
    assert duration_text(math.inf) == "unknown" and duration_text(math.nan) == "unknown"
