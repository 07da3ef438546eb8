"""Settings from the environment and from `_FILE` indirection (SPEC §9)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workers.config.settings import Settings, SettingsError, SettingsFileError, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from no TAUBOT_* variables, whatever the CI host exports."""
    for name in list(os.environ):
        if name.upper().startswith("TAUBOT_"):
            monkeypatch.delenv(name)


def test_defaults() -> None:
    settings = load_settings()
    assert settings.slack_bot_token is None
    assert settings.slack_signing_secret is None
    assert settings.slack_app_token is None
    assert settings.slack_api_url == "https://slack.com/api/"
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert settings.workspaces_dir is None
    assert settings.identity_file is None
    assert settings.queue_name == "taubot"
    assert settings.job_timeout_seconds == 120
    assert settings.job_retries == 7
    assert settings.watch_interval_seconds == 15
    assert settings.watch_max_minutes == 30
    assert settings.kube_request_timeout_seconds == 10.0
    assert settings.audit_log is None
    assert settings.default_owners == {}
    assert settings.escalation_ttl_seconds == 7 * 24 * 3600
    assert settings.diagnosis_ttl_seconds > 0
    assert settings.button_signing_key is None


def test_environment_overrides_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TAUBOT_REDIS_URL", "redis://redis.taubot:6379/2")
    monkeypatch.setenv("TAUBOT_WORKSPACES_DIR", str(tmp_path))
    monkeypatch.setenv("TAUBOT_WATCH_INTERVAL_SECONDS", "30")
    monkeypatch.setenv("TAUBOT_SLACK_API_URL", "http://127.0.0.1:8888/api")
    monkeypatch.setenv(
        "TAUBOT_DEFAULT_OWNERS", '{"platform": {"channel": "C0PLATFORM", "usergroup": "S0PLAT"}}'
    )
    settings = load_settings()
    assert settings.redis_url == "redis://redis.taubot:6379/2"
    assert settings.workspaces_dir == tmp_path
    assert settings.watch_interval_seconds == 30
    assert settings.slack_api_url == "http://127.0.0.1:8888/api/", "slack_sdk needs the slash"
    assert settings.default_owners["platform"].usergroup == "S0PLAT"


def test_overrides_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAUBOT_QUEUE_NAME", "from-env")
    assert load_settings(queue_name="from-flag").queue_name == "from-flag"


def test_secret_from_file_is_stripped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("  xoxb-from-file\n", encoding="utf-8")
    monkeypatch.setenv("TAUBOT_SLACK_BOT_TOKEN_FILE", str(token))
    settings = load_settings()
    assert settings.slack_bot_token is not None
    assert settings.slack_bot_token.get_secret_value() == "xoxb-from-file"


def test_complex_value_from_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    owners = tmp_path / "owners.json"
    owners.write_text('{"queue-owner": {"channel": "C0QUEUES"}}', encoding="utf-8")
    monkeypatch.setenv("TAUBOT_DEFAULT_OWNERS_FILE", str(owners))
    assert load_settings().default_owners["queue-owner"].channel == "C0QUEUES"


def test_field_ending_in_file_is_a_plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """TAUBOT_IDENTITY_FILE is the identity file's path, not an indirection for 'identity'."""
    monkeypatch.setenv("TAUBOT_IDENTITY_FILE", "/etc/taubot/identity/identity.yaml")
    assert load_settings().identity_file == Path("/etc/taubot/identity/identity.yaml")


def test_missing_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    monkeypatch.setenv("TAUBOT_SLACK_SIGNING_SECRET_FILE", str(missing))
    with pytest.raises(SettingsFileError) as caught:
        load_settings()
    message = str(caught.value)
    assert "TAUBOT_SLACK_SIGNING_SECRET_FILE" in message
    assert str(missing) in message
    assert "does not exist" in message


def test_variable_and_its_file_together_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-file", encoding="utf-8")
    monkeypatch.setenv("TAUBOT_SLACK_SIGNING_SECRET", "from-env")
    monkeypatch.setenv("TAUBOT_SLACK_SIGNING_SECRET_FILE", str(secret))
    with pytest.raises(SettingsFileError, match="set only one"):
        load_settings()


def test_repr_hides_secrets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TAUBOT_SLACK_BOT_TOKEN", "xoxb-very-secret")
    app_token = tmp_path / "app"
    app_token.write_text("xapp-very-secret", encoding="utf-8")
    monkeypatch.setenv("TAUBOT_SLACK_APP_TOKEN_FILE", str(app_token))
    settings = load_settings(slack_signing_secret="signing-very-secret")
    shown = repr(settings) + str(settings) + settings.model_dump_json()
    for secret in ("xoxb-very-secret", "xapp-very-secret", "signing-very-secret"):
        assert secret not in shown


def test_button_key_falls_back_to_signing_secret() -> None:
    settings = load_settings(slack_signing_secret="sign")
    assert settings.button_signing_key is not None
    assert settings.button_signing_key.get_secret_value() == "sign"
    own = load_settings(slack_signing_secret="sign", button_signing_key="buttons")
    assert own.button_signing_key is not None
    assert own.button_signing_key.get_secret_value() == "buttons"


@pytest.mark.parametrize(("value", "ok"), [("4", False), ("5", True), ("60", True)])
def test_watch_interval_has_a_floor(monkeypatch: pytest.MonkeyPatch, value: str, ok: bool) -> None:
    monkeypatch.setenv("TAUBOT_WATCH_INTERVAL_SECONDS", value)
    if ok:
        assert load_settings().watch_interval_seconds == int(value)
    else:
        with pytest.raises(SettingsError, match="TAUBOT_WATCH_INTERVAL_SECONDS"):
            load_settings()


def test_bad_owner_id_in_default_owners_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAUBOT_DEFAULT_OWNERS", '{"plaform": {"channel": "C0PLATFORM"}}')
    with pytest.raises(SettingsError, match="TAUBOT_DEFAULT_OWNERS"):
        load_settings()


def test_settings_class_is_usable_directly() -> None:
    """`Settings()` is what pydantic-settings users expect; load_settings only adds messages."""
    assert Settings().queue_name == "taubot"
