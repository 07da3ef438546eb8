"""The stall monitor through Redis outages, kill -9 and a second replica (SPEC §11, issue 24).

Same harness as test_faults.py: the real `taubot monitor` process(es), the
emulator in its own process, the fake Slack, the suite's Redis behind a TCP
fault proxy. Each test asserts nothing lost, nothing twice, the process alive.
"""

from __future__ import annotations

from pathlib import Path

from .process import VISION, assert_posted_once, platform, queued, running, world


def test_redis_down_posts_nothing_keeps_the_cache_and_resumes(tmp_path: Path, redis_url: str) -> None:
    with world([*platform(), *queued("before-1")], redis_url, tmp_path) as w:
        monitor = w.start_monitor()
        w.wait_posted("before-1")
        mark = monitor.mark()
        w.redis_proxy.down()
        # It says so and retries every 2 s (two retries shown: the loop is the same for 30 s or
        # 30 minutes — nothing in it depends on how long Redis stays away)…
        monitor.wait_log(r"Redis unreachable .*retrying in 2 s", after=mark, count=2, timeout=20)
        posts_during = len(w.slack.calls_to("chat.postMessage"))
        w.emu.upsert(queued("during-1"))  # the cache keeps following the cluster meanwhile
        monitor.wait_log(r"Redis unreachable", after=mark, count=3, timeout=20)
        assert len(w.slack.calls_to("chat.postMessage")) == posts_during  # …and posts nothing
        assert monitor.alive()
        w.redis_proxy.up()
        monitor.wait_log(r"Redis answers again", after=mark, timeout=20)
        w.wait_posted("during-1")
        assert_posted_once(w, ["before-1", "during-1"])
        assert monitor.alive()
        # The cache was kept: each of the nine streams (eight kinds in the namespace, the cluster's
        # ClusterQueues) LISTed once, at start, never for the outage.
        assert len([r for r in w.proxy.seen() if not r.is_watch and r.first_page]) == 9


def test_kill_9_at_each_step_of_a_post_loses_nothing_and_posts_nothing_twice(tmp_path: Path,
                                                                          redis_url: str) -> None:
    with world(platform(), redis_url, tmp_path) as w:
        # 1. Killed after the claim, before Slack saw the post: the restarted monitor posts it once.
        w.slack.hang_next("chat.postMessage")
        monitor = w.start_monitor()
        w.emu.upsert(queued("claimed-1"))
        assert w.slack.hung.wait(20)
        monitor.kill()
        w.slack.release_hang()  # the held call is dropped: nothing reached the channel
        assert not w.posts_of("claimed-1")
        monitor = w.start_monitor()
        w.wait_posted("claimed-1")
        monitor.kill()
        # 2. Killed after Slack posted, before the record was saved: the restarted monitor finds
        #    its post in the channel's history (message metadata) and adopts it — no second post…
        w.slack.hang_next("chat.postMessage", after=True)
        monitor = w.start_monitor()
        w.emu.upsert(queued("posted-1"))
        assert w.slack.hung.wait(20)
        monitor.kill()
        w.slack.release_hang()
        [card] = [m for m in w.slack.messages(VISION) if "posted-1" in str(m.get("blocks"))]
        monitor = w.start_monitor()
        monitor.wait_log(r"adopted the post", timeout=30)
        # …and the adopted card is followed: the run recovers, its card says so in its thread.
        w.emu.upsert(running("posted-1"))
        w.wait_reply(card["ts"], "recovered")
        # 3. Killed after the record — once the sweep that replied has ended, so its record is saved
        #    (a kill between a reply and its record is a window of its own): the restart posts nothing.
        monitor.wait_log(r"swept \d+ runs", after=len(monitor.lines))
        monitor.kill()
        mark = len(w.slack.calls_to("chat.postMessage"))
        monitor = w.start_monitor()
        monitor.wait_log(r"swept 2 runs", timeout=30)
        monitor.wait_log(r"swept 2 runs", count=2, timeout=30)
        assert len(w.slack.calls_to("chat.postMessage")) == mark
        assert_posted_once(w, ["claimed-1", "posted-1"])
        assert monitor.alive()


def test_kill_9_between_a_reply_and_its_record_says_it_once(tmp_path: Path, redis_url: str) -> None:
    """A reply is claimed, posted with message metadata, then recorded, like a top-level post: a
    kill after Slack took it is found in the thread (`conversations.replies`), a kill before Slack
    saw it is said once after the restart."""
    with world([*platform(), *queued("replied-1")], redis_url, tmp_path) as w:
        monitor = w.start_monitor()
        ts = w.wait_posted("replied-1").response["ts"]
        # 1. It recovers; the recovery reply reaches Slack and the monitor dies before its record.
        w.slack.hang_next("chat.postMessage", after=True)
        w.emu.upsert(running("replied-1"))
        assert w.slack.hung.wait(20)
        monitor.kill()
        w.slack.release_hang()
        assert len([r for r in w.replies(ts) if "recovered" in r]) == 1
        monitor = w.start_monitor()
        monitor.wait_log(r"a reply \S+ was already in its thread", timeout=30)
        # 2. It stalls again; the monitor dies after claiming the "stalled again" reply, before Slack.
        w.slack.hang_next("chat.postMessage")
        w.emu.upsert(queued("replied-1"))
        assert w.slack.hung.wait(20)
        monitor.kill()
        w.slack.release_hang()  # the held call is dropped: nothing reached the thread
        assert not [r for r in w.replies(ts) if "stalled again" in r]
        monitor = w.start_monitor()
        w.wait_reply(ts, "stalled again")
        monitor.wait_log(r"swept 1 runs", after=len(monitor.lines), count=2, timeout=30)
        replies = w.replies(ts)
        assert len([r for r in replies if "recovered" in r]) == 1, replies
        assert len([r for r in replies if "stalled again" in r]) == 1, replies
        assert_posted_once(w, ["replied-1"])
        assert monitor.alive()


def test_two_monitors_with_a_sweep_longer_than_the_lease_post_each_run_once(tmp_path: Path,
                                                                         redis_url: str) -> None:
    runs = [f"slow-{i}" for i in range(5)]
    with world([*platform(), *(o for r in runs for o in queued(r))], redis_url, tmp_path) as w:
        w.slack.delay("chat.postMessage", 1.0)  # five posts: a sweep of 5 s and more, over the 3 s lease
        first, second = w.start_monitor(), w.start_monitor()
        w.slack.wait_until(lambda: all(w.posts_of(r) for r in runs), 40, "every slow run posted")
        marks = first.mark(), second.mark()
        for monitor, mark in zip((first, second), marks, strict=True):  # two more sweeps each: no late twin
            monitor.wait_log(r"monitor: swept", after=mark, count=2, timeout=20)
        assert_posted_once(w, runs)
        assert first.alive() and second.alive()
