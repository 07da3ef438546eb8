"""`TauCommands` behind the listener: the ack deadline and the operator access review."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from bot.commands import STILL_WORKING, AckDeadline, TauCommands
from bot.identity import Unmapped
from tests.fakes.kube_api import KubeEmulator
from workers.collect.operator_access import cache_key, may_see_operator_hints
from workers.contracts.commands import Command
from workers.kube.client import ClusterTarget, Identity, KubeClients
from workers.kube.reader import KubeReader

ALICE = Identity(user="alice@example.com", groups=("team-vision",))


class SlowResolver:
    """An identity source that answers only when the test releases it: a users.info that
    outlasts the ack budget, without the test depending on how long anything takes."""

    def __init__(self, answer: Identity | Unmapped) -> None:
        self.answer = answer
        self.release = threading.Event()

    def resolve(self, slack_user_id: str) -> Identity | Unmapped:
        assert self.release.wait(10), "the test never released the resolver"
        return self.answer


class Recorder:
    """Stands in for Bolt's `respond` (a response_url post) and for the enqueuer."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.done = threading.Event()

    def respond(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        self.done.set()

    def enqueue(self, command: Command, identity: Identity, payload: dict[str, Any]) -> None:
        self.calls.append((command, identity))
        self.done.set()


PAYLOAD = {"text": "status r", "user_id": "U012ALICE", "channel_id": "C1", "response_url": "x"}


def test_slow_refusal_acks_in_budget_then_tells_the_user() -> None:
    responses, jobs = Recorder(), Recorder()
    refusal = Unmapped(slack_user_id="U012ALICE", reason="ask the platform operator")
    resolver = SlowResolver(refusal)
    commands = TauCommands(resolver, jobs.enqueue, ack_budget=0.01)
    reply = commands.handle(PAYLOAD, responses.respond)
    assert reply == STILL_WORKING  # the resolver is still blocked: the ack did not wait for it
    resolver.release.set()
    assert responses.done.wait(5)
    assert responses.calls == [{"text": "⛔ ask the platform operator", "response_type": "ephemeral",
                                "replace_original": False}]
    assert jobs.calls == []


def test_slow_success_acks_in_budget_and_says_nothing_more() -> None:
    responses, jobs = Recorder(), Recorder()
    resolver = SlowResolver(ALICE)
    commands = TauCommands(resolver, jobs.enqueue, ack_budget=0.01)
    assert commands.handle(PAYLOAD, responses.respond) == STILL_WORKING
    resolver.release.set()
    assert jobs.done.wait(5)
    commands.executor.shutdown(wait=True)  # the late-reply callback has run when this returns
    assert responses.calls == []
    assert len(jobs.calls) == 1


def test_a_command_that_queued_past_its_budget_acks_still_working_at_once() -> None:
    """The budget runs from the request's arrival at the server (`arrived`, on the injected
    clock), not from when a dispatch thread got to it: a command that waited behind others
    stalled on Redis answers "still working" with no wait of its own, and is queued later."""
    responses, jobs = Recorder(), Recorder()
    resolver = SlowResolver(ALICE)  # blocked until released, so only a zero wait can return
    commands = TauCommands(resolver, jobs.enqueue, ack_budget=30.0, clock=lambda: 1000.0)
    assert commands.handle(PAYLOAD, responses.respond, arrived=1000.0 - 31) == STILL_WORKING
    resolver.release.set()
    assert jobs.done.wait(5)
    commands.executor.shutdown(wait=True)
    assert len(jobs.calls) == 1 and responses.calls == []


class Instant:
    """An identity source that answers at once."""

    def __init__(self, answer: Identity | Unmapped) -> None:
        self.answer = answer

    def resolve(self, slack_user_id: str) -> Identity | Unmapped:
        return self.answer


@pytest.mark.parametrize(("text", "resolver", "told"), [
    ("statsu r", Instant(ALICE), "did you mean"),
    ("status r", Instant(Unmapped(slack_user_id="U012ALICE", reason="ask the platform operator")),
     "ask the platform operator"),
    ("status r", Instant(ALICE), None),
])
def test_a_command_reached_after_the_server_answered_is_told_on_response_url(
        text: str, resolver: Instant, told: str | None) -> None:
    """Behind `taubot serve http` the server answers "still working" at the deadline whatever
    the command's thread is doing (its thread held by a stalled Redis, say). A thread that
    reaches the command afterwards must not answer into the void: a usage mistake or a refusal
    goes to response_url; a queued command needs no further word."""
    responses, jobs = Recorder(), Recorder()
    commands = TauCommands(resolver, jobs.enqueue, clock=lambda: 1000.0)
    deadline = AckDeadline(1000.0 - 1)
    assert not deadline.expire()  # the server at the deadline, the command not started: it answers
    assert commands.handle({**PAYLOAD, "text": text}, responses.respond, arrived=1000.0 - 3,
                           deadline=deadline) == STILL_WORKING
    commands.executor.shutdown(wait=True)  # the late answer has gone when this returns
    if told is None:
        assert responses.calls == [] and len(jobs.calls) == 1
    else:
        [late] = responses.calls
        assert told in late["text"] and late["response_type"] == "ephemeral" and jobs.calls == []


def test_enqueue_bug_is_an_ephemeral_error_not_an_exception() -> None:
    def broken(command: Command, identity: Identity, payload: dict[str, Any]) -> None:
        raise RuntimeError("bug")

    resolver = SlowResolver(ALICE)
    resolver.release.set()
    reply = TauCommands(resolver, broken).handle(PAYLOAD, Recorder().respond)
    assert "internal error" in reply.text and not reply.queued


async def _hints(target: ClusterTarget, identity: Identity, cache: object) -> bool:
    """The review as a status makes it: through the status's one impersonated client."""
    api = await KubeClients().user(target, identity)
    async with api:
        return await may_see_operator_hints(KubeReader(api, 10.0), identity, scope="vision",
                                            cache=cache)  # type: ignore[arg-type]


async def test_operator_hints_need_cluster_wide_workload_access(redis_url: str) -> None:
    import redis

    cache = redis.Redis.from_url(redis_url)
    async with KubeEmulator([]) as emu:
        target = ClusterTarget(server=emu.base_url)
        emu.forbid("list", "workloads", group="team-vision")
        assert await _hints(target, ALICE, cache) is False
        [review] = [r for r in emu.requests if r.path.endswith("selfsubjectaccessreviews")]
        assert review.header_values("Impersonate-User") == ["alice@example.com"]
        assert review.header_values("Impersonate-Group") == ["team-vision"]
        assert cache.get(cache_key("vision", ALICE)) == b"0"

        operator = Identity(user="bob@example.com", groups=("platform-ops",))
        assert await _hints(target, operator, cache) is True
        emu.clear_requests()
        assert await _hints(target, operator, cache) is True
        assert emu.requests == []  # answered from the Redis cache
    cache.close()


async def test_failed_review_hides_hints_and_is_not_cached(redis_url: str) -> None:
    import redis

    cache = redis.Redis.from_url(redis_url)
    async with KubeEmulator([]) as emu:
        emu.forbid("create", "selfsubjectaccessreviews")
        target = ClusterTarget(server=emu.base_url)
        assert await _hints(target, ALICE, cache) is False
        assert cache.get(cache_key("vision", ALICE)) is None
    cache.close()
