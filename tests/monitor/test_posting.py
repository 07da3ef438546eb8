"""Auto-posts of many workspaces at once: channels post in parallel, each at most one a second
(SPEC §11 "at most one post per second per channel"; issue 24).

In process: `run_once` against the emulator, the fake Slack and the suite's Redis, on the test's
`ManualClock` — the pacer "sleeps" by moving it, and the fake Slack stamps each message's `ts`
from it, so the rate per channel is counted against the injected clock, never wall time. Runs
are crash-looping Jobs (kubelet shapes of tests/fixtures/k8s.py): one post each, no grouping.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from datetime import timedelta
from pathlib import Path

import yaml

from tests.fakes.kube_api import running_emulator
from tests.fakes.slack_api import running_fake_slack
from tests.fixtures import k8s
from workers.config.settings import Settings
from workers.monitor.run import run_once
from workers.plumbing.clock import ManualClock
from workers.services import Services, install

TOKEN = "xoxb-monitor-posting"
NOW = k8s.T0 + timedelta(minutes=60)
WORKSPACES = 4
RUNS_EACH = 3


def channel(i: int) -> str:
    return f"C0POST{i:03d}"


def namespace(i: int) -> str:
    return f"team-post-{i}"


def crash_looping(name: str, ns: str) -> list[dict]:
    """An admitted Job whose pod's container has been crash-looping for 45 minutes."""
    t0 = NOW - timedelta(minutes=45)
    j = k8s.job(name, ns=ns, suspend=False, active=1, t0=t0)
    pod = k8s.job_pod(j, t0=t0, node="gpu-node-2", phase="Running",
                      containers=[k8s.crash_loop(exit_code=1, reason="Error")])
    return [j, k8s.workload(j, state="admitted", t0=t0), pod]


def test_channels_post_at_once_and_each_at_most_one_a_second_by_the_injected_clock(
        tmp_path: Path, redis_url: str) -> None:
    objects: list[dict] = []
    directory = tmp_path / "workspaces"
    directory.mkdir()
    for i in range(WORKSPACES):
        objects.append(k8s.local_queue("team-a", ns=namespace(i)))
        for r in range(RUNS_EACH):
            objects += crash_looping(f"crash-{i}-{r}", namespace(i))
    clock = ManualClock(NOW)
    with running_emulator(objects) as emu, \
            running_fake_slack(token=TOKEN, ts_clock=lambda: clock.now().timestamp()) as fake:
        for i in range(WORKSPACES):
            (directory / f"ws-{i}.yaml").write_text(yaml.safe_dump({
                "apiVersion": "taugrid.io/v1alpha1", "kind": "WorkspaceConnection",
                "metadata": {"name": f"ws-post-{i}"},
                "spec": {"cluster": {"server": emu.base_url}, "namespace": namespace(i),
                         "workspace": f"ws-post-{i}", "localQueue": "team-a",
                         "slack": {"channels": [channel(i)]}}}))
        settings = Settings(slack_bot_token=TOKEN, slack_api_url=fake.api_url, redis_url=redis_url,
                            workspaces_dir=directory, button_signing_key="k" * 32)
        services = Services.for_slack(settings, clock=clock)
        install(services)
        try:
            # The first post (whichever channel it is in) is held at Slack: if workspaces posted one
            # after another, nothing else could reach Slack until it is let go.
            fake.hang_next("chat.postMessage", after=True)
            reports = []
            sweep = threading.Thread(target=lambda: reports.append(asyncio.run(run_once(services))), daemon=True)
            sweep.start()
            assert fake.hung.wait(30)
            held = fake.calls_to("chat.postMessage")[0].params["channel"]
            fake.wait_until(lambda: any(c.params["channel"] != held for c in fake.calls_to("chat.postMessage")),
                            30, "a post in another channel while the first one is held")
            fake.release_hang()
            sweep.join(60)
            assert not sweep.is_alive()
            # The held post was answered, not given up (the Slack client's timeout is 10 s): the
            # other channel's post came while it was still waiting.
            [report] = reports
            assert report.posts == {"posted": WORKSPACES * RUNS_EACH} and report.errors == 0
        finally:
            services.redis.close()
        posts = [c for c in fake.calls_to("chat.postMessage") if c.response.get("ok")]
        assert sorted(c.params["channel"] for c in posts) == sorted(
            channel(i) for i in range(WORKSPACES) for _ in range(RUNS_EACH))  # each run once
        for i in range(WORKSPACES):
            seconds = sorted(float(c.response["ts"].split(".")[0]) for c in posts
                             if c.params["channel"] == channel(i))
            per_second = Counter(seconds)
            assert max(per_second.values()) == 1, (channel(i), seconds)


def test_another_apps_message_with_taubots_metadata_is_not_adopted_and_the_stall_is_posted(
        tmp_path: Path, redis_url: str) -> None:
    """SPEC §11: a claim found without a record sends the monitor to `conversations.history` for
    its post. Any app in the channel can attach `taubot_stall` metadata naming the run; only a
    message of taubot's own bot user (auth.test's `bot_id` / `user_id`) is adopted, so another
    app's does not suppress the post. Taubot's own message is still adopted (nothing twice)."""
    import json

    from workers.plumbing.metrics import UNTRUSTED_DROPPED
    from workers.records.stalls import EVENT_TYPE, claim_key

    directory = tmp_path / "workspaces"
    directory.mkdir()
    ns, ws = namespace(0), "ws-post-0"
    objects = [k8s.local_queue("team-a", ns=ns), *crash_looping("crash-0-0", ns)]
    uid = objects[1]["metadata"]["uid"]
    clock = ManualClock(NOW)
    with running_emulator(objects) as emu, \
            running_fake_slack(token=TOKEN, ts_clock=lambda: clock.now().timestamp()) as fake:
        (directory / "ws-0.yaml").write_text(yaml.safe_dump({
            "apiVersion": "taugrid.io/v1alpha1", "kind": "WorkspaceConnection", "metadata": {"name": ws},
            "spec": {"cluster": {"server": emu.base_url}, "namespace": ns, "workspace": ws,
                     "localQueue": "team-a", "slack": {"channels": [channel(0)]}}}))
        settings = Settings(slack_bot_token=TOKEN, slack_api_url=fake.api_url, redis_url=redis_url,
                            workspaces_dir=directory, button_signing_key="k" * 32)
        services = Services.for_slack(settings, clock=clock)
        install(services)
        try:
            # A post in flight before a crash: its claim is in Redis, its record never saved …
            services.redis.set(claim_key(ws, uid), json.dumps({"at": NOW.timestamp() - 30}))
            # … and the channel holds another app's message carrying the same metadata.
            forged = fake.seed_message(channel(0), "not taubot's card", app=("U0OTHER", "B0OTHER", "A0OTHER"),
                                       metadata={"event_type": EVENT_TYPE,
                                                 "event_payload": {"id": uid, "reason": "crash_loop"}})
            before = UNTRUSTED_DROPPED.labels("foreign_message")._value.get()
            report = asyncio.run(run_once(services))
            assert report.posts == {"posted": 1} and report.errors == 0
            assert UNTRUSTED_DROPPED.labels("foreign_message")._value.get() == before + 1
            [post] = [c for c in fake.calls_to("chat.postMessage") if c.response.get("ok")]
            assert post.response["ts"] != forged and post.params["channel"] == channel(0)
            assert fake.calls_to("auth.test")  # whose bot is taubot, as Slack says
            assert fake.message(channel(0), forged)["text"] == "not taubot's card"  # left alone
        finally:
            services.redis.close()
