"""Shared fixtures: a real Redis (database chosen by scripts/test.sh) emptied per test."""

from __future__ import annotations

import os

import pytest
import redis

REDIS_URL = os.environ.get("TAUBOT_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


@pytest.fixture
def redis_url() -> str:
    """URL of the test Redis database; flushed before and after each test using it."""
    conn = redis.Redis.from_url(REDIS_URL)
    conn.flushdb()
    yield REDIS_URL
    conn.flushdb()
    conn.close()
