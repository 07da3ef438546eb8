"""The one place a Slack `WebClient` is built, so the bot and the workers agree on how.

Why a factory: slack_sdk does not retry on HTTP 429 by default (its
`RateLimitErrorRetryHandler` must be appended), and `chat.postMessage` is
limited to about one message per second per channel — a busy channel would
otherwise turn into failed jobs. The base URL comes from the settings so tests
and egress proxies point every client at the same place.
"""

from __future__ import annotations

from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler

from workers.config.settings import Settings


def make_web_client(settings: Settings, *, timeout: int = 10, rate_limit_retries: int = 2) -> WebClient:
    """A bot-token client for ``settings.slack_api_url``, retrying 429s ``rate_limit_retries`` times.

    ``timeout`` is per HTTP request; the Slack front end passes a short one
    because everything it does must fit in the 3-second ack.
    """
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    client = WebClient(token=token, base_url=settings.slack_api_url, timeout=timeout)
    if rate_limit_retries > 0:
        client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=rate_limit_retries))
    return client


__all__ = ["make_web_client"]
