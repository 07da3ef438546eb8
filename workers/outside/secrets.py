"""Secret shapes, found in linear time: detect-secrets' detectors plus the shapes it lacks.

Why this shape (SPEC §11 "Text from the cluster in Slack", issue 34):

* **A well-kept scanner first.** The families detect-secrets (pinned in
  pyproject) knows — cloud keys, GitHub/Slack/Stripe/npm/PyPI/OpenAI tokens,
  JWTs, private keys, basic-auth URLs, SendGrid, Twilio, Mailchimp, Discord,
  Telegram, Square, Artifactory — are its own `RegexBasedDetector.denylist`
  patterns, read from it, not copied by hand (`detect_secrets_table.py` keeps
  them for the pinned version so a cold CLI need not import it; a test holds
  the two equal). Its patterns that use look-around (the
  IBM/Cloudant/Softlayer keyword forms, GitLab's) cannot run in RE2 and are
  covered by taubot's own keyword and prefix rules below.
* **Taubot's own shapes** for what it lacks: Hugging Face `hf_…`, W&B keys and
  `wandb login <key>`, Azure SAS and connection strings, kubeconfig `*-data`
  fields, `Cookie:`/`Authorization:` headers, `-p<password>`, netrc lines,
  GitLab/`rk_live_` tokens, a secret after a secret-like key (`=`, `:`, a tab
  or a flag's space), quoted or not.
* **Linear time by construction.** Every pattern is compiled by RE2
  (google-re2), whose automaton never backtracks: a 1 MB line costs one pass
  per rule whose literal words it holds. The old hand-written list backtracked
  cubically on `a%3A%2F%2F…` (27 s for 10,000 repeats).
* **Views.** A secret hidden from the text as printed is found in a view of
  it: percent-decoded (`%3A%2F%2F`, an URL-encoded SAS), and base64-decoded
  runs (an env line piped through `base64`). Lines joined pairwise (a token
  wrapped across two lines) are `workers/outside/text.py`'s business, since
  only it sees lines.

What is kept: the name of what was there (`password=`, `Bearer `, the URL's
user), so the reader still knows a secret was printed; the value becomes
`[redacted]`.
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote

import re2

from workers.outside import detect_secrets_table

REDACTED = "[redacted]"

_OPTIONS = re2.Options()
_OPTIONS.max_mem = 64 << 20  # big enough that the DFA never falls back to the slow NFA on 1 MB


@dataclass(frozen=True)
class Rule:
    """One secret shape: the literal words (lower case) a text must hold for the pattern to be
    tried, the pattern (RE2), and which group is the secret (0: the whole match)."""

    name: str
    words: tuple[str, ...]
    pattern: object  # an re2 compiled pattern
    group: int = 0


def _rule(name: str, words: tuple[str, ...], pattern: str, group: int = 0) -> Rule:
    return Rule(name, words, re2.compile(pattern, _OPTIONS), group)


# -------------------------------------------------------------- detect-secrets' own


# Literal words each detector's patterns need (a gate, so a line without them costs nothing).
_DETECTOR_WORDS: dict[str, tuple[str, ...]] = {
    "ArtifactoryDetector": ("akc", "ap"),
    "AWSKeyDetector": ("akia", "asia", "abia", "acca", "a3t", "aws"),
    "AzureStorageKeyDetector": ("accountkey",),
    "BasicAuthDetector": ("://",),
    "DiscordBotTokenDetector": (".",),
    "GitHubTokenDetector": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "JwtTokenDetector": ("eyj",),
    "MailchimpDetector": ("-us",),
    "NpmDetector": ("_authtoken",),
    "OpenAIDetector": ("t3blbkfj",),
    "PypiTokenDetector": ("pypi-",),
    "SendGridDetector": ("sg.",),
    "SlackDetector": ("xox", "hooks.slack"),
    "SquareOAuthDetector": ("sq0csp-",),
    "StripeDetector": ("k_live_",),
    "TelegramBotTokenDetector": (":",),
    "TwilioKeyDetector": ("ac", "sk"),
}
# Detectors whose pattern is a marker, not the secret: the private-key rule below removes the key.
_SKIP = {"PrivateKeyDetector"}


def detector_table() -> tuple[tuple[str, int, str, bool, bool], ...]:
    """Every detect-secrets denylist pattern, as (detector, index, pattern, ignore case, has a group),
    read from the installed detect-secrets. Importing it costs a cold CLI ~0.1 s (it pulls
    `requests`), so `detect_secrets_table.py` holds this table for the pinned version (tests/outside
    checks the two agree), and detect-secrets is imported only when another version is installed."""
    import inspect

    from detect_secrets.plugins import (
        artifactory,
        aws,
        azure_storage_key,
        basic_auth,
        discord,
        github_token,
        jwt,
        mailchimp,
        npm,
        openai,
        pypi_token,
        sendgrid,
        slack,
        square_oauth,
        stripe,
        telegram_token,
        twilio,
    )
    from detect_secrets.plugins.base import RegexBasedDetector

    table: list[tuple[str, int, str, bool, bool]] = []
    for module in (artifactory, aws, azure_storage_key, basic_auth, discord, github_token, jwt, mailchimp,
                   npm, openai, pypi_token, sendgrid, slack, square_oauth, stripe, telegram_token, twilio):
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (not issubclass(cls, RegexBasedDetector) or cls is RegexBasedDetector
                    or cls.__module__ != module.__name__ or name in _SKIP):
                continue
            for index, pattern in enumerate(cls().denylist):
                table.append((name, index, pattern.pattern, bool(pattern.flags & re.IGNORECASE),
                              bool(pattern.groups)))
    return tuple(table)


def installed_version() -> str | None:
    """detect-secrets' version as installed, read from its `__version__.py` without importing it."""
    spec = importlib.util.find_spec("detect_secrets")
    origin = spec.origin if spec is not None else None
    if not origin:
        return None
    try:
        with open(origin.rsplit("/", 1)[0] + "/__version__.py", encoding="utf-8") as handle:
            found = re.search(r"VERSION\s*=\s*['\"]([^'\"]+)['\"]", handle.read())
    except OSError:
        return None
    return found.group(1) if found else None


def _detectors() -> tuple[Rule, ...]:
    table = (detect_secrets_table.TABLE if installed_version() == detect_secrets_table.VERSION
             else detector_table())
    # A detector with a capture group reports that group as the secret.
    return tuple(Rule(f"detect-secrets:{name}:{index}", _DETECTOR_WORDS.get(name, ()),
                      re2.compile(("(?i)" if ignore_case else "") + source, _OPTIONS), 1 if grouped else 0)
                 for name, index, source, ignore_case, grouped in table)


# -------------------------------------------------------------- taubot's own

# Key names that make the value after them a secret (case-insensitive).
_KEY_NAMES = (r"pass(?:word|wd|phrase)?|pwd|secret(?:[_-]?key)?|client[_-]?secret|api[_-]?key|apikey"
              r"|access[_-]?key(?:[_-]?id)?|secret[_-]?access[_-]?key|session[_-]?token|auth[_-]?token"
              r"|access[_-]?token|refresh[_-]?token|id[_-]?token|private[_-]?key(?:[_-]?id)?|token"
              r"|credentials?|signing[_-]?secret|verification[_-]?token|auth|api[_-]?token|sig(?:nature)?"
              r"|connection[_-]?string|conn[_-]?str|dsn|cookie|key[_-]?data|client[_-]?key|account[_-]?key"
              r"|wandb[_-]?api[_-]?key|hf[_-]?token|hugging[_-]?face[_-]?hub[_-]?token")
_VALUE = r"(\"[^\"\n]*\"|'[^'\n]*'|[^\s&,;)\"'}\]]+)"
# After a colon (prose, YAML) an unquoted value starts as a token does, not with a bracket: "a hang
# signature: [rank0]:…" names no secret (a NCCL line quoted on a card was cut to "[redacted]]");
# after `=` or a tab every value is one (password=[x… stays redacted).
_COLON_VALUE = r"(\"[^\"\n]*\"|'[^'\n]*'|[^\s&,;)\"'}\]\[(<{][^\s&,;)\"'}\]]*)"
_OWN_WORDS = ("pass", "pwd", "secret", "key", "token", "credential", "auth", "sig", "conn", "dsn",
              "cookie", "-data")

_OWN: tuple[Rule, ...] = (
    # Slack: bot/user/app/config tokens, rotating (xoxe.xoxp-…) and refresh (xoxe-…) tokens.
    _rule("slack-token", ("xox", "xapp"), r"(?i)\b(?:xox[a-z](?:\.xox[a-z])?|xapp)-[A-Za-z0-9-]+"),
    # Webhooks and response_urls: capabilities to post in a channel, whatever the host.
    _rule("response-url-key", ("response_url",),
          r"(?i)response_url[\"']?\s*(?:[:=]|%3A|%3D)\s*[\"']?([^\s'\"&,)]+)", 1),
    _rule("slack-hooks-url", ("hooks",),
          r"(?i)https?(?::|%3A)(?://|%2F%2F)hooks\.slack(?:-gov)?\.com([^\s'\"&,)]*)", 1),
    _rule("response-url-path", ("/commands/", "/actions/", "%2fcommands%2f", "%2factions%2f"),
          r"(?i)https?(?::|%3A)(?://|%2F%2F)[^\s'\"/]+((?:/|%2F)(?:commands|actions)(?:/|%2F)T[A-Z0-9]+"
          r"[^\s'\"&,)]*)", 1),
    _rule("slack-file-url", ("files-pri",), r"(?i)https?://[^\s'\"]*/files-pri/([^\s'\"&,)]*)", 1),
    # HTTP credentials.
    _rule("bearer", ("bearer",), r"(?i)bearer\s+([A-Za-z0-9._~+/=-]+)", 1),
    _rule("authorization-header", ("authorization",),
          r"(?i)authorization[\"']?\s*[:=]\s*[\"']?(?:(?:basic|bearer|digest|token|negotiate|apikey)\s+)?"
          r"([^\s\"',}]+)", 1),
    _rule("cookie-header", ("cookie",), r"(?i)(?:set-)?cookie[\"']?\s*:\s*[\"']?([^\n\"']+)", 1),
    # Prefixed tokens detect-secrets lacks (or knows only with look-around).
    _rule("jwt", ("eyj",), r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"),
    _rule("artifactory", ("akc",), r"AKC[a-zA-Z0-9]{10,}"),
    _rule("gcp-api-key", ("aiza",), r"\bAIza[0-9A-Za-z_-]{35}"),
    _rule("google-oauth-token", ("ya29.",), r"\bya29\.[0-9A-Za-z_-]+"),
    _rule("github-token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
          r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    _rule("gitlab-token", ("glpat-", "gldt-", "glft-", "glrt-", "glsoat-", "glcbt-", "glimt-", "glptt-",
                           "gloas-", "glagent-", "gr1348941"),
          r"\b(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|gloas|glagent)-[A-Za-z0-9_-]{20,}"
          r"|\bGR1348941[A-Za-z0-9_-]{20,}"),
    _rule("huggingface-token", ("hf_",), r"hf_[A-Za-z0-9]{30,}"),
    _rule("openai-style-key", ("sk-", "sk_live_", "sk_test_"),
          r"\bsk(?:-proj|-ant|-svcacct|-admin)?[-_](?:live_|test_)?[A-Za-z0-9_-]{20,}"),
    _rule("stripe-restricted", ("rk_live_", "rk_test_", "pk_live_"),
          r"\b[rp]k_(?:live|test)_[0-9A-Za-z]{16,}"),
    _rule("npm-token", ("npm_",), r"\bnpm_[A-Za-z0-9]{30,}"),
    _rule("pypi-token", ("pypi-",), r"\bpypi-[A-Za-z0-9_-]{50,}"),
    _rule("aws-access-key-id", ("akia", "asia", "abia", "acca"), r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    # W&B: `wandb login <key>` and a bare 40-hex key after it.
    _rule("wandb-login", ("wandb",), r"(?i)wandb\s+login\s+(?:--\S+\s+)*([A-Za-z0-9_-]{20,})", 1),
    # Azure: keys inside connection strings and a SAS query's signature.
    _rule("azure-connection-key", ("accountkey", "sharedaccesskey", "sharedaccesssignature"),
          r"(?i)(?:AccountKey|SharedAccessKey|SharedAccessSignature)\s*=\s*([^;\s'\"]+)", 1),
    _rule("azure-sas-signature", ("sig=", "sig%3d"), r"(?i)[?&;]sig(?:=|%3D)([^&;\s'\"]+)", 1),
    # A password inside a URL: postgres://u:p@h, https://u:p@h. The password runs to the last `@`
    # before the host (passwords may hold `/`, `+`, `@`), never past a space or a quote.
    _rule("url-userinfo", ("://", "%3a%2f%2f"),
          r"(?i)[a-z][a-z0-9+.-]*(?:://|%3A%2F%2F)[^\s:/@'\"]*(?::|%3A)([^\s'\"]*)(?:@|%40)[^\s@'\"%]", 1),
    # kubeconfig: client-key-data, client-certificate-data, token and the like.
    _rule("kubeconfig-data", ("-data",), r"(?i)(?:client-key|client-certificate|certificate-authority|token)"
          r"-data[\"']?\s*:\s*[\"']?([A-Za-z0-9+/=]{8,})", 1),
    # netrc: `machine host login user password secret`.
    _rule("netrc", ("password",), r"(?i)\bmachine\s+\S+\s+login\s+\S+\s+password\s+(\S+)", 1),
    # -pPASSWORD (mysql, sshpass), -p 'x' is too common to judge; the attached form is a password.
    _rule("dash-p-password", ("-p",), r"(?:^|\s)-p([^\s\-0-9][^\s]{3,})", 1),
    # A key whose name says secret: `password=…`, `"secret": "…"`, `TOKEN\t…` (env dumps), `key: …`.
    _rule("named-secret", _OWN_WORDS,
          rf"(?i)(?:^|[^A-Za-z0-9_.-])[A-Za-z0-9_.-]{{0,64}}(?:{_KEY_NAMES})[\"']?"
          rf"(?:\s*(?:=|%3D)\s*|\t+){_VALUE}", 1),
    _rule("named-secret-colon", _OWN_WORDS,
          rf"(?i)(?:^|[^A-Za-z0-9_.-])[A-Za-z0-9_.-]{{0,64}}(?:{_KEY_NAMES})[\"']?"
          rf"\s*(?::|%3A)\s*{_COLON_VALUE}", 1),
    _rule("quoted-key", ("key",), rf"(?i)[\"'](?:key|apikey|token)[\"']\s*:\s*{_VALUE}", 1),
    # The same names as command-line flags: --password hunter2, --token=…
    _rule("secret-flag", _OWN_WORDS, rf"(?i)--(?:[a-z0-9]+-)*(?:{_KEY_NAMES})[= ](\S+)", 1),
    # PEM private keys, whole (a key inside JSON goes whole; text.py carries a key across lines).
    _rule("pem-private-key", ("private key",),
          r"(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
          r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|$)"),
)

RULES: tuple[Rule, ...] = _OWN + _detectors()
_WORDS = sorted({w for rule in RULES for w in rule.words if w})
_BASE64_RUN = re2.compile(r"[A-Za-z0-9+/]{24,}={0,2}", _OPTIONS)
_PERCENT = re2.compile(r"%[0-9A-Fa-f]{2}", _OPTIONS)
_MAX_BASE64_RUNS = 32  # decoded per text: bounded, so a wall of base64 costs a fixed amount


def _rule_set() -> object:
    """Every rule's pattern in one RE2 set: one pass over a text says which rules match in it at
    all (about 2 µs for a scheduler message), so only those are asked where."""
    rule_set = re2.Set.SearchSet(_OPTIONS)
    for rule in RULES:
        rule_set.Add(rule.pattern.pattern)
    rule_set.Compile()
    return rule_set


_SET = _rule_set()
# Longer texts take the literal-word gate: the binding answers "no match" and "the DFA ran out of
# memory" alike (an empty list), and a short text cannot exhaust a 64 MB DFA budget.
_SET_MAX = 4096


def _rules_for(text: str) -> list[int]:
    if len(text) <= _SET_MAX:
        return sorted(_SET.Match(text) or ())
    lower = text.lower()
    return [i for i, rule in enumerate(RULES) if not rule.words or any(word in lower for word in rule.words)]


def spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) of every secret in ``text`` as printed, merged and sorted."""
    found = _plain_spans(text)
    found.extend(_base64_spans(text))
    return _merged(found)


MAX_MATCHES = 2_000  # secrets of one rule in one text; past that the rest of the text is withheld


def _matched(rule: Rule, text: str, found: list[tuple[int, int]]) -> None:
    """Append ``rule``'s secret spans in ``text``. A text holding more than `MAX_MATCHES` of
    them is hostile (or a dump of secrets): the rest of it goes whole, so the work stays bounded
    by a constant per character, not per match."""
    for count, match in enumerate(rule.pattern.finditer(text)):
        start, end = match.span(rule.group)
        if count >= MAX_MATCHES:
            found.append((match.start(), len(text)))
            return
        if start >= 0 and end > start:
            found.append((start, end))


def _base64_spans(text: str) -> Iterator[tuple[int, int]]:
    """Runs of base64 whose decoded text holds a secret: the whole run goes."""
    for count, match in enumerate(_BASE64_RUN.finditer(text)):
        if count >= _MAX_BASE64_RUNS:
            return
        run = match.group()
        try:
            decoded = base64.b64decode(run + "=" * (-len(run) % 4), validate=False).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
        if decoded.isprintable() and _plain_spans(decoded):
            yield match.span()


def _plain_spans(text: str) -> list[tuple[int, int]]:
    """`spans` without the base64 view (a decoded run is not decoded again)."""
    found: list[tuple[int, int]] = []
    for index in _rules_for(text):
        _matched(RULES[index], text, found)
    return found


def _merged(found: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(found):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def replace(text: str, found: list[tuple[int, int]]) -> str:
    """``text`` with each span replaced by `REDACTED`."""
    if not found:
        return text
    pieces, last = [], 0
    for start, end in found:
        pieces += [text[last:start], REDACTED]
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _redact_once(text: str) -> str:
    return replace(text, spans(text))


@lru_cache(maxsize=8192)
def _redact_short(text: str) -> str:
    return _redact_full(text)


_MAX_DECODES = 3  # a secret encoded twice (a URL inside a URL's query) is still found


def _redact_full(text: str) -> str:
    out = _redact_once(text)
    # The percent-decoded views: an URL-encoded secret is found in its decoded form, and the text
    # is then shown decoded with the secret gone (re-encoding it would show nothing more).
    view = text
    for _ in range(_MAX_DECODES):
        if "%" not in view or _PERCENT.search(view) is None:
            break
        decoded = unquote(view)
        if decoded == view:
            break
        redacted = _redact_once(decoded)
        if redacted != decoded:
            return redacted
        view = decoded
    return out


def redact(text: str) -> str:
    """``text`` with every secret the rules know replaced (what names it kept)."""
    if not text:
        return text
    if len(text) <= 512:  # summaries and card lines repeat across runs and ticks
        return _redact_short(text)
    return _redact_full(text)


def write_table() -> None:
    """Regenerate `detect_secrets_table.py` from the installed detect-secrets (after a bump)."""
    path = detect_secrets_table.__file__
    with open(path, encoding="utf-8") as handle:
        head = handle.read().partition("\nVERSION = ")[0]
    rows = "".join(f"    {row!r},\n" for row in detector_table())
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"{head}\nVERSION = {installed_version()!r}\n"
                     "# (detector, index in its denylist, pattern, ignore case, has a capture group)\n"
                     f"TABLE: tuple[tuple[str, int, str, bool, bool], ...] = (\n{rows})\n")


__all__ = ["REDACTED", "RULES", "Rule", "detector_table", "installed_version", "redact", "replace", "spans",
           "write_table"]

if __name__ == "__main__":
    write_table()
