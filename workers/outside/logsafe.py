"""Log lines that never carry a secret or a capability, and never a whole request body.

A slash command's or a press's `response_url` is a capability: for 30 minutes
anyone holding it may post in the channel. Bolt logs the full body of a
request that fails the signature check (it carries that URL and Slack's
verification token), and slack_sdk's webhook client logs the URL of a
retried request, whatever its host. Tokens (`xoxb-…`, `xapp-…`) are secrets.
`Redactor` is a logging filter on the process's handlers: every record is
rendered once and passed through `workers.outside.text` (the same rules as log
text posted to Slack), so no library can log them whatever it does.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from workers.outside.text import MAX_LINE, clean, redact_url_text

MAX_TRACEBACK = 8000
# Loggers whose every URL is a capability: slack_sdk's webhook client only ever talks to a
# response_url or an incoming webhook.
_URL_ONLY_LOGGERS = ("slack_sdk.webhook",)


def redact(text: str) -> str:
    """One log line: controls stripped (newlines kept), secrets redacted, clipped."""
    return clean(text, MAX_LINE, keep_newlines=True)


class Redactor(logging.Filter):
    """Render, redact and cut every record's message (exceptions keep their traceback text,
    redacted too)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string must not lose the line
            message = str(record.msg)
        if record.name.startswith(_URL_ONLY_LOGGERS):
            message = redact_url_text(message)
        record.msg, record.args = redact(message), None
        if record.exc_info:  # rendered here, so the traceback is redacted too; formatters (text and
            # python-json-logger alike) print exc_text when exc_info is gone
            record.exc_text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = clean(record.exc_text, MAX_TRACEBACK, keep_newlines=True)
        if record.stack_info:
            record.stack_info = clean(record.stack_info, MAX_TRACEBACK, keep_newlines=True)
        return True


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(v) for v in value]
    return value


class AuditRedactor(logging.Filter):
    """The audit record's fields pass the same redaction as messages (a command's text may
    carry a pasted token; a press's value is the user's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = getattr(record, "audit", None)
        if isinstance(fields, dict):
            record.audit = _redact_value(fields)
        return True


AUDIT = logging.getLogger("taubot.audit")
AUDIT.setLevel(logging.INFO)  # audit lines are kept whatever the process's level
JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(message)s"


def audit(event: str, **fields: Any) -> None:
    """One audit line: who (Slack user, Kubernetes identity), what, which run, outcome.

    In JSON mode the fields are the record's `audit` object; in text mode they follow the
    message as key=value, so `grep taubot.audit` works either way."""
    shown = " ".join(f"{k}={v}" for k, v in fields.items() if v not in (None, "", [], ()))
    AUDIT.info("%s %s", event, shown, extra={"audit": {"event": event, **fields}})


def install(level: int = logging.INFO, *, json_lines: bool | None = None) -> None:
    """Configure the root logger once: JSON lines (python-json-logger) when ``json_lines`` or
    ``TAUBOT_LOG_FORMAT=json`` (the image's default), else text; the redactor on the handler."""
    if json_lines is None:
        json_lines = os.environ.get("TAUBOT_LOG_FORMAT", "text").lower() == "json"
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        configure(handler, json_lines=json_lines)


def configure(handler: logging.Handler, *, json_lines: bool) -> logging.Handler:
    """Put the redactors (and, for JSON lines, python-json-logger's formatter) on ``handler``."""
    if json_lines:
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(JsonFormatter(JSON_FIELDS, rename_fields={"levelname": "level",
                                                                       "asctime": "time"}))
    for kind in (Redactor, AuditRedactor):
        if not any(isinstance(f, kind) for f in handler.filters):
            handler.addFilter(kind())
    return handler


__all__ = ["AUDIT", "AuditRedactor", "Redactor", "audit", "configure", "install", "redact"]
