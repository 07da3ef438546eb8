"""The detect-secrets patterns taubot compiles are detect-secrets' own (issue 36).

`workers/outside/detect_secrets_table.py` keeps them for the pinned version so that a cold CLI
does not import detect-secrets (and `requests`, ~0.1 s); redaction must stay exactly as strict: the
table is what the installed detect-secrets gives, and the rules compiled from it are the rules
compiled from detect-secrets itself.
"""

from __future__ import annotations

import subprocess
import sys

from workers.outside import detect_secrets_table, secrets


def test_the_table_is_the_installed_detect_secrets() -> None:
    assert detect_secrets_table.VERSION == secrets.installed_version()
    assert detect_secrets_table.TABLE == secrets.detector_table()
    assert len(detect_secrets_table.TABLE) >= 20


def test_the_compiled_rules_are_detect_secrets_own() -> None:
    compiled = [(r.name, r.pattern.pattern, r.group) for r in secrets.RULES if r.name.startswith("detect-secrets:")]
    expected = [(f"detect-secrets:{name}:{index}", ("(?i)" if ignore_case else "") + source, 1 if grouped else 0)
                for name, index, source, ignore_case, grouped in secrets.detector_table()]
    assert compiled == expected


def test_redacting_imports_neither_detect_secrets_nor_requests() -> None:
    code = ("import sys; from workers.outside.secrets import redact; "
            "assert redact('aws_key=\"AKIAIOSFODNN7EXAMPLE\" token xoxb-1-2') != '', 'redacted'; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('detect_secrets', 'requests')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
