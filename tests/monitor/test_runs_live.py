"""The stall monitor's posts as runs come, change, leave and come back, at the process level
(SPEC §7b, §11, issue 24): hostile names and images, groups that shrink or lose a member by a
reason change, a group post that fails once, a run deleted and re-created under its name, a
descriptor added and removed — one `taubot monitor` process through all of it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fixtures import k8s

from .process import (
    AUDIO,
    AUDIO_NS,
    VISION,
    assert_posted_once,
    descriptor,
    image_pull,
    platform,
    queued,
    running,
    text_of,
    world,
)

# An image reference carrying Slack markup: the API server stores a Job's image as given, and the
# kubelet quotes it back in the pull error (tests/fixtures/k8s.py image_pull_backoff).
HOSTILE_IMAGE = "taugridacr.azurecr.io/vision/vit:<!channel>&<@U0ADMIN>"
EVIL = "evil-<!here>&-1"  # not a DNS-1123 name; an API server would refuse it, the monitor must not crash


def everything_posted(w: object) -> str:
    slack = w.slack  # type: ignore[attr-defined]
    return json.dumps([c.params for c in slack.calls_to("chat.postMessage") + slack.calls_to("chat.update")],
                      ensure_ascii=False)


def test_runs_that_change_leave_and_return_are_followed_and_nothing_crashes(tmp_path: Path,
                                                                           redis_url: str) -> None:
    world_objects = [*platform(), *image_pull("pull-1", HOSTILE_IMAGE), *image_pull("pull-2", HOSTILE_IMAGE),
                     *queued(EVIL, queue="team-b"), *queued("q-a"), *queued("q-b"), *queued("q-c")]
    with world(world_objects, redis_url, tmp_path) as w:
        monitor = w.start_monitor()
        # Hostile input: the group of the hostile image is posted (as a card or, if it cannot be one,
        # as escaped text), the hostile name too, and no markup from the cluster reaches Slack.
        w.wait_posted("q-a")
        w.slack.wait_until(lambda: any("pull-1" in text_of(c) for c in w.tops()), 30, "the image group")
        w.wait_posted(EVIL.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
        sent = everything_posted(w)
        assert "<!channel>" not in sent and "<!here>" not in sent and "<@U0ADMIN>" not in sent
        [group] = [c for c in w.tops() if "q-a" in text_of(c)]
        assert all(f"`{r}`" in text_of(group) for r in ("q-a", "q-b", "q-c"))
        ts = group.response["ts"]

        # A member recovers: it leaves the card, one reply says so.
        w.emu.upsert(running("q-c"))
        w.wait_reply(ts, "`q-c` recovered")
        # A member changes reason: it leaves the group and gets its own post. (Its objects change one
        # by one, as controllers write them: a sweep in between may see it unstalled for a moment,
        # and then it leaves as recovered — either way, once, with a reply.)
        w.emu.upsert(image_pull("q-b"))
        w.slack.wait_until(lambda: any("`q-b`" in r and "left this group" in r for r in w.replies(ts)), 30,
                           "q-b leaving the group")
        w.slack.wait_until(lambda: len(w.posts_of("q-b")) == 2, 30, "q-b's own post")
        # Down to one member, the group card stays q-a's: no post of its own…
        assert len(w.posts_of("q-a")) == 1
        edited = w.slack.message(VISION, ts)
        assert edited is not None and "q-b" not in json.dumps(edited["blocks"]) and "1 runs" in edited["text"]
        # …until it resolves.
        w.emu.upsert(running("q-a"))
        w.wait_reply(ts, "the group is resolved")

        # A group post that fails once is retried, and posted once.
        w.slack.fail_next("chat.postMessage", "internal_error")
        w.emu.upsert([*queued("f-1", queue="team-b"), *queued("f-2", queue="team-b")])
        w.slack.wait_until(lambda: bool(w.posts_of("f-1")), 30, "the retried group post")
        assert_posted_once(w, ["f-1", "f-2"])

        # Deleted, then re-created under its name (a new uid): said deleted, then posted anew.
        w.emu.upsert(queued("again-1", uid="uid-again-first"))
        first = w.wait_posted("again-1")
        w.emu.delete("Job", k8s.NS, "again-1")
        deleted = w.wait_reply(first.response["ts"], "was deleted")
        assert "recovered" not in deleted
        w.emu.upsert(queued("again-1", uid="uid-again-second"))
        w.slack.wait_until(lambda: len(w.posts_of("again-1")) == 2, 30, "the re-created run's post")

        # A descriptor added while running: its namespace is watched and posted within a sweep…
        w.emu.upsert(queued("audio-1", ns=AUDIO_NS))
        added = descriptor(w.workspaces, "audio", AUDIO_NS, AUDIO, w.proxy.base_url)
        w.wait_posted("audio-1", channel=AUDIO)
        # …and removed: its streams stop.
        mark = monitor.mark()
        added.unlink()
        monitor.wait_log(r"stopped watching team-audio", after=mark)
        seen = w.proxy.mark()
        monitor.wait_log(r"monitor: swept", after=monitor.mark(), count=2)
        assert not [r for r in w.proxy.seen_since(seen) if f"/namespaces/{AUDIO_NS}/" in r.path]

        assert_posted_once(w, ["pull-1", "pull-2", "q-c", "f-1", "f-2"])
        assert not [x for x in monitor.lines if "Traceback" in x or "CRITICAL" in x]
        assert monitor.alive()
