"""Log lines that never carry a secret or a capability, and never a whole request body.

A slash command's or a press's `response_url` is a capability: for 30 minutes
anyone holding it may post in the channel. Bolt logs the full body of a
request that fails the signature check (it carries that URL), and slack_sdk
logs the URL of a retried request. Tokens (`xoxb-…`, `xapp-…`) are secrets.
`Redactor` is a logging filter on the process's handlers: every record is
rendered once, capability URLs and tokens are replaced, and the line is cut,
so no library can log them whatever it does.
"""

from __future__ import annotations

import logging
import re

MAX_LINE = 600
_PATTERNS = (
    (re.compile(r"https?(?::|%3A)(?://|%2F%2F)hooks\.slack\.com[^\s'\"&,)]*", re.IGNORECASE),
     "https://hooks.slack.com/[redacted]"),
    (re.compile(r"(response_url[\"']?\s*[:=]\s*[\"']?)[^\s'\"&,)]+", re.IGNORECASE), r"\1[redacted]"),
    (re.compile(r"xox[abposr]-[A-Za-z0-9-]+|xapp-[A-Za-z0-9-]+"), "xox?-[redacted]"),
    (re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE), r"\1[redacted]"),
)


def redact(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 1] + "…"


class Redactor(logging.Filter):
    """Render, redact and cut every record's message (exceptions keep their traceback text,
    redacted too)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string must not lose the line
            message = str(record.msg)
        record.msg, record.args = redact(message), None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def install(level: int = logging.INFO) -> None:
    """Configure the root logger once, with the redactor on its handler."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, Redactor) for f in handler.filters):
            handler.addFilter(Redactor())


__all__ = ["Redactor", "install", "redact"]
