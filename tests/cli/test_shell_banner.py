"""The shell's banner says whom Kubernetes is read as, truthfully (issue 38, Build item 4).

A user the identity file does not list is told so at once — never "your mapped identity".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_errors import clean_env, descriptor_dir, taubot


@pytest.mark.parametrize(("user", "said"), [
    ("U012ALICE", "read as U012ALICE (alice@example.com)"),
    ("U0NOBODY", "read as U0NOBODY (not mapped:"),
])
def test_the_banner_names_the_mapping_or_its_absence(tmp_path: Path, user: str, said: str) -> None:
    identity = tmp_path / "identity.yaml"
    # the identity file's shape as README "Your own cluster, from a laptop" writes it
    identity.write_text("users:\n  U012ALICE: {user: alice@example.com, groups: [team-vision]}\n")
    env = clean_env(TAUBOT_WORKSPACES_DIR=str(descriptor_dir(tmp_path, {"context": "aks-east"})),
                    TAUBOT_IDENTITY_FILE=str(identity))
    out = taubot("shell", "--user", user, "--channel", "C012ABCDEF", "--redis", "memory", env=env, stdin="exit\n")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert said in out.stdout and "your mapped identity" not in out.stdout
