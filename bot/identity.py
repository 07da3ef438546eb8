"""Map a Slack user to the Kubernetes identity taubot impersonates for them.

Every user-initiated Kubernetes call carries ``Impersonate-User``/``-Group``
(SPEC §7), so this mapping *is* the authorization boundary: the cluster's RBAC
decides what a Slack user may see only if this module names the right person.
Hence the rules below lean to refusing with a clear message rather than
guessing:

* A static entry in the identity file wins and is complete: it is the
  operator's explicit word, so Slack is not consulted (and a Slack outage
  cannot lock those users out).
* Otherwise, only with ``map_by_email: true``, the user's Slack profile email
  becomes the Kubernetes user name and their Slack user groups, through the
  ``usergroups`` table, become its groups. Deleted users, bots, and profiles
  without a (confirmed) email are refused.
* If the user groups cannot be read, the user is refused rather than mapped
  with fewer groups: a partial identity would answer "permission denied" for
  reasons nobody could see.
* Results are cached in Redis, so the bot's HTTP workers and rq workers share
  them and Slack is asked once per user per TTL. Refusals are cached briefly
  (a fixed mapping should take effect soon); failures to reach Slack are not
  cached at all (they say nothing about the user). The cache key includes a
  fingerprint of the identity file, so an edited mapping is never answered
  from entries made under the old one.
* Each process also remembers what it resolved or read from Redis, until that
  Redis entry expires (never longer): an email-mapped user's next command
  costs its ack no Redis round trip (issue 36), and the answer is the one
  Redis holds anyway.
* Nothing here raises for Slack or Redis trouble: the caller gets an
  ``Unmapped`` value whose ``reason`` is meant for the user and ``detail`` for
  the logs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import redis
import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from workers.contracts.identity import Identity
from workers.records import keys

log = logging.getLogger(__name__)

ASK_OPERATOR = (
    "Ask your TauGrid platform operator to add your Slack user to the taubot identity mapping."
)
DEFAULT_TTL_SECONDS = 600
NEGATIVE_TTL_SECONDS = 60
REMEMBERED_USERS = 4096  # per process; the least recently asked is forgotten past this
DEFAULT_KEY_PREFIX = keys.IDENTITY

SlackUserId = Annotated[str, Field(pattern=r"^[UW][A-Z0-9]{2,}$")]
SlackUsergroupId = Annotated[str, Field(pattern=r"^S[A-Z0-9]{2,}$")]

_EMAIL = re.compile(r"^[^@\s:]+@[^@\s:]+\.[^@\s:]+$")
_RESERVED_PREFIX = "system:"


def _check_kube_name(value: str, what: str) -> str:
    """Refuse names taubot must never impersonate: ``system:`` users and groups
    (``system:masters`` bypasses RBAC) and anything that cannot be a header."""
    if not value.strip() or any(c in value for c in "\r\n\0"):
        raise ValueError(f"{what} must be a non-blank single-line string")
    if value.startswith(_RESERVED_PREFIX):
        raise ValueError(f"{what} {value!r} is reserved by Kubernetes and cannot be mapped")
    return value


class UserEntry(BaseModel):
    """One static mapping: the Kubernetes user and groups for a Slack user."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user: str
    groups: tuple[str, ...] = ()

    @field_validator("user")
    @classmethod
    def _user_ok(cls, value: str) -> str:
        """Keep reserved and malformed users out of the file, not just out of requests."""
        return _check_kube_name(value, "user")

    @field_validator("groups")
    @classmethod
    def _groups_ok(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Same rule per group: each becomes one Impersonate-Group header."""
        return tuple(_check_kube_name(g, "group") for g in value)


class IdentityMap(BaseModel):
    """The identity file (SPEC §9). Unknown fields are errors: a typo such as
    ``map_by_mail`` must not silently turn a feature off (or on)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users: dict[SlackUserId, UserEntry] = Field(default_factory=dict)
    map_by_email: StrictBool = False
    usergroups: dict[SlackUsergroupId, str] = Field(default_factory=dict)

    @field_validator("usergroups")
    @classmethod
    def _usergroup_targets_ok(cls, value: dict[str, str]) -> dict[str, str]:
        """The mapped-to names are Kubernetes groups and follow their rules."""
        for group in value.values():
            _check_kube_name(group, "group")
        return value

    def fingerprint(self) -> str:
        """Short digest of the mapping, part of cache keys (see module docstring)."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:12]


class IdentityConfigError(Exception):
    """The identity file is missing or invalid; ``str()`` is one line naming the file."""


def load_identity_map(path: str | Path) -> IdentityMap:
    """Read and validate the identity file; ``IdentityConfigError`` on any problem.

    Called at startup, so a bad file stops the bot with one readable line
    instead of refusing every user later.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise IdentityConfigError(f"{path}: identity file not found") from None
    except OSError as exc:
        raise IdentityConfigError(f"{path}: cannot read identity file: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise IdentityConfigError(f"{path}: invalid YAML: {_yaml_problem(exc)}") from None
    if data is None:
        raise IdentityConfigError(f"{path}: identity file is empty")
    if not isinstance(data, dict):
        raise IdentityConfigError(
            f"{path}: expected a mapping with users/map_by_email/usergroups, "
            f"got {type(data).__name__}"
        )
    try:
        return IdentityMap.model_validate(data)
    except ValidationError as exc:
        raise IdentityConfigError(f"{path}: {_validation_problem(exc)}") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return _one_line(where + problem)


def _validation_problem(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{loc}: {err['msg']}")
    return _one_line("; ".join(parts))


def _one_line(text: str) -> str:
    return " ".join(text.split())


class Unmapped(BaseModel):
    """A refusal, as a value: ``reason`` is shown to the Slack user, ``detail`` is
    for the operator's logs, ``transient`` says trying again may help."""

    model_config = ConfigDict(frozen=True)

    slack_user_id: str
    reason: str
    detail: str = ""
    transient: bool = False


class IdentityResolver:
    """Resolve Slack users to ``Identity`` with a shared Redis cache.

    ``slack_client`` is the bot-token ``WebClient`` (needs ``users:read``,
    ``users:read.email`` and, when ``usergroups`` is used, ``usergroups:read``).
    """

    def __init__(
        self,
        identity_map: IdentityMap,
        slack_client: WebClient,
        redis: redis.Redis,
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        negative_ttl_seconds: int = NEGATIVE_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.identity_map = identity_map
        self.slack = slack_client
        self.redis = redis
        self.ttl_seconds = ttl_seconds
        self.negative_ttl_seconds = negative_ttl_seconds
        self.key_prefix = key_prefix
        self.clock = clock
        self._fingerprint = identity_map.fingerprint()
        # slack user → (when the Redis entry expires, on `clock`; what it holds)
        self._remembered: OrderedDict[str, tuple[float, Identity | Unmapped]] = OrderedDict()
        self._lock = threading.Lock()

    def cache_key(self, slack_user_id: str) -> str:
        """Redis key of a user's cached result under the current mapping."""
        return f"{self.key_prefix}{self._fingerprint}:{slack_user_id}"

    def resolve(self, slack_user_id: str) -> Identity | Unmapped:
        """The identity to impersonate for ``slack_user_id``, or why there is none."""
        entry = self.identity_map.users.get(slack_user_id)
        if entry is not None:
            return Identity(user=entry.user, groups=entry.groups)
        if not self.identity_map.map_by_email:
            return _refusal(slack_user_id, "not listed and map_by_email is off")
        remembered = self._recall(slack_user_id)
        if remembered is not None:
            return remembered
        cached = self._cache_get(slack_user_id)
        if cached is not None:
            result, ttl = cached
            self._remember(slack_user_id, result, ttl)
            return result
        result = self._resolve_by_email(slack_user_id)
        if isinstance(result, Identity):
            self._cache_put(slack_user_id, result, self.ttl_seconds)
        elif not result.transient:
            self._cache_put(slack_user_id, result, self.negative_ttl_seconds)
        if isinstance(result, Unmapped):
            log.info("identity: refused %s: %s", slack_user_id, result.detail)
        return result

    # ------------------------------------------------------------- this process

    def _recall(self, slack_user_id: str) -> Identity | Unmapped | None:
        """What this process resolved or read for the user, while its Redis entry lives."""
        with self._lock:
            entry = self._remembered.get(slack_user_id)
            if entry is None:
                return None
            if entry[0] <= self.clock():
                del self._remembered[slack_user_id]
                return None
            self._remembered.move_to_end(slack_user_id)
            return entry[1]

    def _remember(self, slack_user_id: str, result: Identity | Unmapped, ttl: float) -> None:
        with self._lock:
            self._remembered[slack_user_id] = (self.clock() + ttl, result)
            self._remembered.move_to_end(slack_user_id)
            while len(self._remembered) > REMEMBERED_USERS:
                self._remembered.popitem(last=False)

    # ------------------------------------------------------------- Slack

    def _resolve_by_email(self, slack_user_id: str) -> Identity | Unmapped:
        try:
            user = self.slack.users_info(user=slack_user_id)["user"]
        except SlackApiError as exc:
            return _slack_failure(slack_user_id, "users.info", exc)
        except (SlackClientError, OSError) as exc:
            return _slack_unreachable(slack_user_id, "users.info", exc)
        if user.get("deleted"):
            return _refusal(slack_user_id, "Slack user is deactivated")
        if user.get("is_bot") or user.get("is_app_user"):
            return _refusal(slack_user_id, "Slack user is a bot")
        email = str((user.get("profile") or {}).get("email") or "").strip().lower()
        if not email:
            return Unmapped(
                slack_user_id=slack_user_id,
                reason="taubot cannot see an email on your Slack profile, so it cannot map "
                "you to a Kubernetes identity. " + ASK_OPERATOR,
                detail="users.info returned no profile.email (is users:read.email granted?)",
            )
        if user.get("is_email_confirmed") is not True:  # absent is not confirmed
            return _refusal(slack_user_id, "Slack profile email is not confirmed")
        if not _EMAIL.match(email) or email.startswith(_RESERVED_PREFIX):
            return _refusal(slack_user_id, f"profile email {email!r} is not usable as a user")
        groups = self._usergroup_groups(slack_user_id)
        if isinstance(groups, Unmapped):
            return groups
        return Identity(user=email, groups=groups)

    def _usergroup_groups(self, slack_user_id: str) -> tuple[str, ...] | Unmapped:
        """Kubernetes groups from the Slack user groups the user belongs to.

        ``usergroups.list`` with ``include_users`` is one call for all groups
        (``usergroups.users.list`` would be one per group); disabled groups
        are excluded by Slack's default, so they grant nothing.
        """
        table = self.identity_map.usergroups
        if not table:
            return ()
        try:
            listed = self.slack.usergroups_list(include_users=True)["usergroups"]
        except SlackApiError as exc:
            return _slack_failure(slack_user_id, "usergroups.list", exc)
        except (SlackClientError, OSError) as exc:
            return _slack_unreachable(slack_user_id, "usergroups.list", exc)
        groups = {
            table[g["id"]]
            for g in listed
            if g.get("id") in table and slack_user_id in (g.get("users") or [])
        }
        return tuple(sorted(groups))

    # ------------------------------------------------------------- Redis

    def _cache_get(self, slack_user_id: str) -> tuple[Identity | Unmapped, float] | None:
        """The user's entry and the seconds it has left (one round trip for both)."""
        key = self.cache_key(slack_user_id)
        try:
            with self.redis.pipeline(transaction=False) as pipe:
                raw, left_ms = pipe.get(key).pttl(key).execute()
        except redis.RedisError as exc:
            log.warning("identity: cache read failed, asking Slack: %s", exc)
            return None
        if raw is None:
            return None
        try:
            data: dict[str, Any] = json.loads(raw)
            kind = data.pop("kind")
            result = Identity.model_validate(data) if kind == "identity" else Unmapped.model_validate(data)
        except (ValueError, KeyError, TypeError):
            return None  # an entry from another version: ignore it, it will be rewritten
        return result, max(0, left_ms) / 1000  # -1: no expiry set (not ours): not remembered

    def _cache_put(self, slack_user_id: str, result: Identity | Unmapped, ttl: int) -> None:
        kind = "identity" if isinstance(result, Identity) else "unmapped"
        payload = json.dumps({"kind": kind, **result.model_dump(mode="json")})
        try:
            self.redis.set(self.cache_key(slack_user_id), payload, ex=ttl)
        except redis.RedisError as exc:
            log.warning("identity: cache write failed: %s", exc)
            return  # not remembered either: the next command asks Slack again, as every process would
        self._remember(slack_user_id, result, ttl)


def _refusal(slack_user_id: str, detail: str) -> Unmapped:
    return Unmapped(
        slack_user_id=slack_user_id,
        reason=f"Your Slack user ({slack_user_id}) is not mapped to a Kubernetes identity. "
        + ASK_OPERATOR,
        detail=detail,
    )


_TRANSIENT_SLACK_ERRORS = {"ratelimited", "internal_error", "fatal_error", "service_unavailable",
                           "request_timeout"}


def _slack_failure(slack_user_id: str, method: str, exc: SlackApiError) -> Unmapped:
    error = str(exc.response.get("error", "")) if exc.response is not None else ""
    if exc.response is not None and exc.response.status_code == 429:
        error = "ratelimited"
    if error in _TRANSIENT_SLACK_ERRORS:
        return _slack_unreachable(slack_user_id, method, exc, error)
    if error in ("user_not_found", "users_not_found"):
        return _refusal(slack_user_id, f"{method}: {error}")
    return Unmapped(
        slack_user_id=slack_user_id,
        reason="taubot could not look up your Slack profile to map you to a Kubernetes "
        "identity. " + ASK_OPERATOR,
        detail=f"{method}: {error or exc}",
    )


def _slack_unreachable(
    slack_user_id: str, method: str, exc: Exception, error: str | None = None
) -> Unmapped:
    return Unmapped(
        slack_user_id=slack_user_id,
        reason="taubot could not reach Slack to look up your identity. Try again in a "
        "minute; if it keeps failing, tell your TauGrid platform operator.",
        detail=f"{method}: {error or type(exc).__name__}: {_one_line(str(exc))}",
        transient=True,
    )
