"""Waiting on events, never on time: Redis keyspace notifications with a timeout.

A test that needs "the job was queued" or "the worker saved tick 1" subscribes
to the key's notifications and re-checks its condition on each one; the
timeout only bounds a failure, it never decides a pass.
"""

from __future__ import annotations

from collections.abc import Callable

import redis


def wait_for(conn: redis.Redis, key: str, condition: Callable[[], bool], *, timeout: float = 20.0,
             what: str = "the condition") -> None:
    """Return once ``condition()`` holds, re-checking whenever ``key`` changes."""
    conn.config_set("notify-keyspace-events", "KA")
    db = conn.connection_pool.connection_kwargs.get("db", 0)
    pubsub = conn.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(f"__keyspace@{db}__:{key}")
    try:
        if condition():
            return
        import time  # only to bound the failure case

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
            if message is not None and condition():
                return
        raise AssertionError(f"timed out waiting for {what}")
    finally:
        pubsub.close()
