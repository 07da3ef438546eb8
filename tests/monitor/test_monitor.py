"""The stall monitor end to end: the emulator (LIST, WATCH, 410), the fake Slack, real Redis.

Run shapes come from tests/fixtures/k8s.py (real Kueue, batch and kubelet
shapes, each builder citing its source). The clock is the test's: runs are
made stuck 45 minutes before it, or one minute before it ("just stuck").
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from prometheus_client import REGISTRY

from tests.fakes.kube_api import KubeEmulator, running_emulator
from tests.fakes.slack_api import FakeSlack, running_fake_slack
from tests.fixtures import k8s
from tests.live.conftest import workspace_objects
from workers.config.settings import Settings
from workers.kube.reader import KubeReader
from workers.monitor.cache import Cache
from workers.monitor.lease import Lease
from workers.monitor.run import Monitor, _hold_until, run_once
from workers.plumbing.clock import ManualClock
from workers.services import Services, install

REPO = Path(__file__).resolve().parents[2]
TOKEN = "xoxb-monitor"
VISION, AUDIO = "C012VISION", "C012AUDIO"
AUDIO_NS = "team-audio"
NOW = k8s.T0 + timedelta(minutes=60)


def descriptors(directory: Path, server: str) -> None:
    directory.mkdir(exist_ok=True)
    for name, ns, channel in (("vision", k8s.NS, VISION), ("audio", AUDIO_NS, AUDIO)):
        (directory / f"{name}.yaml").write_text(yaml.safe_dump({
            "apiVersion": "taugrid.io/v1alpha1", "kind": "WorkspaceConnection", "metadata": {"name": name},
            "spec": {"cluster": {"server": server}, "namespace": ns, "workspace": name, "localQueue": "team-a",
                     "slack": {"channels": [channel]},
                     "owners": {"queue-owner": {"channel": "C0QUEUE", "usergroup": "S0QUEUE"},
                                "image-owner": {"channel": "C0IMAGES"}}}}))


def queued(name: str, ns: str = k8s.NS, minutes_ago: int = 45) -> list[dict]:
    j = k8s.job(name, ns=ns, suspend=True, t0=NOW - timedelta(minutes=minutes_ago))
    return [j, k8s.workload(j, state="pending", t0=NOW - timedelta(minutes=minutes_ago))]


def image_pull(name: str) -> list[dict]:
    t0 = NOW - timedelta(minutes=45)
    j = k8s.job(name, suspend=False, active=1, t0=t0)
    pod = k8s.job_pod(j, t0=t0, node="gpu-node-1", phase="Pending",
                      containers=[k8s.image_pull_backoff(image="taugridacr.azurecr.io/vision/vit:1.4.0")])
    return [j, k8s.workload(j, state="admitted", t0=t0), pod]


def crash_loop(name: str, *, recovered: bool = False) -> list[dict]:
    t0 = NOW - timedelta(minutes=45)
    j = k8s.job(name, suspend=False, active=1, t0=t0)
    j["metadata"].setdefault("annotations", {})["taugrid.io/submitted-by"] = "alice@example.com"
    container = (k8s.running(t0=t0) if recovered else k8s.crash_loop(exit_code=1, reason="Error"))
    pod = k8s.job_pod(j, t0=t0, node="gpu-node-2", phase="Running", containers=[container])
    return [j, k8s.workload(j, state="admitted", t0=t0), pod]


def healthy(name: str, ns: str) -> list[dict]:
    j = k8s.job(name, ns=ns, suspend=False, active=1)
    pod = k8s.job_pod(j, node="gpu-node-3", phase="Running", containers=[k8s.running()])
    return [j, k8s.workload(j, state="admitted"), pod]


def succeeded(name: str, ns: str) -> list[dict]:
    j = k8s.job(name, ns=ns, suspend=False, succeeded=1, conditions=k8s.job_complete(k8s.T0, 1800))
    return [j, k8s.workload(j, state="admitted")]


def world() -> list[dict]:
    return [*workspace_objects(), k8s.local_queue("team-a", ns=AUDIO_NS),
            *queued("q-run-1"), *queued("q-run-2"), *queued("q-run-3"),
            *image_pull("vit-pull"), *crash_loop("llama-crash"),
            *healthy("audio-ok", AUDIO_NS), *succeeded("audio-done", AUDIO_NS), *queued("audio-new", AUDIO_NS, 1)]


def progressing(emu: KubeEmulator, prefix: str = "audio-ok-", now: datetime = NOW) -> None:
    """The healthy run's log advances up to a minute before ``now`` (HF Trainer dicts, transformers 4.46)."""
    for obj in emu.objects():
        if obj["kind"] == "Pod" and obj["metadata"]["name"].startswith(prefix):
            ns = obj["metadata"]["namespace"]
            emu.pod_logs[(ns, obj["metadata"]["name"], obj["spec"]["containers"][0]["name"])] = "".join(
                (now - timedelta(minutes=9 - i)).strftime("%Y-%m-%dT%H:%M:%S.000000000Z ")
                + f"{{'loss': {2 - i / 10:.4f}, 'grad_norm': 1.1, 'learning_rate': 4e-05, 'epoch': {i / 10}}}\n"
                for i in range(9))


@dataclass
class Env:
    emu: KubeEmulator
    fake: FakeSlack
    services: Services
    clock: ManualClock

    def sweep(self) -> Any:
        return asyncio.run(run_once(self.services))

    def posts(self, channel: str) -> list[Any]:
        return [c for c in self.fake.calls_to("chat.postMessage")
                if c.params.get("channel") == channel and not c.params.get("thread_ts") and c.response.get("ok")]

    def replies(self, channel: str, ts: str) -> list[str]:
        return [m["text"] for m in self.fake.thread(channel, ts) if not m.get("blocks")]


@pytest.fixture
def env(tmp_path: Path, redis_url: str) -> Iterator[Env]:
    with running_emulator(world()) as emu, running_fake_slack(token=TOKEN) as fake:
        progressing(emu)
        descriptors(tmp_path / "workspaces", emu.base_url)
        settings = Settings(slack_bot_token=TOKEN, slack_api_url=fake.api_url, redis_url=redis_url,
                            workspaces_dir=tmp_path / "workspaces", button_signing_key="k" * 32)
        clock = ManualClock(NOW)
        services = Services.for_slack(settings, clock=clock)
        install(services)
        yield Env(emu, fake, services, clock)
        services.redis.close()


def card_text(call: Any) -> str:
    return json.dumps(call.params.get("blocks"), ensure_ascii=False) + (call.params.get("text") or "")


def buttons(call: Any) -> list[str]:
    return [e["text"]["text"] for b in call.params["blocks"] if b["type"] == "actions" for e in b["elements"]]


def test_one_grouped_post_per_cause_one_post_per_stuck_run_and_nothing_else(env: Env) -> None:
    before = {kind: REGISTRY.get_sample_value("taubot_auto_posts_total", {"kind": kind}) or 0.0
              for kind in ("posted", "group-posted")}
    env.sweep()
    posts = env.posts(VISION)
    # /metrics of the monitor: five stalled runs (three queued behind one cause, a pull, a crash)
    moved = {kind: (REGISTRY.get_sample_value("taubot_auto_posts_total", {"kind": kind}) or 0.0) - before[kind]
             for kind in before}
    assert moved == {"posted": 2, "group-posted": 1}
    stalled = sum(REGISTRY.get_sample_value("taubot_stalled_runs", {"layer": str(n)}) or 0 for n in range(1, 9))
    assert stalled == 5
    assert env.posts(AUDIO) == []  # healthy, succeeded and just-stuck runs: nothing
    grouped = [p for p in posts if "runs stalled" in card_text(p)]
    assert len(grouped) == 1
    text = card_text(grouped[0])
    assert all(f"`q-run-{i}`" in text for i in (1, 2, 3)) and "Kueue admission" in text
    assert "cluster-queue" in text
    singles = [p for p in posts if p not in grouped]
    assert len(singles) == 2
    pull = next(p for p in singles if "vit-pull" in card_text(p))
    crash = next(p for p in singles if "llama-crash" in card_text(p))
    assert "First incomplete: Image pull" in card_text(pull) and "First incomplete: Container start" in card_text(crash)
    for post in (grouped[0], pull, crash):
        labels = buttons(post)
        assert any("Escalate" in b for b in labels) and any("Mute" in b for b in labels)
    assert "kubectl" not in card_text(pull) + card_text(crash)  # no operator-only hints in auto-posts


def test_the_monitor_reads_as_itself_only_in_its_namespaces_and_never_writes(env: Env) -> None:
    env.sweep()
    assert env.emu.requests
    for r in env.emu.requests:
        assert r.header_values("Impersonate-User") == [] and r.header_values("Impersonate-Group") == []
        # in its namespaces, and the cluster's ClusterQueues (cluster-scoped: issue 35's next start)
        assert r.method == "GET" and ("/namespaces/" in r.path or r.path.endswith("/clusterqueues")), r.path
    assert {r.path.split("/namespaces/")[1].split("/")[0] for r in env.emu.requests
            if "/namespaces/" in r.path} == {k8s.NS, AUDIO_NS}


def test_a_second_sweep_posts_nothing_again(env: Env) -> None:
    env.sweep()
    before = len(env.fake.calls_to("chat.postMessage"))
    env.sweep()
    assert len(env.fake.calls_to("chat.postMessage")) == before


def test_a_recovered_run_gets_its_post_edited_and_one_reply(env: Env) -> None:
    env.sweep()
    crash = next(p for p in env.posts(VISION) if "llama-crash" in card_text(p))
    ts = crash.response["ts"]
    for obj in crash_loop("llama-crash", recovered=True):
        env.emu.upsert(obj)
    progressing(env.emu, "llama-crash-")
    env.clock.advance(60)
    env.sweep()
    env.sweep()
    edits = [c for c in env.fake.calls_to("chat.update") if c.params["ts"] == ts]
    assert len(edits) == 1 and "Recovered" in card_text(edits[0])
    replies = env.replies(VISION, ts)
    assert len(replies) == 1 and "recovered" in replies[0]


def test_a_recovered_run_that_stalls_again_within_a_day_gets_its_card_edited_and_one_reply(env: Env) -> None:
    """SPEC §11: "a recovered run that stalls again has its card edited and one reply in its thread
    ("stalled again: …"), a new top-level post only when that card is older than 24 h"."""
    env.sweep()
    crash = next(p for p in env.posts(VISION) if "llama-crash" in card_text(p))
    ts, tops = crash.response["ts"], len(env.posts(VISION))
    for obj in crash_loop("llama-crash", recovered=True):
        env.emu.upsert(obj)
    progressing(env.emu, "llama-crash-")
    env.clock.advance(60)
    env.sweep()
    assert any("recovered" in r for r in env.replies(VISION, ts))
    for obj in crash_loop("llama-crash"):  # two hours later it crash-loops again
        env.emu.upsert(obj)
    env.clock.advance(2 * 3600)
    env.sweep()
    env.sweep()
    assert len(env.posts(VISION)) == tops  # no new top-level post…
    edits = [c for c in env.fake.calls_to("chat.update") if c.params["ts"] == ts]
    assert "stalled again" in card_text(edits[-1]) and "Recovered" not in card_text(edits[-1])  # …the card…
    again = [r for r in env.replies(VISION, ts) if "stalled again" in r]
    assert len(again) == 1 and "llama-crash" in again[0]  # …and one reply in its thread
    # Recovered again, and stalled again once the card is more than a day old: a new post.
    for obj in crash_loop("llama-crash", recovered=True):
        env.emu.upsert(obj)
    progressing(env.emu, "llama-crash-", env.clock.now())
    env.sweep()
    assert len([r for r in env.replies(VISION, ts) if "recovered" in r]) == 2
    for obj in crash_loop("llama-crash"):
        env.emu.upsert(obj)
    env.clock.advance(25 * 3600)
    env.sweep()
    assert len([p for p in env.posts(VISION) if "llama-crash" in card_text(p)]) == 2
    assert len([r for r in env.replies(VISION, ts) if "stalled again" in r]) == 1


def test_a_run_leaving_the_group_edits_the_group_post(env: Env) -> None:
    env.sweep()
    group = next(p for p in env.posts(VISION) if "runs stalled" in card_text(p))
    j = k8s.job("q-run-3", suspend=False, active=1, t0=NOW - timedelta(minutes=45))
    env.emu.upsert(j)
    env.emu.upsert(k8s.workload(j, state="admitted", t0=NOW - timedelta(minutes=45)))
    env.emu.upsert(k8s.job_pod(j, t0=NOW - timedelta(minutes=45), node="gpu-node-4", phase="Running",
                               containers=[k8s.running()]))
    progressing(env.emu, "q-run-3-")
    env.sweep()
    [edit] = [c for c in env.fake.calls_to("chat.update") if c.params["ts"] == group.response["ts"]]
    text = card_text(edit)
    assert "`q-run-1`" in text and "`q-run-2`" in text and "`q-run-3`" not in text
    assert any("q-run-3" in r and "recovered" in r for r in env.replies(VISION, group.response["ts"]))


def test_mute_stops_posts_for_that_run_until_it_expires(env: Env) -> None:
    from workers.contracts.identity import Identity
    from workers.contracts.requests import MuteRequest
    from workers.contracts.signing import verify_value
    from workers.flows.mute import run_mute

    env.sweep()
    pull = next(p for p in env.posts(VISION) if "vit-pull" in card_text(p))
    [mute] = [e for b in pull.params["blocks"] if b["type"] == "actions" for e in b["elements"]
              if "Mute" in e["text"]["text"]]
    record_id = verify_value(env.services.settings.button_key(), mute["value"])
    assert record_id is not None
    alice = Identity(user="alice@example.com")
    where = {"channel": pull.params["channel"], "message_ts": pull.response["ts"]}
    # Issue 26: the signed value replayed from another channel or on another message does nothing.
    for elsewhere in ({**where, "channel": "C0OTHERCH"}, {**where, "message_ts": "1764464220.000100"}, {}):
        press = MuteRequest(record_id=record_id, user="U012ALICE", identity=alice, **elsewhere)
        assert run_mute(env.services, press, now=env.clock.now()) == "elsewhere"
    assert not env.fake.calls_to("chat.update") and not env.services.redis.keys("taubot:monitor:mute:*")
    outcome = run_mute(env.services, MuteRequest(record_id=record_id, user="U012ALICE", identity=alice, **where),
                       now=env.clock.now())
    assert outcome == "muted"
    [edit] = [c for c in env.fake.calls_to("chat.update") if c.params["ts"] == pull.response["ts"]]
    assert "muted by @U012ALICE until" in card_text(edit)
    # A new reason while muted: no edit, no reply, no post.
    t0 = NOW - timedelta(minutes=45)
    j = k8s.job("vit-pull", suspend=False, active=1, t0=t0)
    env.emu.upsert(k8s.job_pod(j, t0=t0, node="gpu-node-1", phase="Running",
                               containers=[k8s.crash_loop(exit_code=1, reason="Error")]))
    calls = len(env.fake.calls)
    env.sweep()
    assert len(env.fake.calls) == calls
    env.services.redis.delete(*env.services.redis.keys("taubot:monitor:mute:*"))  # 24 h later
    env.sweep()
    assert any("is now stuck at *Container start*" in r for r in env.replies(VISION, pull.response["ts"]))


def test_informer_lists_once_watches_and_relists_only_on_410(env: Env) -> None:
    async def scenario() -> tuple[int, int, bool]:
        api = await env.services.kube.bot(env.services.registry.descriptors[0].descriptor.cluster_target())
        async with api:
            cache = Cache(KubeReader(api), [k8s.NS])
            await cache.list_all()
            store, stream = cache.stores[(k8s.NS, "Job")], cache.streams[(k8s.NS, "Job")]
            stop = asyncio.Event()
            cache.start(stop)
            env.emu.upsert(k8s.job("late-run", suspend=True))
            await asyncio.wait_for(store.until(lambda: "late-run" in store.objects), 10)
            seen = "late-run" in store.objects
            lists_before = stream.lists
            stream.version = "1"  # as if this watch had fallen far behind…
            env.emu.compact()  # …when the history it needs is compacted away and its stream ends
            await asyncio.wait_for(store.until(lambda: stream.lists > lists_before), 10)
            stop.set()
            await cache.close()
            return lists_before, stream.lists, seen

    lists_before, lists_after, seen = asyncio.run(scenario())
    assert seen and lists_before == 1 and lists_after == 2


def test_a_sweep_that_found_namespaces_unread_is_followed_by_one_as_soon_as_they_are_read(env: Env) -> None:
    """The wait between sweeps ends when every namespace's first LIST is in (a first cluster-wide
    LIST of 20,000 pods must not cost a whole interval more before the first post); without
    unread namespaces it is the interval."""
    async def scenario() -> tuple[bool, bool]:
        stop = asyncio.Event()
        monitor = Monitor(env.services, leased=True)
        monitor.stop = stop
        await monitor.sync()  # starts every stream: their first LISTs are under way
        try:
            await asyncio.wait_for(_hold_until(monitor, stop, time.monotonic() + 3600, early=True), 20)
            synced = all(s.synced for c in monitor.clusters.values() for s in c.cache.stores.values())
            waited = asyncio.ensure_future(_hold_until(monitor, stop, time.monotonic() + 3600))
            await asyncio.sleep(0)
            still = not waited.done()  # nothing unread: it holds for the interval (until stopped)
            stop.set()
            await asyncio.wait_for(waited, 10)
            return synced, still
        finally:
            stop.set()
            await monitor.close()

    synced, held = asyncio.run(scenario())
    assert synced and held


def test_the_lease_has_one_holder_and_passes_when_it_dies(redis_url: str) -> None:
    conn = redis.Redis.from_url(redis_url)
    first, second = Lease(conn, 30), Lease(conn, 30)
    assert first.acquire_or_renew() and not second.acquire_or_renew()
    assert first.acquire_or_renew()  # renewing
    conn.delete("taubot:monitor:lease")  # the first replica died: its lease ran out
    assert second.acquire_or_renew() and not first.acquire_or_renew()
    first.release()  # a stale holder cannot release the new one's lease
    assert conn.get("taubot:monitor:lease") == second.token.encode()


def test_monitor_once_cli_sweeps_every_time_and_exits_zero(tmp_path: Path, redis_url: str) -> None:
    with running_emulator(world()) as emu, running_fake_slack(token=TOKEN) as fake:
        progressing(emu)
        descriptors(tmp_path / "workspaces", emu.base_url)
        environ = {**os.environ, "TAUBOT_WORKSPACES_DIR": str(tmp_path / "workspaces"),
                   "TAUBOT_SLACK_BOT_TOKEN": TOKEN, "TAUBOT_SLACK_API_URL": fake.api_url,
                   "TAUBOT_REDIS_URL": redis_url, "TAUBOT_BUTTON_SIGNING_KEY": "k" * 32}
        def once() -> tuple[dict, int]:
            done = subprocess.run([sys.executable, "-m", "workers.cli", "monitor", "--once"], env=environ,
                                  capture_output=True, text=True, cwd=REPO, timeout=60)
            assert done.returncode == 0, done.stderr[-2000:]
            tops = [c for c in fake.calls_to("chat.postMessage") if not c.params.get("thread_ts")]
            return json.loads(done.stdout.strip().splitlines()[-1]), len(tops)

        (first, posted), (second, again) = once(), once()
        # The worker's clock is the system's: every fixture run is long stuck by now.
        assert first["stalled"] >= 5 and second["stalled"] == first["stalled"]  # both sweeps ran
        assert posted >= 3 and again == posted  # …and the second posted nothing twice


def test_cluster_wide_streams_keep_only_the_watched_namespaces_stripped(env: Env) -> None:
    """One WATCH per kind for the whole cluster (TAUBOT_MONITOR_CLUSTER_WIDE): objects of namespaces
    no descriptor names are dropped on arrival; kept objects lose managedFields and kubectl's
    last-applied copy (fields no phase reads), and keep every other annotation."""
    stranger = k8s.job("not-ours", ns="team-other", suspend=True)
    env.emu.upsert(stranger)
    applied = k8s.job("applied-run", suspend=True)
    applied["metadata"]["managedFields"] = [{"manager": "kubectl-client-side-apply", "operation": "Update"}]
    applied["metadata"].setdefault("annotations", {}).update({
        "kubectl.kubernetes.io/last-applied-configuration": '{"apiVersion":"batch/v1","kind":"Job"}',
        "taugrid.io/submitted-by": "alice@example.com"})
    env.emu.upsert(applied)

    async def scenario() -> tuple[set[str], dict, bool, int]:
        api = await env.services.kube.bot(env.services.registry.descriptors[0].descriptor.cluster_target())
        async with api:
            cache = Cache(KubeReader(api), [k8s.NS], cluster_wide=True)
            await cache.list_all()
            stop = asyncio.Event()
            cache.start(stop)
            store = cache.stores[(k8s.NS, "Job")]
            env.emu.upsert(k8s.job("late-run", suspend=True))
            env.emu.upsert(k8s.job("late-stranger", ns="team-other", suspend=True))
            await asyncio.wait_for(store.until(lambda: "late-run" in store.objects), 10)
            names = {n for (ns, kind), s in cache.stores.items() if kind == "Job" for n in s.objects}
            cache.set_namespaces([k8s.NS, AUDIO_NS])  # a descriptor added: a fresh cluster-wide LIST
            audio = cache.stores[(AUDIO_NS, "LocalQueue")]
            await asyncio.wait_for(audio.until(lambda: audio.synced), 10)
            stop.set()
            await cache.close()
            return names, store.objects["applied-run"]["metadata"], bool(audio.objects), len(cache.streams)

    names, kept, audio_listed, streams = asyncio.run(scenario())
    assert "late-run" in names and "applied-run" in names
    assert not {"not-ours", "late-stranger"} & names
    assert "managedFields" not in kept
    assert kept["annotations"]["taugrid.io/submitted-by"] == "alice@example.com"
    assert "kubectl.kubernetes.io/last-applied-configuration" not in kept["annotations"]
    assert audio_listed and streams == 9  # eight kinds and the ClusterQueues, whatever the number of namespaces
    cluster_wide = [r for r in env.emu.requests if "/namespaces/" not in r.path]
    assert cluster_wide and all(r.method == "GET" for r in cluster_wide)


def test_a_sweep_shares_each_workspaces_local_queue_cluster_queue_for_the_workers_statuses(env: Env) -> None:
    """Issue 28: the monitor's cache holds the LocalQueues; their ClusterQueues go to Redis as the
    workers' hints, so a deployment's first status of a waiting run needs no round to learn one."""
    from workers.collect.kueue import shared_key

    env.sweep()
    for connection in env.services.registry.descriptors:
        ws = connection.descriptor
        key = shared_key(ws.cluster_target().model_dump_json(), ws.spec.namespace, "team-a")
        assert env.services.redis.get(key) == b"cluster-queue", ws.spec.namespace
