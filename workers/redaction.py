"""One set of redaction rules for taubot's own log lines and for cluster log text posted to Slack.

Why one module (SPEC §11, issue 26.3): `/tau logs` quotes a run's log to a
channel whose members may lack `pods/log`, and training logs print
credentials (a connection string in a stack trace, an env dump, a token in a
URL). The rules that keep tokens out of taubot's own logs keep them out of
the channel too, so a rule added for one is added for both.

Three steps, in this order, because each makes the next one sound:

1. `strip_controls` — ANSI escape sequences, bidi overrides and isolates
   (U+202A–202E, U+2066–2069, and the marks U+200E/200F/061C) and other C0/C1
   characters go (tab kept; newlines kept only where the caller allows them),
   so a colour code cannot split a token past the rules and a bidi override
   cannot make the channel read a line backwards.
2. `redact` — each rule of `RULES` replaces a secret by `[redacted]`, keeping
   what names it (`password=`, `Bearer `, the URL's user) so the reader still
   sees what was there. PEM private keys are removed whole (`redact_lines`
   also carries a key block across the lines of a log).
3. `clip` — a line longer than its budget is cut with a marker saying how
   much was left out.

Cheap on purpose: the ack path redacts every audit line. A line holds a
secret only if it holds one of a few literal words (`_TRIGGER`, one regex
search); every other line is returned untouched after that one search, and
a line that does trigger runs only the rules whose own words it contains.
Hand-written patterns (no library keeps this list for logs); the corpus in
`tests/test_redaction.py` names the shape each rule is for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

REDACTED = "[redacted]"
MAX_LINE = 600  # taubot's own log lines
SLACK_LOG_LINE = 500  # one cluster log line in a card or the attached tail

# ---------------------------------------------------------------- controls

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves
                   r"|\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
                   r"|[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
                   r"|[@-Z\\-_])"  # two-character escapes
                   r"|\x9b[0-?]*[ -/]*[@-~]")  # the C1 form of CSI
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_CONTROLS = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_CONTROLS_AND_NEWLINES = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{_BIDI}]")


def strip_controls(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` without escape sequences, bidi controls and C0/C1 characters (tab kept)."""
    if text.isprintable():  # one C pass; every character this removes is non-printable
        return text
    text = _ANSI.sub("", text)
    return (_CONTROLS if keep_newlines else _CONTROLS_AND_NEWLINES).sub("", text)


# ---------------------------------------------------------------- secrets


@dataclass(frozen=True)
class Rule:
    """One secret shape: the literal words (lower case) a line must hold for the pattern to be
    tried, the pattern, and its replacement (a string with group references, or a function)."""

    name: str
    words: tuple[str, ...]
    pattern: re.Pattern[str]
    replacement: str | Callable[[re.Match[str]], str]


_KEY_NAMES = (r"pass(?:word|wd|phrase)?|pwd|secret(?:[_-]?key)?|client[_-]?secret|api[_-]?key|apikey"
              r"|access[_-]?key(?:[_-]?id)?|secret[_-]?access[_-]?key|session[_-]?token|auth[_-]?token"
              r"|access[_-]?token|refresh[_-]?token|id[_-]?token|private[_-]?key(?:[_-]?id)?|token"
              r"|credentials?|signing[_-]?secret|verification[_-]?token|auth")
_PEM = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|$)"


RULES: tuple[Rule, ...] = (
    # Whole private keys first: a key inside JSON (`"private_key": "-----BEGIN…\n…"`) goes whole.
    Rule("pem-private-key", ("private key",), re.compile(_PEM, re.DOTALL), f"[private key {REDACTED}]"),
    # Slack: bot/user/app/config tokens, rotating (xoxe.xoxp-…) and refresh (xoxe-…) tokens.
    Rule("slack-token", ("xox", "xapp"),
         re.compile(r"\b(?:xox[a-z](?:\.xox[a-z])?|xapp)-[A-Za-z0-9-]+", re.IGNORECASE), f"xox?-{REDACTED}"),
    # Webhooks and response_urls: capabilities to post in a channel. By key name (any host: an
    # Enterprise or GovSlack host, a proxy), by Slack's hooks hosts, and by the response_url
    # path shape (/commands/T…/…/…, /actions/T…/…/…) whatever the host.
    Rule("response-url-key", ("response_url",),
         re.compile(r"(response_url[\"']?\s*(?:[:=]|%3A|%3D)\s*[\"']?)[^\s'\"&,)]+", re.IGNORECASE),
         rf"\1{REDACTED}"),
    Rule("slack-hooks-url", ("hooks",),
         re.compile(r"https?(?::|%3A)(?://|%2F%2F)hooks\.slack(?:-gov)?\.com[^\s'\"&,)]*", re.IGNORECASE),
         f"https://hooks.slack.com/{REDACTED}"),
    Rule("response-url-path", ("/commands/", "/actions/", "%2fcommands%2f", "%2factions%2f"),
         re.compile(r"https?(?::|%3A)(?://|%2F%2F)[^\s'\"/]+(?:/|%2F)(?:commands|actions)(?:/|%2F)T[A-Z0-9]+"
                    r"[^\s'\"&,)]*", re.IGNORECASE), f"https://[response_url {REDACTED}]"),
    # A shared file's url_private(_download): fetchable with the bot token.
    Rule("slack-file-url", ("files-pri",),
         re.compile(r"https?://[^\s'\"]*/files-pri/[^\s'\"&,)]*", re.IGNORECASE),
         f"https://[file url {REDACTED}]"),
    # HTTP credentials: `Bearer …` anywhere, and any scheme after an Authorization header.
    Rule("bearer", ("bearer",), re.compile(r"(bearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE),
         rf"\1{REDACTED}"),
    Rule("authorization-header", ("authorization",),
         re.compile(r"(authorization[\"']?\s*[:=]\s*[\"']?(?:(?:basic|bearer|digest|token|negotiate|apikey)\s+)?)"
                    r"[^\s\"',}]+", re.IGNORECASE), rf"\1{REDACTED}"),
    # JWTs (Kubernetes service-account tokens, OIDC id tokens): header.payload.signature.
    Rule("jwt", ("eyj",), re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
         f"[jwt {REDACTED}]"),
    # Cloud keys with a recognisable prefix.
    Rule("aws-access-key-id", ("akia", "asia", "abia", "acca"),
         re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"), f"AKIA{REDACTED}"),
    Rule("gcp-api-key", ("aiza",), re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), f"AIza{REDACTED}"),
    Rule("google-oauth-token", ("ya29.",), re.compile(r"\bya29\.[0-9A-Za-z_-]+"), f"ya29.{REDACTED}"),
    Rule("github-token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
         re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), f"gh_{REDACTED}"),
    Rule("gitlab-token", ("glpat-",), re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), f"glpat-{REDACTED}"),
    Rule("huggingface-token", ("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{30,}"), f"hf_{REDACTED}"),
    Rule("openai-style-key", ("sk-", "sk_live_", "sk_test_"),
         re.compile(r"\bsk(?:-proj|-ant)?[-_](?:live_|test_)?[A-Za-z0-9_-]{20,}"), f"sk-{REDACTED}"),
    Rule("npm-token", ("npm_",), re.compile(r"\bnpm_[A-Za-z0-9]{30,}"), f"npm_{REDACTED}"),
    # Azure: storage account keys and Service Bus/Event Hubs keys inside connection strings,
    # and the signature of a SAS token (sig=…) in a URL or a connection string.
    Rule("azure-connection-key", ("accountkey", "sharedaccesskey", "sharedaccesssignature"),
         re.compile(r"((?:AccountKey|SharedAccessKey|SharedAccessSignature)\s*=\s*)[^;\s'\"]+",
                    re.IGNORECASE),
         rf"\1{REDACTED}"),
    Rule("azure-sas-signature", ("sig=", "sig%3d"),
         re.compile(r"([?&;]sig(?:=|%3D))[^&;\s'\"]+", re.IGNORECASE), rf"\1{REDACTED}"),
    # A password inside a URL: postgres://u:p@h, mongodb+srv://u:p@h, https://u:p@h (basic auth).
    Rule("url-userinfo", ("://", "%3a%2f%2f"),
         re.compile(r"((?:[a-z][a-z0-9+.-]*)(?:://|%3A%2F%2F)[^\s:/@'\"]*(?::|%3A))[^\s@/'\"]+@",
                    re.IGNORECASE),
         rf"\1{REDACTED}@"),
    # password=…, passwd: …, "secret": "…", AWS_SECRET_ACCESS_KEY=…, token=… (Slack's verification
    # token in a form body), client_secret=…: by the key's name, quoted or not.
    Rule("named-secret", ("pass", "pwd", "secret", "key", "token", "credential", "auth"),
         re.compile(rf"((?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]{{0,64}}?(?:{_KEY_NAMES})[\"']?\s*(?:[:=]|%3D)\s*)"
                    r"(\"[^\"]*\"|'[^']*'|[^\s&,;)\"'}\]]+)", re.IGNORECASE), rf"\1{REDACTED}"),
    # The same names as command-line flags: --password hunter2, --token=…
    Rule("secret-flag", ("pass", "pwd", "secret", "key", "token", "credential", "auth"),
         re.compile(rf"(--(?:{_KEY_NAMES})(?:[= ]))(\S+)", re.IGNORECASE), rf"\1{REDACTED}"),
)

# A line holds a secret only if it holds one of the rules' words. The gate searches the
# lower-cased line (a case-sensitive search is ~10x faster than IGNORECASE here) for the
# shortest of them: a word containing another (`accountkey` holds `key`) adds nothing.
_WORDS = {word for rule in RULES for word in rule.words}
_GATE = sorted(w for w in _WORDS if not any(other != w and other in w for other in _WORDS))
_TRIGGER = re.compile("|".join(re.escape(word) for word in _GATE))


def redact(text: str) -> str:
    """``text`` with every secret `RULES` knows replaced (what names it kept)."""
    lower = text.lower()
    if _TRIGGER.search(lower) is None:
        return text
    for rule in RULES:
        if any(word in lower for word in rule.words):
            text = rule.pattern.sub(rule.replacement, text)
    return text


_ANY_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.IGNORECASE)


def redact_url_text(text: str) -> str:
    """For a logger that only logs capability URLs (slack_sdk's webhook client logs the
    response_url it posts to, whatever its host): every URL goes."""
    return _ANY_URL.sub(f"[url {REDACTED}]", redact(text))


def clip(text: str, limit: int, *, total: int | None = None) -> str:
    """``text`` cut to ``limit`` characters, the last of them a marker saying how much was cut
    (counted from ``limit`` of ``total``, the original length when ``text`` was cut before)."""
    total = len(text) if total is None else total
    if total <= limit:
        return text
    marker = f" …[{total - limit:,} more characters clipped]"
    return text[: max(limit - len(marker), 0)] + marker


_MARGIN = 1024  # searched beyond a line's budget, since a redaction can shorten what precedes
_BOUNDARY = 256  # longer than any one secret a rule matches (a PEM key goes whole to its END)


def clean(text: str, limit: int = MAX_LINE, *, keep_newlines: bool = False) -> str:
    """Controls stripped, secrets redacted, clipped: the one pass for any text leaving taubot."""
    cut = limit + _MARGIN
    if len(text) <= cut:
        return clip(redact(strip_controls(text, keep_newlines=keep_newlines)), limit)
    # The rest would be clipped away: not searched. A secret the cut splits is no longer whole
    # for its rule, so the last `_BOUNDARY` characters before the cut are dropped after the
    # redaction (an earlier redaction may have shortened the text enough to show them).
    redacted = redact(strip_controls(text[:cut], keep_newlines=keep_newlines))
    return clip(redacted[: len(redacted) - _BOUNDARY], limit, total=len(text))


_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----")


def redact_lines(lines: Iterable[str], limit: int = SLACK_LOG_LINE) -> list[str]:
    """Log lines to post: each one `clean`ed, and the body of a PEM private key that spans
    several lines (each line alone holds no word a rule knows) removed up to its END line."""
    out: list[str] = []
    in_key = False
    for raw in lines:
        line = strip_controls(raw)
        if in_key:
            end = _PEM_END.search(line)
            if end is None:
                out.append(f"[private key {REDACTED}]")
                continue
            in_key = False
            line = f"[private key {REDACTED}]" + line[end.end():]
        begin = _PEM_BEGIN.search(line)
        if begin is not None and _PEM_END.search(line, begin.end()) is None:
            in_key = True
            line = line[: begin.start()] + f"[private key {REDACTED}]"
        out.append(clean(line, limit))
    return out


__all__ = ["MAX_LINE", "REDACTED", "RULES", "SLACK_LOG_LINE", "Rule", "clean", "clip", "redact",
           "redact_lines", "redact_url_text", "strip_controls"]
