"""detect-secrets' denylist patterns for its pinned version, generated from it: what
`workers/outside/secrets.py` compiles when that version is installed, so a cold CLI does not
import detect-secrets (and `requests`) at all. Do not edit by hand; regenerate after a bump with

    .venv/bin/python -m workers.outside.secrets

tests/outside/test_detect_secrets_table.py fails when this table and the installed detect-secrets
disagree."""

from __future__ import annotations

VERSION = '1.5.0'
# (detector, index in its denylist, pattern, ignore case, has a capture group)
TABLE: tuple[tuple[str, int, str, bool, bool], ...] = (
    ('ArtifactoryDetector', 0, '(?:\\s|=|:|"|^)AKC[a-zA-Z0-9]{10,}(?:\\s|"|$)', False, False),
    ('ArtifactoryDetector', 1, '(?:\\s|=|:|"|^)AP[\\dABCDEF][a-zA-Z0-9]{8,}(?:\\s|"|$)', False, False),
    ('AWSKeyDetector', 0, '(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}', False, False),
    ('AWSKeyDetector', 1, 'aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?[\\\'\\"]([0-9a-zA-Z/+]{40})[\\\'\\"]', True, True),
    ('AzureStorageKeyDetector', 0, 'AccountKey=[a-zA-Z0-9+\\/=]{88}', False, False),
    ('BasicAuthDetector', 0, "://[^:/\\?\\#\\[\\]@!\\$\\&'\\(\\)\\*\\+,;=\\s]+:([^:/\\?\\#\\[\\]@!\\$\\&'\\(\\)\\*\\+,;=\\s]+)@", False, True),
    ('DiscordBotTokenDetector', 0, '[MNO][a-zA-Z\\d_-]{23,25}\\.[a-zA-Z\\d_-]{6}\\.[a-zA-Z\\d_-]{27}', False, False),
    ('GitHubTokenDetector', 0, '(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{36}', False, True),
    ('JwtTokenDetector', 0, 'eyJ[A-Za-z0-9-_=]+\\.[A-Za-z0-9-_=]+\\.?[A-Za-z0-9-_.+/=]*?', False, False),
    ('MailchimpDetector', 0, '[0-9a-z]{32}-us[0-9]{1,2}', False, False),
    ('NpmDetector', 0, '\\/\\/.+\\/:_authToken=\\s*((npm_.+)|([A-Fa-f0-9-]{36})).*', False, True),
    ('OpenAIDetector', 0, 'sk-[A-Za-z0-9-_]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}', False, False),
    ('PypiTokenDetector', 0, 'pypi-AgEIcHlwaS5vcmc[A-Za-z0-9-_]{70,}', False, False),
    ('PypiTokenDetector', 1, 'pypi-AgENdGVzdC5weXBpLm9yZw[A-Za-z0-9-_]{70,}', False, False),
    ('SendGridDetector', 0, 'SG\\.[a-zA-Z0-9_-]{22}\\.[a-zA-Z0-9_-]{43}', False, False),
    ('SlackDetector', 0, 'xox(?:a|b|p|o|s|r)-(?:\\d+-)+[a-z0-9]+', True, False),
    ('SlackDetector', 1, 'https://hooks\\.slack\\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+', True, False),
    ('SquareOAuthDetector', 0, 'sq0csp-[0-9A-Za-z\\\\\\-_]{43}', False, False),
    ('StripeDetector', 0, '(?:r|s)k_live_[0-9a-zA-Z]{24}', False, False),
    ('TelegramBotTokenDetector', 0, '\\d{8,10}:[0-9A-Za-z_-]{35}', False, False),
    ('TwilioKeyDetector', 0, 'AC[a-z0-9]{32}', False, False),
    ('TwilioKeyDetector', 1, 'SK[a-z0-9]{32}', False, False),
)
