"""Workspace connection descriptors: loading, plain-words problems, resolution (layer 1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from workers.config.workspaces import (
    ResolutionFailure,
    Resolved,
    WorkspaceConnection,
    load_descriptors,
)
from workers.kube.client import ClusterTarget

# Shape: the WorkspaceConnection example of SPEC §8.
VISION = """\
apiVersion: taugrid.io/v1alpha1
kind: WorkspaceConnection
metadata: {name: vision}
spec:
  cluster: {context: aks-east}
  namespace: team-vision
  workspace: vision
  localQueue: vision-default
  slack: {channels: [C012ABCDEF]}
  owners:
    platform: {channel: C0PLATFORM, usergroup: S0PLATFORM}
  logs:
    kusto: {cluster: aks-east-prod, endpoint: https://aks-east.kusto.windows.net, database: logs}
"""

# Same shape, second team, server-style cluster access (SPEC §8's commented alternative).
NLP = """\
apiVersion: taugrid.io/v1alpha1
kind: WorkspaceConnection
metadata: {name: nlp}
spec:
  cluster:
    server: https://aks-west.example.com
    certificateAuthority: /etc/taubot/ca/aks-west.crt
    tokenFile: /var/run/secrets/tokens/aks-west
  namespace: team-nlp
  workspace: nlp
  localQueue: nlp-default
  slack: {channels: [C0NLP]}
"""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def failure(resolution: object) -> ResolutionFailure:
    assert isinstance(resolution, ResolutionFailure), resolution
    assert resolution.owner == "researcher"
    assert resolution.layer == 1
    return resolution


# --- resolution that works -------------------------------------------------------------


def test_resolve_by_name(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", VISION)
    write(tmp_path, "nlp.yml", NLP)
    registry = load_descriptors(tmp_path)
    assert registry.problems == ()
    assert registry.names == ["nlp", "vision"]
    resolved = registry.resolve(workspace="nlp")
    assert isinstance(resolved, Resolved)
    assert resolved.descriptor.spec.localQueue == "nlp-default"
    assert resolved.path == tmp_path / "nlp.yml"


def test_resolve_by_channel(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", VISION)
    write(tmp_path, "nlp.yaml", NLP)
    resolved = load_descriptors(tmp_path).resolve(channel="C012ABCDEF")
    assert isinstance(resolved, Resolved)
    assert resolved.descriptor.metadata.name == "vision"


def test_name_wins_over_channel(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", VISION)
    write(tmp_path, "nlp.yaml", NLP)
    resolved = load_descriptors(tmp_path).resolve(workspace="nlp", channel="C012ABCDEF")
    assert isinstance(resolved, Resolved)
    assert resolved.descriptor.metadata.name == "nlp"


def test_multi_document_file(tmp_path: Path) -> None:
    write(tmp_path, "teams.yaml", VISION + "---\n" + NLP + "---\n")
    registry = load_descriptors(tmp_path)
    assert registry.problems == ()
    assert registry.names == ["nlp", "vision"]
    assert [d.document for d in registry.descriptors] == [1, 2]
    assert isinstance(registry.resolve(workspace="vision"), Resolved)
    assert isinstance(registry.resolve(channel="C0NLP"), Resolved)


def test_single_descriptor_needs_no_name(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", VISION)
    assert isinstance(load_descriptors(tmp_path).resolve(), Resolved)


def test_hidden_entries_and_other_files_are_ignored(tmp_path: Path) -> None:
    """A ConfigMap volume holds `..data/` and timestamped dirs beside the real files."""
    (tmp_path / "..data").mkdir()
    write(tmp_path / "..data", "vision.yaml", VISION)
    write(tmp_path, "README.md", "not a descriptor")
    write(tmp_path, ".vision.yaml.swp", "garbage: [")
    write(tmp_path, "vision.yaml", VISION)
    registry = load_descriptors(tmp_path)
    assert registry.problems == ()
    assert registry.names == ["vision"]


def test_cluster_target(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", VISION)
    write(tmp_path, "nlp.yaml", NLP)
    registry = load_descriptors(tmp_path)
    vision = registry.resolve(workspace="vision")
    nlp = registry.resolve(workspace="nlp")
    assert isinstance(vision, Resolved) and isinstance(nlp, Resolved)
    assert isinstance(vision.descriptor.cluster_target(), ClusterTarget)
    assert _target_fields(vision.descriptor) == {"context": "aks-east"}
    assert _target_fields(nlp.descriptor) == {
        "server": "https://aks-west.example.com",
        "certificateAuthority": Path("/etc/taubot/ca/aks-west.crt"),
        "tokenFile": Path("/var/run/secrets/tokens/aks-west"),
    }


def _target_fields(descriptor: WorkspaceConnection) -> dict[str, object]:
    """The fields the descriptor set on the client factory's ClusterTarget, by alias."""
    return descriptor.cluster_target().model_dump(by_alias=True, exclude_defaults=True)


# --- each failure, its own message -----------------------------------------------------


def test_missing_directory(tmp_path: Path) -> None:
    absent = tmp_path / "workspaces"
    result = failure(load_descriptors(absent).resolve(workspace="vision"))
    assert result.reason == "no_directory"
    assert result.message == f"workspaces directory {absent} does not exist"


def test_unconfigured_directory() -> None:
    result = failure(load_descriptors(None).resolve(workspace="vision"))
    assert result.reason == "no_directory"
    assert "TAUBOT_WORKSPACES_DIR" in result.message


def test_directory_that_is_a_file(tmp_path: Path) -> None:
    path = write(tmp_path, "workspaces", "")
    result = failure(load_descriptors(path).resolve(workspace="vision"))
    assert result.reason == "no_directory"
    assert "is a file, not a directory" in result.message


def test_unreadable_directory_name_too_long(tmp_path: Path) -> None:
    # ENAMETOOLONG is an OSError that no permission bit (and no root) gets around.
    result = failure(load_descriptors(tmp_path / ("w" * 300)).resolve(workspace="vision"))
    assert result.reason == "no_directory"
    assert "cannot be read: File name too long" in result.message


def test_missing_descriptor_names_what_was_found(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", VISION)
    write(tmp_path, "nlp.yaml", NLP)
    result = failure(load_descriptors(tmp_path).resolve(workspace="speech"))
    assert result.reason == "missing"
    assert result.message == (
        f'no workspace connection named "speech" in {tmp_path} (found: nlp, vision)'
    )


def test_unclaimed_channel(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", VISION)
    result = failure(load_descriptors(tmp_path).resolve(channel="C0OTHER"))
    assert result.reason == "missing"
    assert "channel C0OTHER" in result.message
    assert "(found: vision)" in result.message


def test_channel_claimed_twice(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", VISION)
    write(tmp_path, "nlp.yaml", NLP.replace("C0NLP", "C012ABCDEF"))
    result = failure(load_descriptors(tmp_path).resolve(channel="C012ABCDEF"))
    assert result.reason == "ambiguous"
    assert result.message.startswith(
        "channel C012ABCDEF is claimed by two workspaces: nlp (nlp.yaml), vision (vision.yaml)"
    )


def test_name_defined_twice(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", VISION)
    write(tmp_path, "vision-copy.yaml", VISION)
    registry = load_descriptors(tmp_path)
    assert [p.kind for p in registry.problems] == ["duplicate"]
    assert registry.problems[0].describe() == (
        'vision.yaml: workspace connection "vision" is also defined in vision-copy.yaml'
    )
    result = failure(registry.resolve(workspace="vision"))
    assert result.reason == "ambiguous"
    assert "defined more than once" in result.message


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(
            lambda t: t.replace("  localQueue: vision-default\n", ""),
            "vision.yaml is invalid: spec.localQueue: field required",
            id="missing-field",
        ),
        pytest.param(
            lambda t: t.replace("localQueue:", "localQeue:"),
            "vision.yaml is invalid: spec.localQueue: field required; "
            'spec.localQeue: unknown field; did you mean "localQueue"?',
            id="typo",
        ),
        pytest.param(
            lambda t: t.replace("    platform:", "    plaform:"),
            "vision.yaml is invalid: spec.owners.plaform: unknown owner id; use one of "
            "'researcher', 'platform', 'queue-owner', 'node-pool-owner', 'image-owner' "
            "or 'taugrid-owner'",
            id="bad-owner-id",
        ),
        pytest.param(
            lambda t: t.replace("{context: aks-east}", "{context: aks-east, server: https://x}"),
            "vision.yaml is invalid: spec.cluster: give exactly one of context "
            "(a kubeconfig context) or server (an API server URL)",
            id="context-and-server",
        ),
        pytest.param(
            lambda t: t.replace("namespace: team-vision", "namespace: Team_Vision"),
            'vision.yaml is invalid: spec.namespace: "Team_Vision" is not a DNS-1123 label '
            '(lowercase letters, digits and "-", starting and ending with a letter or digit, '
            "at most 63 characters)",
            id="not-dns-1123",
        ),
        pytest.param(
            lambda t: t.replace("[C012ABCDEF]", "['#vision']"),
            'vision.yaml is invalid: spec.slack.channels[0]: "#vision" is not a Slack channel '
            "ID such as C012ABCDEF (not a #name)",
            id="channel-name-not-id",
        ),
        pytest.param(
            lambda t: t.replace("kind: WorkspaceConnection", "kind: WorkspaceConection"),
            "vision.yaml is invalid: kind: must be 'WorkspaceConnection' "
            "(got 'WorkspaceConection')",
            id="wrong-kind",
        ),
    ],
)
def test_schema_violation(tmp_path: Path, edit: Callable[[str], str], expected: str) -> None:
    write(tmp_path, "vision.yaml", edit(VISION))
    write(tmp_path, "nlp.yaml", NLP)
    registry = load_descriptors(tmp_path)
    assert registry.names == ["nlp"], "the other workspace still loads"
    result = failure(registry.resolve(workspace="vision"))
    assert result.reason == "invalid"
    assert result.message == expected


def test_invalid_descriptor_found_by_file_name(tmp_path: Path) -> None:
    """metadata.name itself is broken: the file name still ties the problem to the request."""
    write(tmp_path, "vision.yaml", VISION.replace("metadata: {name: vision}", "metadata: {}"))
    result = failure(load_descriptors(tmp_path).resolve(workspace="vision"))
    assert result.reason == "invalid"
    assert result.message == "vision.yaml is invalid: metadata.name: field required"


def test_invalid_descriptor_found_by_channel(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", VISION.replace("  workspace: vision\n", ""))
    result = failure(load_descriptors(tmp_path).resolve(channel="C012ABCDEF"))
    assert result.reason == "invalid"
    assert result.message == "vision.yaml is invalid: spec.workspace: field required"


def test_bad_yaml_gives_the_line(tmp_path: Path) -> None:
    broken = VISION.replace("  namespace: team-vision", "  namespace: team-vision: oops")
    write(tmp_path, "vision.yaml", broken)
    registry = load_descriptors(tmp_path)
    assert [p.kind for p in registry.problems] == ["yaml"]
    result = failure(registry.resolve(workspace="vision"))
    assert result.reason == "invalid"
    assert result.message.startswith("vision.yaml is invalid: line 6, column ")
    assert "mapping values are not allowed here" in result.message


def test_duplicate_key_is_bad_yaml(tmp_path: Path) -> None:
    """PyYAML would keep the last of two keys silently; that hides a typo just as well."""
    write(tmp_path, "vision.yaml", VISION + "  namespace: team-other\n")
    result = failure(load_descriptors(tmp_path).resolve(workspace="vision"))
    assert result.reason == "invalid"
    assert result.message == 'vision.yaml is invalid: line 14, column 3: duplicate key "namespace"'


def test_bad_document_in_multi_document_file(tmp_path: Path) -> None:
    write(tmp_path, "teams.yaml", VISION + "---\n" + NLP.replace("kind:", "kinds:"))
    registry = load_descriptors(tmp_path)
    assert registry.names == ["vision"]
    result = failure(registry.resolve(workspace="nlp"))
    assert result.reason == "invalid"
    assert result.message.startswith("teams.yaml (document 2) is invalid: kind: field required")


def test_non_mapping_document(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", "- just\n- a list\n")
    result = failure(load_descriptors(tmp_path).resolve(workspace="vision"))
    assert result.message == (
        "vision.yaml is invalid: expected a WorkspaceConnection mapping, got a list"
    )


def test_missing_mentions_unusable_files(tmp_path: Path) -> None:
    write(tmp_path, "vision.yaml", VISION)
    write(tmp_path, "broken.yaml", "a: [")
    result = failure(load_descriptors(tmp_path).resolve(workspace="speech"))
    assert result.message == (
        f'no workspace connection named "speech" in {tmp_path} '
        "(found: vision; not usable: broken.yaml)"
    )
