"""Slack user → Kubernetes identity: static entries, email mapping, caching, refusals.

Slack is the fake Web API over HTTP and the cache is the real test Redis, so
"asked Slack once" is read from the fake's call log and the Redis keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from slack_sdk import WebClient

from bot.identity import (
    ASK_OPERATOR,
    IdentityConfigError,
    IdentityMap,
    IdentityResolver,
    Unmapped,
    load_identity_map,
)
from tests.fakes.slack_api import FakeSlack, running_fake_slack
from workers.kube.client import Identity

# The identity file exactly as SPEC §9 shows it.
SPEC_FILE = """\
users:
  U012ALICE: {user: alice@example.com, groups: [team-vision, gpu-users]}
map_by_email: true            # users not listed above map to their Slack profile email
usergroups:                    # Slack user group id → Kubernetes group
  S0VISION: team-vision
"""

# users.info profiles in the shape docs.slack.dev documents (email under profile).
PROFILES = {
    "U012ALICE": {"email": "alice-slack@example.com"},
    "U0BOB": {"email": "Bob@Example.com", "real_name": "Bob"},
    "U0CAROL": {"email": "carol@example.com"},
    "U0GONE": {"email": "gone@example.com", "deleted": True},
    "U0NOMAIL": {"real_name": "No Mail"},
    "U0BOT": {"email": "bot@example.com", "is_bot": True},
    "U0NOCONFIRM": {"email": "nc@example.com", "is_email_confirmed": None},  # field absent
}
USERGROUPS = {
    "S0VISION": {"handle": "vision", "users": ["U0BOB"]},
    "S0OTHER": {"handle": "other", "users": ["U0BOB", "U0CAROL"]},  # not in the mapping
}


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with running_fake_slack(profiles=PROFILES, usergroups=USERGROUPS) as fake:
        yield fake


@pytest.fixture
def identity_map(tmp_path: Path) -> IdentityMap:
    path = tmp_path / "identity.yaml"
    path.write_text(SPEC_FILE)
    return load_identity_map(path)


def _resolver(
    fake: FakeSlack, conn: redis.Redis, identity_map: IdentityMap, **kwargs: int
) -> IdentityResolver:
    client = WebClient(token="xoxb-test", base_url=fake.api_url)
    return IdentityResolver(identity_map, client, conn, **kwargs)


def test_static_entry_wins_without_asking_slack(
    fake: FakeSlack, conn: redis.Redis, identity_map: IdentityMap
) -> None:
    result = _resolver(fake, conn, identity_map).resolve("U012ALICE")
    assert result == Identity(user="alice@example.com", groups=("team-vision", "gpu-users"))
    assert fake.calls == []


def test_email_mapping_is_cached_in_redis(
    fake: FakeSlack, conn: redis.Redis, identity_map: IdentityMap
) -> None:
    resolver = _resolver(fake, conn, identity_map)
    first = resolver.resolve("U0BOB")
    assert first == Identity(user="bob@example.com", groups=("team-vision",))
    assert len(fake.calls_to("users.info")) == 1
    assert fake.last("users.info").params["user"] == "U0BOB"
    assert fake.last("usergroups.list").params["include_users"] in ("1", "true")
    ttl = conn.ttl(resolver.cache_key("U0BOB"))
    assert 590 < ttl <= 600

    # a second resolver (another process) is served from Redis: Slack not asked again
    assert _resolver(fake, conn, identity_map).resolve("U0BOB") == first
    assert len(fake.calls_to("users.info")) == 1
    assert len(fake.calls_to("usergroups.list")) == 1


def redis_commands(conn: redis.Redis) -> int:
    """Commands the Redis server has run so far (`INFO commandstats`), the readings left out."""
    stats = conn.info("commandstats")
    return sum(int(f["calls"]) for name, f in stats.items() if name != "cmdstat_info")


def test_a_resolved_user_costs_the_next_command_no_redis_round_trip_until_the_entry_expires(
    fake: FakeSlack, conn: redis.Redis, identity_map: IdentityMap
) -> None:
    """Issue 36: an email-mapped user's identity is read on every command's ack; the process
    remembers it (and a refusal) for as long as its Redis entry lives, and no longer."""
    now = [1000.0]
    resolver = IdentityResolver(identity_map, WebClient(token="xoxb-test", base_url=fake.api_url), conn,
                                clock=lambda: now[0])
    bob = resolver.resolve("U0BOB")
    assert resolver.resolve("U0NOBODY") == resolver.resolve("U0NOBODY")  # refused, asked once
    before = redis_commands(conn)
    for _ in range(3):
        assert resolver.resolve("U0BOB") == bob
        assert isinstance(resolver.resolve("U0NOBODY"), Unmapped)
    assert redis_commands(conn) == before
    assert len(fake.calls_to("users.info")) == 2

    now[0] += 61  # past the refusal's 60 s: it is read again (the entry's own clock is Redis's)
    before = redis_commands(conn)
    assert isinstance(resolver.resolve("U0NOBODY"), Unmapped) and redis_commands(conn) > before
    before = redis_commands(conn)
    assert resolver.resolve("U0BOB") == bob and redis_commands(conn) == before  # 600 s: still held

    # another process's resolver remembers what it read from Redis only for what the entry has left
    other = IdentityResolver(identity_map, WebClient(token="xoxb-test", base_url=fake.api_url), conn,
                             clock=lambda: now[0])
    assert other.resolve("U0BOB") == bob
    before = redis_commands(conn)
    assert other.resolve("U0BOB") == bob and redis_commands(conn) == before
    now[0] += 600
    assert other.resolve("U0BOB") == bob and redis_commands(conn) > before
    assert len(fake.calls_to("users.info")) == 2


def test_only_mapped_usergroups_become_groups(
    fake: FakeSlack, conn: redis.Redis, identity_map: IdentityMap
) -> None:
    result = _resolver(fake, conn, identity_map).resolve("U0CAROL")
    assert result == Identity(user="carol@example.com", groups=())


def test_no_usergroups_table_means_no_usergroups_call(
    fake: FakeSlack, conn: redis.Redis
) -> None:
    resolver = _resolver(fake, conn, IdentityMap(map_by_email=True))
    assert resolver.resolve("U0BOB") == Identity(user="bob@example.com")
    assert fake.calls_to("usergroups.list") == []


@pytest.mark.parametrize(
    ("user_id", "detail"),
    [
        ("U0NOBODY", "user_not_found"),
        ("U0GONE", "deactivated"),
        ("U0BOT", "bot"),
        ("U0NOMAIL", "profile.email"),
    ],
)
def test_refusals_tell_whom_to_ask_and_are_cached_briefly(
    fake: FakeSlack, conn: redis.Redis, identity_map: IdentityMap, user_id: str, detail: str
) -> None:
    resolver = _resolver(fake, conn, identity_map)
    result = resolver.resolve(user_id)
    assert isinstance(result, Unmapped)
    assert ASK_OPERATOR in result.reason and "\n" not in result.reason
    assert detail in result.detail and not result.transient
    assert 50 < conn.ttl(resolver.cache_key(user_id)) <= 60
    assert resolver.resolve(user_id) == result
    assert len(fake.calls_to("users.info")) == 1


def test_unlisted_user_refused_when_email_mapping_is_off(
    fake: FakeSlack, conn: redis.Redis
) -> None:
    result = _resolver(fake, conn, IdentityMap()).resolve("U0BOB")
    assert isinstance(result, Unmapped) and ASK_OPERATOR in result.reason
    assert "U0BOB" in result.reason
    assert fake.calls == []


def test_slack_down_is_a_transient_refusal_never_cached(
    fake: FakeSlack, conn: redis.Redis, identity_map: IdentityMap
) -> None:
    resolver = _resolver(fake, conn, identity_map)
    fake.down()
    result = resolver.resolve("U0BOB")
    assert isinstance(result, Unmapped) and result.transient
    assert "could not reach Slack" in result.reason
    assert conn.exists(resolver.cache_key("U0BOB")) == 0
    fake.up()
    assert resolver.resolve("U0BOB") == Identity(user="bob@example.com", groups=("team-vision",))


def test_rate_limited_lookup_is_transient(
    fake: FakeSlack, conn: redis.Redis, identity_map: IdentityMap
) -> None:
    fake.rate_limit_next("users.info", retry_after=30)
    result = _resolver(fake, conn, identity_map).resolve("U0BOB")
    assert isinstance(result, Unmapped) and result.transient
    assert "ratelimited" in result.detail


def test_unreadable_usergroups_refuse_rather_than_drop_groups(
    fake: FakeSlack, conn: redis.Redis, identity_map: IdentityMap
) -> None:
    fake.fail_next("usergroups.list", error="missing_scope")
    result = _resolver(fake, conn, identity_map).resolve("U0BOB")
    assert isinstance(result, Unmapped) and not result.transient
    assert "usergroups.list: missing_scope" in result.detail


def test_edited_mapping_does_not_reuse_old_cache(
    fake: FakeSlack, conn: redis.Redis, identity_map: IdentityMap
) -> None:
    _resolver(fake, conn, identity_map).resolve("U0BOB")
    widened = identity_map.model_copy(update={"usergroups": {"S0OTHER": "other"}})
    assert _resolver(fake, conn, widened).resolve("U0BOB") == Identity(
        user="bob@example.com", groups=("other",)
    )


# ------------------------------------------------------------------ file errors


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("users: [unclosed\n", "invalid YAML: line 2"),
        ("", "identity file is empty"),
        ("- a\n", "expected a mapping"),
        ("map_by_mail: true\n", "map_by_mail: Extra inputs are not permitted"),
        (
            "users:\n  U012ALICE: {user: a@example.com, gruops: [x]}\n",
            "users.U012ALICE.gruops: Extra inputs are not permitted",
        ),
        ("users:\n  alice: {user: a@example.com}\n", "users.alice.[key]"),
        ("usergroups:\n  S0X: system:masters\n", "reserved by Kubernetes"),
        ("users:\n  U012ALICE: {user: 'system:admin'}\n", "reserved by Kubernetes"),
        ("map_by_email: 'yes please'\n", "map_by_email: Input should be a valid boolean"),
    ],
)
def test_bad_identity_files_fail_with_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "identity.yaml"
    path.write_text(content)
    with pytest.raises(IdentityConfigError) as err:
        load_identity_map(path)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"{path}: ")
    assert message in text


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(IdentityConfigError, match="identity file not found"):
        load_identity_map(tmp_path / "nope.yaml")


def test_spec_example_loads(identity_map: IdentityMap) -> None:
    assert identity_map.map_by_email is True
    assert identity_map.usergroups == {"S0VISION": "team-vision"}
    assert identity_map.users["U012ALICE"].groups == ("team-vision", "gpu-users")


def test_a_profile_without_is_email_confirmed_is_refused_as_unconfirmed(
    fake: FakeSlack, conn: redis.Redis, identity_map: IdentityMap
) -> None:
    result = _resolver(fake, conn, identity_map).resolve("U0NOCONFIRM")
    assert isinstance(result, Unmapped) and "not confirmed" in result.detail
