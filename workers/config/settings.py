"""taubot's settings, read from the environment (SPEC §9).

Every variable `TAUBOT_X` may instead be given as `TAUBOT_X_FILE`, naming a
file whose (stripped) content is the value. That is how Kubernetes and Docker
hand out secrets without putting them in the process environment, where they
leak into `ps e`, crash dumps and child processes. The indirection is a
pydantic-settings source of its own (`FileIndirectionSource`), so precedence,
type coercion and JSON decoding of complex values are the library's, not ours.

Secrets are `SecretStr`: they never appear in `repr()`, logs or tracebacks;
callers unwrap them with `.get_secret_value()` at the one place they are used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from workers.config.workspaces import OwnerRoute
from workers.diagnosis.models import Owner

ENV_PREFIX = "TAUBOT_"
FILE_SUFFIX = "_FILE"
SEVEN_DAYS = 7 * 24 * 3600


class SettingsFileError(SettingsError):
    """A `TAUBOT_*_FILE` variable names a file that cannot be used.

    Raised before any other validation: a deployment whose secret mount is
    missing must fail at start-up with the variable and path in the message,
    not later with a confusing "token is None" from the Slack client.
    """


class FileIndirectionSource(EnvSettingsSource):
    """Reads `<VARIABLE>_FILE` for every settings variable and returns the files' content.

    Only the `_FILE` forms of declared fields are looked at, so a field whose
    own name ends in `_file` (`TAUBOT_IDENTITY_FILE`) is an ordinary path, and
    its indirect form is `TAUBOT_IDENTITY_FILE_FILE`. Setting both a variable
    and its `_FILE` form is refused: silently preferring one would hide a
    stale secret.
    """

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        self._file_values: dict[str, str] = self._read_indirect_files()

    def _read_indirect_files(self) -> dict[str, str]:
        """Resolve every `_FILE` variable up front so all bad ones are reported together."""
        values: dict[str, str] = {}
        problems: list[str] = []
        suffix = FILE_SUFFIX if self.case_sensitive else FILE_SUFFIX.lower()
        for field_name, field in self.settings_cls.model_fields.items():
            for _key, env_name, _complex in self._extract_field_info(field, field_name):
                file_var = env_name + suffix
                file_path = self.env_vars.get(file_var)
                if file_path is None:
                    continue
                shown_var = file_var.upper()
                if self.env_vars.get(env_name) is not None:
                    problems.append(
                        f"both {env_name.upper()} and {shown_var} are set; set only one"
                    )
                    continue
                path = Path(file_path)
                try:
                    values[env_name] = path.read_text(encoding="utf-8").strip()
                except FileNotFoundError:
                    problems.append(f"{shown_var} names {path}, which does not exist")
                except IsADirectoryError:
                    problems.append(f"{shown_var} names {path}, which is a directory, not a file")
                except (OSError, UnicodeDecodeError) as exc:
                    problems.append(f"{shown_var} names {path}, which cannot be read: {exc}")
        if problems:
            raise SettingsFileError("; ".join(problems))
        return values

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        """Like the environment source, but the value comes from the named file."""
        value: str | None = None
        field_key = field_name
        value_is_complex = False
        for field_key, env_name, value_is_complex in self._extract_field_info(  # noqa: B007
            field, field_name
        ):
            value = self._file_values.get(env_name)
            if value is not None:
                break
        return value, field_key, value_is_complex

    def __repr__(self) -> str:
        return f"FileIndirectionSource(variables={sorted(self._file_values)!r})"


class Settings(BaseSettings):
    """Everything taubot reads from its environment; one instance per process.

    Defaults are what a developer running `taubot serve socket` next to a
    local Redis needs; production values come from the Helm chart.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        case_sensitive=False,
        extra="ignore",
        frozen=True,
    )

    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = Field(
        default=None, description="Socket Mode only (xapp-…); HTTP mode does not need it."
    )
    slack_api_url: str = Field(
        default="https://slack.com/api/",
        description="Web API base URL; tests and egress proxies point it elsewhere.",
    )
    redis_url: str = "redis://127.0.0.1:6379/0"
    workspaces_dir: Path | None = None
    identity_file: Path | None = None

    queue_name: str = Field(default="taubot", min_length=1)
    job_timeout_seconds: int = Field(default=120, gt=0)
    job_retries: int = Field(default=7, ge=0)  # one per workers.plumbing.jobqueue.RETRY_INTERVALS
    watch_interval_seconds: int = Field(
        default=15,
        ge=5,
        description="Floor of 5 s: each refresh is a burst of API calls per watched run.",
    )
    watch_max_minutes: int = Field(default=30, gt=0)
    watch_queue_every_ticks: int = Field(
        default=4,
        ge=1,
        description="A waiting run's watch re-reads its queue position when its Workload changed, "
        "and at least every this many ticks (the others reuse the last read: no queue requests).",
    )
    watch_full_every_ticks: int = Field(
        default=4,
        ge=1,
        description="A watch tick first reads only the run and its Workloads or pods (two requests) and "
        "keeps the card when their resourceVersions are unchanged; a full status at least every this "
        "many ticks catches what those do not show (nodes, events, log progress, the queue, time).",
    )
    watch_tick_threads: int = Field(
        default=8,
        ge=0,
        description="An in-process worker runs due watch ticks on this many threads of its own, beside "
        "its rq jobs (ticks mostly wait on the API server, Redis and Slack); 0 queues them as rq jobs.",
    )
    slack_updates_per_minute: int = Field(
        default=50,
        gt=0,
        description="chat.update budget per Slack workspace (tier 3), shared by all workers.",
    )
    slack_channel_burst: int = Field(default=3, ge=1, le=20,
                                     description="messages to one channel back to back before ~1/s applies")
    kube_request_timeout_seconds: float = Field(default=10.0, gt=0)
    audit_log: Path | None = Field(
        default=None, description="JSON-lines audit trail; None writes it to stdout."
    )
    default_owners: dict[Owner, OwnerRoute] = Field(
        default_factory=dict,
        description="Escalation routes used when a workspace descriptor names none for an owner.",
    )
    escalation_ttl_seconds: int = Field(
        default=SEVEN_DAYS,
        gt=0,
        description="How long 'escalated once per run and layer' is remembered.",
    )
    diagnosis_ttl_seconds: int = Field(
        default=SEVEN_DAYS,
        gt=0,
        description=(
            "How long a posted diagnosis is kept for its buttons; as long as the "
            "escalation memory, so a card's Escalate button works as long as it is deduplicated."
        ),
    )
    progress_stall_minutes: int = Field(
        default=20, gt=0, description="No progress line for longer than this is a stall (layer 7)."
    )
    exporter_namespaces: tuple[str, ...] = Field(
        default=("gpu-operator", "taugrid-system"),
        description="dcgm-exporter pods are trusted only here, and only when a DaemonSet owns them.")
    validation_namespace: str = Field(default="taugrid-validation", min_length=1,
                                      description="Where `cluster validate nodes` creates its pods.")
    validation_image: str = Field(default="nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
                                  min_length=1)
    validation_timeout_seconds: int = Field(
        default=120, ge=10, le=1800, description="How long a *Validate nodes* press waits for its pods.")
    validation_command: str = Field(
        default="nvidia-smi -L && nvidia-smi -q -d ECC,ROW_REMAPPER && dcgmi diag -r 1", min_length=1)
    # Stall monitor (SPEC §7b): how long a run may stay on one reason before it is auto-posted.
    stall_quota_minutes: int = Field(default=30, ge=0)
    stall_admission_check_minutes: int = Field(default=30, ge=0)
    stall_unschedulable_minutes: int = Field(default=10, ge=0)
    stall_dra_minutes: int = Field(default=5, ge=0)
    stall_image_pull_minutes: int = Field(default=5, ge=0)
    stall_crash_minutes: int = Field(default=5, ge=0)
    stall_not_ready_minutes: int = Field(default=15, ge=0)
    # Kueue's KEP-10852 tokens that wait rather than fail (issue 35): an admission gate
    # (`AdmissionGated`) is as long a wait as quota; `WaitingForPodsReady` holds the queue behind an
    # earlier Workload that has until waitForPodsReady.timeout (30 min by default in Kueue's v1beta2
    # config) to get ready before Kueue evicts it and the queue moves: only past that is it stuck.
    stall_gated_minutes: int = Field(default=30, ge=0)
    stall_pods_ready_wait_minutes: int = Field(default=45, ge=0)
    monitor_interval_seconds: float = Field(default=60, ge=1)
    monitor_log_reads_per_sweep: int = Field(default=20, ge=0)
    monitor_lease_seconds: float = Field(default=30, ge=2)
    monitor_cluster_wide: bool = Field(
        default=False, description="One cluster-wide WATCH per kind instead of one per namespace "
        "and kind; only when the monitor's RBAC may watch cluster-wide (chart: rbac.monitor.clusterWide).")
    monitor_watch_idle_seconds: float = Field(
        default=300, ge=1, description="A WATCH silent this long (no event, no bookmark) is restarted.")
    mute_hours: int = Field(default=24, gt=0)
    metrics_port: int = Field(default=9100, ge=0, le=65535,
                              description="/healthz, /readyz, /metrics of worker and monitor; 0: off")
    metrics_host: str = Field(
        default="127.0.0.1", min_length=1, pattern=r"^[A-Za-z0-9.:-]+$",
        description="Address the worker's and the monitor's /healthz, /readyz and /metrics listen on: "
                    "loopback unless set (the chart sets 0.0.0.0 for the kubelet's probes and in-cluster "
                    "scraping).")
    mlflow_token: SecretStr | None = Field(
        default=None, description="Bearer token for the MLflow tracking server (experiment records)."
    )
    mlflow_username: str | None = Field(
        default=None, min_length=1,
        description="HTTP Basic user for an MLflow tracking server behind MLflow's own auth app "
                    "(with mlflow_password; ignored when mlflow_token is set).")
    mlflow_password: SecretStr | None = Field(default=None, description="HTTP Basic password for MLflow.")
    button_signing_key: SecretStr | None = Field(
        default=None,
        description="Signs button payloads; falls back to the Slack signing secret.",
    )

    @field_validator("slack_api_url")
    @classmethod
    def _api_url_shape(cls, value: str) -> str:
        """slack_sdk joins method names onto the base URL, so it must end in '/'."""
        if not value.startswith(("https://", "http://")):
            raise ValueError("must be an http(s) URL")
        return value if value.endswith("/") else value + "/"

    @field_validator("redis_url")
    @classmethod
    def _redis_url_shape(cls, value: str) -> str:
        """Fail at start-up, not at the first enqueue, when the URL is not a Redis one."""
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return value

    @model_validator(mode="after")
    def _button_key_fallback(self) -> Settings:
        """One secret fewer to provision: buttons are signed with the signing secret by default."""
        if self.button_signing_key is None and self.slack_signing_secret is not None:
            object.__setattr__(self, "button_signing_key", self.slack_signing_secret)
        return self

    def button_key(self) -> bytes | None:
        """The HMAC key of button values (the signing secret by default); None: no buttons."""
        key = self.button_signing_key
        return key.get_secret_value().encode() if key is not None else None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Explicit arguments, then the environment, then `_FILE` indirection.

        A variable and its `_FILE` form are never both honoured (the source
        refuses that), so the order between them only matters for readability.
        """
        return (
            init_settings,
            env_settings,
            FileIndirectionSource(settings_cls),
            dotenv_settings,
            file_secret_settings,
        )


def load_settings(**overrides: Any) -> Settings:
    """Build `Settings`, with keyword overrides (CLI flags) winning over the environment.

    A validation failure is re-raised as a `SettingsError` naming the
    environment variable to fix, because the operator reading it configured
    `TAUBOT_WATCH_INTERVAL_SECONDS`, not a Python field.
    """
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            variable = (ENV_PREFIX + field).upper() if field else "settings"
            detail = ".".join(str(part) for part in error["loc"][1:])
            where = f"{variable} ({detail})" if detail else variable
            problems.append(f"{where}: {error['msg']}")
        raise SettingsError("invalid settings: " + "; ".join(problems)) from exc


__all__ = [
    "ENV_PREFIX",
    "FileIndirectionSource",
    "Settings",
    "SettingsError",
    "SettingsFileError",
    "load_settings",
]
