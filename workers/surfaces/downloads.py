"""A shared file's download with the bot token, which goes to Slack and nowhere else.

Why not `urllib.request.urlopen(Request(url, headers={"Authorization": …}))`:
urllib copies a request's headers onto every redirect, whatever host the
`Location` names, so one 302 hands `Bearer xoxb-…` to that host (issue 26.1).
Here the token is an *unredirected* header (urllib never copies those), and
each hop is judged again by `hop_policy`:

* ``token`` — an https host under ``slack.com`` (Slack serves a file from
  `files.slack.com` and may redirect within its own hosts, which still want
  the token), or exactly the Web API's configured origin (scheme, host and
  port: the fake Slack in tests, a proxy an operator chose);
* ``anonymous`` — Slack's CDN (`*.slack-edge.com`, `*.slack-files.com`, https):
  presigned URLs that need no token, so the hop is followed without it;
* ``refuse`` — anything else (another host, another port of the API host, a
  downgrade to http): not fetched at all, so neither the token nor the
  worker's network position is lent to it.

Hand-written on purpose: urllib is what slack_sdk itself uses, and its
redirect handler is the one place where the rule can sit.
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from email.message import Message
from typing import IO, Literal
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

Hop = Literal["token", "anonymous", "refuse"]
SLACK_DOMAINS = ("slack.com",)
CDN_DOMAINS = ("slack-edge.com", "slack-files.com")
MAX_REDIRECTS = 5


def _under(host: str, domains: tuple[str, ...]) -> bool:
    return any(host == d or host.endswith("." + d) for d in domains)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"https": 443, "http": 80}.get(scheme)
    except ValueError:  # a port that is not a number
        return scheme, "", None
    return scheme, (parts.hostname or "").lower(), port


def hop_policy(url: str, api_base: str) -> Hop:
    """Whether ``url`` may receive the bot token, may be fetched without it, or not at all."""
    scheme, host, port = _origin(url)
    if not host:
        return "refuse"
    if (scheme, host, port) == _origin(api_base):
        return "token"
    if scheme != "https":
        return "refuse"
    if _under(host, SLACK_DOMAINS):
        return "token"
    if _under(host, CDN_DOMAINS):
        return "anonymous"
    return "refuse"


class RedirectRefused(urllib.error.URLError):
    """A redirect named a host the download may not follow to."""

    def __init__(self, host: str) -> None:
        super().__init__(f"redirect to {host or 'an unnamed host'} refused")
        self.host = host


class _SlackOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows at most `MAX_REDIRECTS` hops, re-attaching the token only where `hop_policy` says."""

    max_redirections = MAX_REDIRECTS

    def __init__(self, token: str, api_base: str) -> None:
        self.token = token
        self.api_base = api_base

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: Message, newurl: str) -> urllib.request.Request | None:
        policy = hop_policy(newurl, self.api_base)
        if policy == "refuse":
            host = urlsplit(newurl).hostname or ""
            log.warning("file download: a %s redirect to %s was not followed", code, host[:100])
            raise RedirectRefused(host)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and policy == "token":
            new.add_unredirected_header("Authorization", f"Bearer {self.token}")
        return new


def download(url: str, *, token: str, api_base: str, max_bytes: int, timeout: float = 10.0) -> bytes:
    """At most ``max_bytes + 1`` bytes of ``url`` (the caller tells "too large" from that).

    Raises `RedirectRefused` for a hop off Slack, `OSError` for the rest (refused, reset,
    HTTP errors); a first URL that may not have the token is refused the same way."""
    if hop_policy(url, api_base) != "token":
        raise RedirectRefused(urlsplit(url).hostname or "")
    opener = urllib.request.build_opener(_SlackOnlyRedirects(token, api_base))
    request = urllib.request.Request(url)
    request.add_unredirected_header("Authorization", f"Bearer {token}")
    with opener.open(request, timeout=timeout) as response:
        return bytes(response.read(max_bytes + 1))


__all__ = ["CDN_DOMAINS", "MAX_REDIRECTS", "RedirectRefused", "SLACK_DOMAINS", "download", "hop_policy"]
