"""Workspace connection descriptors (SPEC §8) and their resolution (layer 1, SPEC §4).

A descriptor is the platform's handoff to a team: which cluster, namespace,
TauWorkspace and LocalQueue a workspace is, which Slack channels it answers
in and where escalations go. Getting it wrong is the researcher's problem to
fix (layer 1), so every failure here must say, in plain words, which file,
which field and why — a stack trace or a pydantic dump would send the
researcher to the platform team for a typo.

Loading never raises for a bad file: one broken descriptor must not take down
the workspaces of every other team sharing the bot. Problems are collected as
values beside the valid descriptors and surface only when someone asks for
the workspace they concern.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from workers.contracts.cluster import ClusterTarget
from workers.diagnosis.models import Owner

API_VERSION = "taugrid.io/v1alpha1"
KIND = "WorkspaceConnection"
DESCRIPTOR_SUFFIXES = (".yaml", ".yml")

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
# Plain http only to this machine: a local API emulator or `kubectl proxy`.
_LOOPBACK_HTTP = re.compile(r"^http://(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?(/|$)")
_SLACK_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{2,}$")
_SLACK_USERGROUP_ID = re.compile(r"^S[A-Z0-9]{2,}$")


def _dns1123_label(value: str) -> str:
    """Kubernetes rejects anything else as a namespace or name; say so before the API does."""
    if len(value) > 63 or not _DNS1123_LABEL.match(value):
        raise ValueError(
            f'"{value}" is not a DNS-1123 label (lowercase letters, digits and "-", '
            "starting and ending with a letter or digit, at most 63 characters)"
        )
    return value


def _dns1123_subdomain(value: str) -> str:
    """Object names (TauWorkspace, LocalQueue) may contain dots but follow the same rule."""
    if len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
        raise ValueError(
            f'"{value}" is not a DNS-1123 name (lowercase letters, digits, "-" and ".", '
            "starting and ending with a letter or digit)"
        )
    return value


def _slack_channel_id(value: str) -> str:
    """Slash commands report channel IDs, so a `#name` here could never match."""
    if not _SLACK_CHANNEL_ID.match(value):
        raise ValueError(f'"{value}" is not a Slack channel ID such as C012ABCDEF (not a #name)')
    return value


def _slack_usergroup_id(value: str) -> str:
    """Mentions need the `<!subteam^S…>` ID; a handle would post as plain text."""
    if not _SLACK_USERGROUP_ID.match(value):
        raise ValueError(f'"{value}" is not a Slack user group ID such as S0PLATFORM')
    return value


Dns1123Label = Annotated[str, AfterValidator(_dns1123_label)]
Dns1123Subdomain = Annotated[str, AfterValidator(_dns1123_subdomain)]
SlackChannelId = Annotated[str, AfterValidator(_slack_channel_id)]
SlackUsergroupId = Annotated[str, AfterValidator(_slack_usergroup_id)]


class _Strict(BaseModel):
    """Unknown fields are errors: a typo such as `localQeue` must not pass silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class OwnerRoute(_Strict):
    """Where an escalation to one owner goes: a channel, and the user group to mention there."""

    channel: SlackChannelId
    usergroup: SlackUsergroupId | None = None


class Metadata(_Strict):
    """Only the name: it is what users type after `--workspace`."""

    name: Dns1123Label


class ClusterRef(_Strict):
    """How to reach the cluster: a kubeconfig context, or an API server with in-cluster-style auth.

    Exactly one of `context` and `server`; the CA and token file only make
    sense with a server (a context carries its own).
    """

    context: str | None = Field(default=None, min_length=1)
    server: str | None = None
    certificateAuthority: Path | None = None
    tokenFile: Path | None = None

    @model_validator(mode="after")
    def _one_way_to_connect(self) -> ClusterRef:
        if (self.context is None) == (self.server is None):
            raise ValueError(
                "give exactly one of context (a kubeconfig context) or server (an API server URL)"
            )
        if self.context is not None and (
            self.certificateAuthority is not None or self.tokenFile is not None
        ):
            raise ValueError("certificateAuthority and tokenFile go with server, not with context")
        if self.server is not None and not (
            self.server.startswith("https://") or _LOOPBACK_HTTP.match(self.server)
        ):
            raise ValueError(f'server "{self.server}" must be an https:// URL')
        return self


class SlackSpec(_Strict):
    """The channels this workspace answers in when a command gives no `--workspace`."""

    channels: list[SlackChannelId] = Field(default_factory=list)


def _kusto_endpoint(value: str) -> str:
    """https, or plain http only to this machine (a local Kusto or MLflow endpoint for tests)."""
    https = value.startswith("https://") and len(value) > len("https://")
    if not https and not _LOOPBACK_HTTP.match(value):
        raise ValueError(f'endpoint "{value}" must be an https:// URL (plain http only to 127.0.0.1 '
                         "or localhost)")
    return value


class KustoLogs(_Strict):
    """Azure Data Explorer location of the workspace's container logs (layer 7).

    `cluster` is the exact Cluster value of the offloaded logs (the guide's
    `--kusto-cluster`): TauGrid never guesses it from the kube context.
    """

    cluster: str = Field(min_length=1)
    endpoint: Annotated[str, AfterValidator(_kusto_endpoint)]
    database: str = Field(min_length=1)


class LogsSpec(_Strict):
    """Where logs live; only Kusto today."""

    kusto: KustoLogs | None = None


class MlflowStore(_Strict):
    """An MLflow tracking server (REST API 2.0) holding the workspace's experiment records."""

    uri: Annotated[str, AfterValidator(_kusto_endpoint)]
    # The experiment holding the workspace's runs, looked up by name (one request) instead of
    # paging through every experiment of the server (SPEC §11 "Experiment store").
    experiment: str | None = Field(default=None, min_length=1)


class ExperimentsSpec(_Strict):
    """Where durable experiment evidence lives (SPEC §10); only MLflow today."""

    mlflow: MlflowStore


class WorkspaceConnectionSpec(_Strict):
    """The handoff itself (SPEC §8)."""

    cluster: ClusterRef
    namespace: Dns1123Label
    workspace: Dns1123Subdomain
    localQueue: Dns1123Subdomain
    slack: SlackSpec = Field(default_factory=SlackSpec)
    owners: dict[Owner, OwnerRoute] = Field(default_factory=dict)
    logs: LogsSpec | None = None
    experiments: ExperimentsSpec | None = None


class WorkspaceConnection(_Strict):
    """One `WorkspaceConnection` descriptor, as the platform hands it out."""

    apiVersion: Literal["taugrid.io/v1alpha1"]
    kind: Literal["WorkspaceConnection"]
    metadata: Metadata
    spec: WorkspaceConnectionSpec

    @property
    def name(self) -> str:
        """The workspace name users type."""
        return self.metadata.name

    def cluster_target(self) -> ClusterTarget:
        """The connection data for the Kubernetes client factory, as its own model.

        Imported here rather than at module top: settings and the Slack front
        end import this module, and they must not pull in the Kubernetes client
        (CONVENTIONS: nothing in bot/ talks to Kubernetes).
        """

        cluster = self.spec.cluster
        if cluster.context is not None:
            return ClusterTarget(context=cluster.context)
        return ClusterTarget(
            server=cluster.server,
            certificateAuthority=cluster.certificateAuthority,
            tokenFile=cluster.tokenFile,
        )


class LoadedDescriptor(BaseModel):
    """A valid descriptor and the file it came from (messages name the file)."""

    model_config = ConfigDict(frozen=True)

    path: Path
    document: int | None = Field(
        default=None, description="1-based position in a multi-document file; None if alone."
    )
    descriptor: WorkspaceConnection

    @property
    def name(self) -> str:
        return self.descriptor.metadata.name

    @property
    def where(self) -> str:
        return _where(self.path, self.document)


ProblemKind = Literal["directory", "unreadable", "yaml", "schema", "duplicate"]


class DescriptorProblem(BaseModel):
    """Why one file (or one document in it) gave no usable descriptor.

    `name` and `channels` are read best-effort from an invalid document so a
    user asking for that workspace hears "invalid, because…" rather than
    "missing".
    """

    model_config = ConfigDict(frozen=True)

    path: Path
    message: str
    kind: ProblemKind = "schema"
    document: int | None = None
    name: str | None = None
    channels: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return _where(self.path, self.document)

    def describe(self) -> str:
        """One line for a user: `vision.yaml is invalid: spec.localQueue: field required`."""
        if self.kind in ("directory", "unreadable"):
            return self.message
        if self.kind == "duplicate":
            return f"{self.where}: {self.message}"
        return f"{self.where} is invalid: {self.message}"


class Resolved(BaseModel):
    """Layer 1 passed offline: exactly one descriptor answers the request."""

    model_config = ConfigDict(frozen=True)

    ok: Literal[True] = True
    descriptor: WorkspaceConnection
    path: Path


class ResolutionFailure(BaseModel):
    """Layer 1 failed offline; the researcher fixes it (SPEC §4), the message says how."""

    model_config = ConfigDict(frozen=True)

    ok: Literal[False] = False
    reason: Literal["missing", "ambiguous", "invalid", "no_directory"]
    message: str
    layer: Literal[1] = 1
    owner: Owner = "researcher"


Resolution = Resolved | ResolutionFailure


class Registry(BaseModel):
    """Every descriptor found in one directory, valid or not."""

    model_config = ConfigDict(frozen=True)

    directory: Path | None
    descriptors: tuple[LoadedDescriptor, ...] = ()
    problems: tuple[DescriptorProblem, ...] = ()

    @property
    def names(self) -> list[str]:
        """Sorted names of valid descriptors, as shown in "found: …" lists."""
        return sorted({d.name for d in self.descriptors})

    def _directory_failure(self) -> ResolutionFailure | None:
        for problem in self.problems:
            if problem.kind == "directory":
                return ResolutionFailure(reason="no_directory", message=problem.message)
        return None

    def _found(self) -> str:
        """The "(found: …)" tail, mentioning files that could not be used."""
        found = ", ".join(self.names) or "none"
        broken = sorted({p.path.name for p in self.problems if p.kind != "duplicate"})
        if broken:
            found += f"; not usable: {', '.join(broken)}"
        return f"(found: {found})"

    def resolve(self, workspace: str | None = None, channel: str | None = None) -> Resolution:
        """Pick the descriptor for a request: by name if given (it wins), else by channel.

        With neither, a directory holding exactly one descriptor resolves to
        it, as a single-team install expects.
        """
        failure = self._directory_failure()
        if failure is not None:
            return failure
        if workspace is not None:
            return self._by_name(workspace)
        if channel is not None:
            return self._by_channel(channel)
        return self._only_one()

    def _by_name(self, workspace: str) -> Resolution:
        matches = [d for d in self.descriptors if d.name == workspace]
        if len(matches) == 1:
            return Resolved(descriptor=matches[0].descriptor, path=matches[0].path)
        if matches:
            return ResolutionFailure(
                reason="ambiguous",
                message=(
                    f'workspace connection "{workspace}" is defined more than once: '
                    f"{_list_where(matches)}"
                ),
            )
        invalid = [
            p
            for p in self.problems
            if p.kind in ("yaml", "schema", "unreadable")
            and (p.name == workspace or _stem(p.path) == workspace)
        ]
        if invalid:
            return ResolutionFailure(
                reason="invalid", message="; ".join(p.describe() for p in invalid)
            )
        return ResolutionFailure(
            reason="missing",
            message=(
                f'no workspace connection named "{workspace}" in {self.directory} {self._found()}'
            ),
        )

    def _by_channel(self, channel: str) -> Resolution:
        matches = [d for d in self.descriptors if channel in d.descriptor.spec.slack.channels]
        if len(matches) == 1:
            return Resolved(descriptor=matches[0].descriptor, path=matches[0].path)
        if matches:
            count = "two" if len(matches) == 2 else str(len(matches))
            return ResolutionFailure(
                reason="ambiguous",
                message=(
                    f"channel {channel} is claimed by {count} workspaces: {_list_where(matches)}; "
                    "pass --workspace or remove the channel from all but one descriptor"
                ),
            )
        invalid = [p for p in self.problems if channel in p.channels]
        if invalid:
            return ResolutionFailure(
                reason="invalid", message="; ".join(p.describe() for p in invalid)
            )
        return ResolutionFailure(
            reason="missing",
            message=(
                f"no workspace connection lists channel {channel} in spec.slack.channels "
                f"in {self.directory} {self._found()}; pass --workspace"
            ),
        )

    def _only_one(self) -> Resolution:
        if len(self.descriptors) == 1 and not self.problems:
            only = self.descriptors[0]
            return Resolved(descriptor=only.descriptor, path=only.path)
        if not self.descriptors:
            return ResolutionFailure(
                reason="missing",
                message=f"no workspace connection in {self.directory} {self._found()}",
            )
        return ResolutionFailure(
            reason="ambiguous",
            message=(
                f"no workspace given and {self.directory} holds several {self._found()}; "
                "pass --workspace"
            ),
        )


def load_descriptors(directory: Path | str | None) -> Registry:
    """Read every `*.yaml` / `*.yml` in `directory` (not recursive); never raises for bad input.

    Hidden entries are skipped: a ConfigMap volume holds `..data` and
    timestamped directories beside the symlinks to the real files.
    """
    if directory is None:
        return Registry(
            directory=None,
            problems=(
                DescriptorProblem(
                    path=Path("."),
                    kind="directory",
                    message=(
                        "no workspaces directory configured: set TAUBOT_WORKSPACES_DIR "
                        "or pass --workspaces-dir"
                    ),
                ),
            ),
        )
    root = Path(directory)
    try:
        entries = sorted(
            p
            for p in root.iterdir()
            if p.suffix in DESCRIPTOR_SUFFIXES and not p.name.startswith(".") and p.is_file()
        )
    except FileNotFoundError:
        return _no_directory(root, f"workspaces directory {root} does not exist")
    except NotADirectoryError:
        return _no_directory(root, f"workspaces directory {root} is a file, not a directory")
    except OSError as exc:
        return _no_directory(
            root, f"workspaces directory {root} cannot be read: {exc.strerror or exc}"
        )

    descriptors: list[LoadedDescriptor] = []
    problems: list[DescriptorProblem] = []
    for path in entries:
        loaded, found = _load_file(path)
        descriptors.extend(loaded)
        problems.extend(found)
    problems.extend(_duplicates(descriptors))
    return Registry(directory=root, descriptors=tuple(descriptors), problems=tuple(problems))


def _no_directory(root: Path, message: str) -> Registry:
    return Registry(
        directory=root,
        problems=(DescriptorProblem(path=root, kind="directory", message=message),),
    )


def _load_file(path: Path) -> tuple[list[LoadedDescriptor], list[DescriptorProblem]]:
    """Parse one file; a YAML error anywhere makes the whole file unusable.

    Documents before a syntax error did parse, but half of a broken file is a
    worse surprise than none of it.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return [], [
            DescriptorProblem(
                path=path, kind="unreadable", message=f"{path} cannot be read: {reason}"
            )
        ]
    try:
        documents = [d for d in yaml.load_all(text, Loader=_UniqueKeyLoader)]
    except yaml.YAMLError as exc:
        return [], [DescriptorProblem(path=path, kind="yaml", message=_yaml_message(exc))]

    present = [(i, d) for i, d in enumerate(documents, start=1) if d is not None]
    multi = len(present) > 1
    loaded: list[LoadedDescriptor] = []
    problems: list[DescriptorProblem] = []
    for index, document in present:
        number = index if multi else None
        if not isinstance(document, dict):
            problems.append(
                DescriptorProblem(
                    path=path,
                    document=number,
                    message=f"expected a WorkspaceConnection mapping, got {_yaml_type(document)}",
                )
            )
            continue
        try:
            descriptor = WorkspaceConnection.model_validate(document)
        except ValidationError as exc:
            problems.append(
                DescriptorProblem(
                    path=path,
                    document=number,
                    message="; ".join(_plain(error) for error in exc.errors()),
                    name=_raw_name(document),
                    channels=_raw_channels(document),
                )
            )
            continue
        loaded.append(LoadedDescriptor(path=path, document=number, descriptor=descriptor))
    return loaded, problems


def _duplicates(descriptors: Iterable[LoadedDescriptor]) -> Iterator[DescriptorProblem]:
    """Report every descriptor after the first that reuses a name; resolution refuses both."""
    first: dict[str, LoadedDescriptor] = {}
    for loaded in descriptors:
        if loaded.name in first:
            yield DescriptorProblem(
                path=loaded.path,
                document=loaded.document,
                kind="duplicate",
                name=loaded.name,
                message=(
                    f'workspace connection "{loaded.name}" is also defined in '
                    f"{first[loaded.name].where}"
                ),
            )
        else:
            first[loaded.name] = loaded


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, which PyYAML would silently overwrite."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f'duplicate key "{key}"',
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_message(exc: yaml.YAMLError) -> str:
    """`line 4, column 9: mapping values are not allowed here` (1-based, like editors)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or "syntax error"
        context = f" ({exc.context})" if exc.context else ""
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}{context}"
    return f"not valid YAML: {exc}"


def _yaml_type(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


_PYDANTIC_TYPES = {
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "int_type": "must be a whole number",
    "bool_type": "must be true or false",
    "string_too_short": "must not be empty",
}


def _known_fields() -> set[str]:
    """Every field name a descriptor may use, for "did you mean" hints."""
    models: list[type[BaseModel]] = [
        WorkspaceConnection,
        Metadata,
        WorkspaceConnectionSpec,
        ClusterRef,
        SlackSpec,
        OwnerRoute,
        LogsSpec,
        KustoLogs,
        ExperimentsSpec,
        MlflowStore,
    ]
    return {name for model in models for name in model.model_fields}


def _plain(error: ErrorDetails) -> str:
    """One pydantic error as `spec.localQueue: field required`, in words a researcher reads."""
    loc = [part for part in error["loc"] if part != "[key]"]
    path = (
        "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
        or "(document)"
    )
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return f"{path}: field required"
    if kind == "extra_forbidden":
        field = str(loc[-1]) if loc else ""
        hint = difflib.get_close_matches(field, sorted(_known_fields()), n=1)
        suggestion = f'; did you mean "{hint[0]}"?' if hint else ""
        return f"{path}: unknown field{suggestion}"
    if kind == "literal_error":
        if "[key]" in error["loc"] and len(loc) >= 2 and loc[-2] == "owners":
            return f"{path}: unknown owner id; use one of {ctx.get('expected', '')}"
        return f"{path}: must be {ctx.get('expected', '')} (got {error.get('input')!r})"
    if kind == "value_error":
        return f"{path}: {ctx.get('error', error['msg'])}"
    if kind == "string_pattern_mismatch" and path.endswith("endpoint"):
        return f"{path}: must be an https:// URL"
    if kind in _PYDANTIC_TYPES:
        return f"{path}: {_PYDANTIC_TYPES[kind]}"
    message = error["msg"]
    return f"{path}: {message[:1].lower()}{message[1:]}"


def _raw_name(document: dict[Any, Any]) -> str | None:
    metadata = document.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("name"), str):
        return metadata["name"]
    return None


def _raw_channels(document: dict[Any, Any]) -> tuple[str, ...]:
    spec = document.get("spec")
    slack = spec.get("slack") if isinstance(spec, dict) else None
    channels = slack.get("channels") if isinstance(slack, dict) else None
    if isinstance(channels, list):
        return tuple(c for c in channels if isinstance(c, str))
    return ()


def _where(path: Path, document: int | None) -> str:
    return path.name if document is None else f"{path.name} (document {document})"


def _stem(path: Path) -> str:
    return path.stem


def _list_where(matches: Iterable[LoadedDescriptor]) -> str:
    return ", ".join(f"{m.name} ({m.where})" for m in matches)


__all__ = [
    "API_VERSION",
    "KIND",
    "ClusterRef",
    "DescriptorProblem",
    "LoadedDescriptor",
    "OwnerRoute",
    "Registry",
    "Resolution",
    "ResolutionFailure",
    "Resolved",
    "WorkspaceConnection",
    "WorkspaceConnectionSpec",
    "load_descriptors",
]
