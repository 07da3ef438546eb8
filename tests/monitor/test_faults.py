"""The stall monitor under network faults, at the process level (SPEC §11, issue 24).

The real `taubot monitor` process talks to the API emulator's process through
a fault proxy; each fault is injected at the transport while a new run gets
stuck, then cleared. Each phase asserts what a user would notice: the new
run is posted once the fault clears (nothing lost), no run is posted twice,
no stream asked more than once a second while the fault lasted, and the
process is alive.
"""

from __future__ import annotations

from pathlib import Path

from .process import (
    assert_posted_once,
    max_requests_in_window,
    platform,
    queued,
    streams_with,
    world,
)

STREAMS = 8  # one namespace, eight kinds (workers/monitor/cache.py KINDS)


def test_every_network_fault_is_survived_with_nothing_lost_and_nothing_twice(tmp_path: Path,
                                                                           redis_url: str) -> None:
    with world([*platform(), *queued("base-1")], redis_url, tmp_path) as w:
        monitor = w.start_monitor()
        w.wait_posted("base-1")
        posted = ["base-1"]
        # Each fault, while a new run gets stuck: how the proxy answers, and what shows it was felt.
        faults = {
            "down": ("reset", lambda: w.proxy.down(), lambda: w.proxy.up()),  # API unreachable, then back
            "close": ("close", lambda: w.proxy.watch_fault("close"), lambda: w.proxy.watch_fault(None)),
            "gone": ("gone", lambda: w.proxy.watch_fault("gone"), lambda: w.proxy.watch_fault(None)),  # 410 storm
            "error": ("error", lambda: w.proxy.watch_fault("error", 500), lambda: w.proxy.watch_fault(None)),
            "stall": ("stall", lambda: w.proxy.watch_fault("stall"), lambda: w.proxy.watch_fault(None)),
        }
        for name, (outcome, inject, clear) in faults.items():
            mark, log_mark = w.proxy.mark(), monitor.mark()
            inject()
            # Every stream felt the fault at least twice (so it was retried, with backoff) …
            w.proxy.wait_until(lambda seen, m=mark, o=outcome: sum(
                1 for n in streams_with(seen[m:], o, watches=True).values() if n >= 2) >= STREAMS
                or o == "reset" and len({r.stream for r in seen[m:] if r.outcome == o}) >= STREAMS,
                timeout=30)
            w.emu.upsert(queued(f"late-{name}"))  # … while a new run got stuck
            clear()
            w.wait_posted(f"late-{name}", timeout=40)
            monitor.wait_streams_healthy(after=log_mark)
            posted.append(f"late-{name}")
            worst, stream = max_requests_in_window(w.proxy.seen_since(mark))
            assert worst <= 1, f"{name}: {worst} requests within 0.9 s on {stream}: " + "\n".join(
                f"{r.at:.3f} {r.is_watch} {r.outcome} {r.query}" for r in w.proxy.seen_since(mark)
                if r.stream == stream)
            assert monitor.alive(), name
        assert_posted_once(w, posted)
        assert monitor.alive()
