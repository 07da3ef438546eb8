"""A worker keeps its connections to a cluster across jobs and users (issue 28).

Real HTTP to the app, real Redis, one real rq `SimpleWorker` running two statuses, the
Kubernetes API emulator counting the TCP connections its requests came on (the client ends:
one port per connection).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from tests.fakes.kube_api import running_emulator
from tests.live.conftest import workspace_objects, write_descriptor

from .conftest import ALICE, ALICE_IDENTITY, CHANNEL, SlackApp, example_objects

BOB = "U034BOB"
BOB_IDENTITY = {"user": "bob@example.com", "groups": ["team-vision"]}


def two_users(directory: Path) -> Path:
    """SPEC §9's identity file, mapping Alice and Bob."""
    path = directory / "identity-two.yaml"
    path.write_text(yaml.safe_dump({"users": {ALICE: ALICE_IDENTITY, BOB: BOB_IDENTITY}, "map_by_email": False}))
    return path


def test_a_second_status_by_another_user_opens_no_connection(
        slack_app_factory: Callable[..., SlackApp], tmp_path: Path) -> None:
    app = slack_app_factory(identity_file=two_users(tmp_path))
    with running_emulator([*workspace_objects(), *example_objects("l5-rayjob-head-crashloop")]) as emu:
        write_descriptor(app.settings.workspaces_dir, emu.base_url, channels=(CHANNEL,))
        run = next(o["metadata"]["name"] for o in example_objects("l5-rayjob-head-crashloop")
                   if o["kind"] == "RayJob")
        assert app.command(f"status {run}")[0] == 200
        assert app.command(f"status {run}", user_id=BOB)[0] == 200
        app.work()  # one worker, both jobs: Alice's first, then Bob's

        users = [r.identity.user for r in emu.requests]
        alice = {r.peer for r in emu.requests if r.identity.user == ALICE_IDENTITY["user"]}
        bob = [r for r in emu.requests if r.identity.user == BOB_IDENTITY["user"]]
        assert alice and bob and users.index(BOB_IDENTITY["user"]) > users.index(ALICE_IDENTITY["user"])
        # Bob's first request rode a connection Alice's opened: her connections sat idle in the
        # worker's pool when his job began, and a pool of his own would have had none. (How many
        # he opens later depends on timing: under load one of Alice's rounds can come out narrower
        # than one of his -- an answer back before her last request left -- and the operator
        # access review runs beside the whole status, so no exact count holds every time.)
        assert bob[0].peer in alice
        # ... and each still said who it was for: the pool is shared, identities are per request
        assert all(r.header_values("Impersonate-User") == [BOB_IDENTITY["user"]] for r in bob)
        assert all(r.header_values("Impersonate-Group") == BOB_IDENTITY["groups"] for r in bob)
        cards = [p for p in app.fake.calls_to("chat.postMessage") if p.params.get("thread_ts")]
        assert len(cards) == 2
