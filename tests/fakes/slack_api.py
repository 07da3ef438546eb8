"""A local fake of Slack's Web API, served over real HTTP for slack_sdk's clients.

Why a server and not a mock: the bot's Slack paths (Bolt, ``WebClient``,
``AsyncWebClient``, ``response_url`` posts) must be exercised through the same
HTTP, encoding and error handling they use against slack.com, so a test fails
for the reasons production would (a 429 without a retry handler, a
``message_not_found`` after a restart, a block over Slack's limits).

The server runs in a daemon thread with its own event loop, because callers
are often synchronous tests or rq jobs that start (and close) their own loops;
a fake bound to one of those loops would die with it.

Response shapes follow docs.slack.dev (method reference pages, 2025-11):
``chat.postMessage`` returns ``{ok, channel, ts, message}``, ``chat.update``
``{ok, channel, ts, text, message}``, ``chat.postEphemeral`` ``{ok,
message_ts}``, ``users.info``/``users.lookupByEmail`` ``{ok, user}`` with the
email under ``user.profile.email``, ``usergroups.list`` ``{ok, usergroups}``
(``users`` only with ``include_users``), ``conversations.open`` ``{ok,
channel: {id}}``, ``views.open`` ``{ok, view}``. Errors are HTTP 200 with
``{"ok": false, "error": …}``, except rate limiting: HTTP 429, ``Retry-After``.

Usage::

    with running_fake_slack(profiles={"U1": {"email": "a@example.com"}}) as fake:
        client = WebClient(token="xoxb-test", base_url=fake.api_url)
        client.chat_postMessage(channel="C1", text="hi")
        assert fake.last("chat.postMessage").params["text"] == "hi"
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

JSON_FIELDS = ("blocks", "attachments", "view", "metadata")
"""Form fields Slack receives as JSON strings; decoded so tests read structures."""

RESPONSE_URL_KEY = "response_url"
"""Pseudo-method name under which ``response_url`` posts accept fault injection."""

# Block Kit limits Slack enforces with ``invalid_blocks`` (docs.slack.dev,
# reference/block-kit/blocks). Checking them here makes an over-long render
# fail in tests the way it fails in production instead of passing silently.
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_SECTION_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_CONTEXT_ELEMENTS = 10
MAX_ACTIONS_ELEMENTS = 25
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_ACTION_ID = 255
MAX_MESSAGE_TEXT = 40000


@dataclass(frozen=True)
class SlackCall:
    """One request the fake received, as a test wants to read it back.

    ``params`` merges the query string and the form or JSON body, with
    ``blocks``/``attachments``/``view`` decoded from JSON strings, so a test
    does not care which encoding slack_sdk chose for a method.
    """

    method: str
    params: dict[str, Any]
    headers: dict[str, str]
    status: int = 200
    response: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.monotonic)  # when it arrived (benchmarks measure rates)


@dataclass
class _Fault:
    """A queued one-shot failure for one method."""

    kind: str  # "error" or "ratelimit"
    error: str = ""
    retry_after: int = 1


class FakeSlack:
    """State and HTTP handlers of the fake; use ``running_fake_slack`` to start one.

    Every public accessor takes the lock because handlers run on the fake's
    own thread while tests read from theirs.
    """

    def __init__(
        self,
        *,
        profiles: Mapping[str, Mapping[str, Any]] | None = None,
        usergroups: Mapping[str, Mapping[str, Any]] | None = None,
        token: str | None = None,
        team_id: str = "T0TAUGRID",
        team_domain: str = "taugrid",
        bot_user_id: str = "U0TAUBOT",
        bot_id: str = "B0TAUBOT",
        response_url_max_uses: int = 5,
        host: str = "127.0.0.1",
        ts_clock: Callable[[], float] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._profiles: dict[str, dict[str, Any]] = {
            k: dict(v) for k, v in (profiles or {}).items()
        }
        self._usergroups: dict[str, dict[str, Any]] = {
            k: dict(v) for k, v in (usergroups or {}).items()
        }
        self.token = token
        self.team_id = team_id
        self.team_domain = team_domain
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.response_url_max_uses = response_url_max_uses
        self.host = host
        self.port = 0
        self._calls: list[SlackCall] = []
        self._messages: dict[tuple[str, str], dict[str, Any]] = {}
        self._responses: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self._views: list[dict[str, Any]] = []
        self._home: dict[str, dict[str, Any]] = {}  # user id → the Home view published last
        self._faults: dict[str, deque[_Fault]] = defaultdict(deque)
        self._ts_second = 1764500000  # any fixed second: ts values only need to be unique and ordered
        self._ts_seq = 99
        self._view_seq = 0
        self._is_down = False
        # With ``ts_clock``, message ts seconds come from it (Slack's ts are epoch times): a caller
        # that reads `conversations.history` with ``oldest`` from its own clock then finds them.
        self._ts_clock = ts_clock
        self._hang: dict[str, str] = {}  # method → "before" / "after": the next call is held
        self._hang_every: set[str] = set()  # methods whose every call is held (before), until released
        self.hung = threading.Event()  # set while a call is held
        self._hang_release: asyncio.Event | None = None
        self._delay: dict[str, float] = {}  # method → seconds every call waits before its answer
        self._changed = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "api.test": self._api_test,
            "auth.test": self._auth_test,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "chat.getPermalink": self._chat_get_permalink,
            "chat.delete": self._chat_delete,
            "users.info": self._users_info,
            "users.lookupByEmail": self._users_lookup_by_email,
            "usergroups.list": self._usergroups_list,
            "conversations.open": self._conversations_open,
            "views.open": self._views_open,
            "views.publish": self._views_publish,
            "files.getUploadURLExternal": self._files_get_upload_url,
            "files.completeUploadExternal": self._files_complete_upload,
            "files.info": self._files_info,
            "conversations.history": self._conversations_history,
            "conversations.replies": self._conversations_replies,
        }
        self._files: dict[str, dict[str, Any]] = {}
        self._downloads: list[str] = []

    # ------------------------------------------------------------------ URLs

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` with no trailing slash."""
        return f"http://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        """The ``base_url`` slack_sdk wants: it ``urljoin``s the method name onto it,
        so the trailing slash after ``/api`` is required (without it the method
        would replace ``api``)."""
        return f"{self.base_url}/api/"

    def response_url(self, response_id: str) -> str:
        """A ``response_url`` (as sent with slash commands and actions) served here."""
        return f"{self.base_url}/response/{response_id}"

    def permalink(self, channel: str, ts: str, thread_ts: str | None = None) -> str:
        """The permalink Slack builds for a message: ``p`` + ts without the dot,
        plus ``thread_ts``/``cid`` for a reply in a thread."""
        link = f"https://{self.team_domain}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        if thread_ts and thread_ts != ts:
            link += "?" + urlencode({"thread_ts": thread_ts, "cid": channel})
        return link

    # ------------------------------------------------------- test accessors

    @property
    def calls(self) -> list[SlackCall]:
        """A copy of every Web API call received, oldest first."""
        with self._lock:
            return list(self._calls)

    def calls_to(self, method: str) -> list[SlackCall]:
        """The calls of one method, e.g. ``chat.postMessage``."""
        with self._lock:
            return [c for c in self._calls if c.method == method]

    def last(self, method: str) -> SlackCall:
        """The latest call of ``method``; AssertionError when there was none,
        so a test reads as an assertion."""
        found = self.calls_to(method)
        assert found, f"no {method} call received; got {[c.method for c in self.calls]}"
        return found[-1]

    def clear(self) -> None:
        """Forget recorded calls and response_url posts (messages stay)."""
        with self._lock:
            self._calls.clear()
            self._responses.clear()

    def wait_for(self, method: str, count: int = 1, timeout: float = 5.0) -> list[SlackCall]:
        """Block until ``count`` calls of ``method`` arrived (work done on other
        threads, e.g. a Bolt listener or rq worker, posts asynchronously)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = [c for c in self._calls if c.method == method]
                if len(found) >= count:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"expected {count} {method} call(s) within {timeout}s, got {len(found)}"
                    )
                self._changed.wait(remaining)

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        """A message's current state (after updates), or None if unknown/deleted."""
        with self._lock:
            msg = self._messages.get((channel, ts))
            return json.loads(json.dumps(msg)) if msg is not None else None

    def messages(self, channel: str | None = None) -> list[dict[str, Any]]:
        """All stored messages (optionally of one channel), oldest first."""
        with self._lock:
            found = [m for (ch, _), m in self._messages.items() if channel in (None, ch)]
            return json.loads(json.dumps(sorted(found, key=lambda m: float(m["ts"]))))

    def thread(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        """Replies in the thread of parent ``thread_ts`` (parent excluded), oldest first."""
        return [
            m
            for m in self.messages(channel)
            if m.get("thread_ts") == thread_ts and m["ts"] != thread_ts
        ]

    def seed_message(
        self,
        channel: str,
        text: str = "",
        *,
        blocks: list[dict[str, Any]] | None = None,
        thread_ts: str | None = None,
        ts: str | None = None,
        metadata: dict[str, Any] | None = None,
        app: tuple[str, str, str] | None = None,
    ) -> str:
        """Store a message as if posted earlier (e.g. before a restart); returns its ts. By this
        bot, unless ``app`` (its bot user id, bot id and app id): then posted by that other app,
        as Slack shows another app's message (``user``, ``bot_id``, ``app_id``;
        docs.slack.dev/reference/objects/message-object)."""
        with self._lock:
            ts = ts or self._next_ts()
            msg = self._new_message(
                channel, ts, {"text": text, "blocks": blocks, "thread_ts": thread_ts, "metadata": metadata}
            )
            if app is not None:
                msg["user"], msg["bot_id"], msg["app_id"] = app
            self._messages[(channel, ts)] = msg
            return ts

    def responses(self, response_id: str) -> list[dict[str, Any]]:
        """JSON bodies posted to ``response_url(response_id)``, oldest first."""
        with self._lock:
            return list(self._responses.get(response_id, []))

    def wait_for_responses(
        self, response_id: str, count: int = 1, timeout: float = 5.0
    ) -> list[dict[str, Any]]:
        """Block until ``count`` posts reached ``response_url(response_id)``: Bolt
        runs listeners on its own threads after the ack, so a reply lands later."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._responses.get(response_id, [])) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    got = len(self._responses.get(response_id, []))
                    raise AssertionError(
                        f"expected {count} response_url post(s) to {response_id} "
                        f"within {timeout}s, got {got}"
                    )
                self._changed.wait(remaining)
            return list(self._responses[response_id])

    @property
    def views(self) -> list[dict[str, Any]]:
        """Views opened with ``views.open``, as the fake answered them."""
        with self._lock:
            return list(self._views)

    def home_view(self, user_id: str) -> dict[str, Any] | None:
        """The Home tab ``user_id`` sees: the view published last with ``views.publish``."""
        with self._lock:
            return self._home.get(user_id)

    def set_profile(self, user_id: str, profile: Mapping[str, Any]) -> None:
        """Add or replace a user (``email``, ``real_name``, ``deleted``, ``is_bot``, …)."""
        with self._lock:
            self._profiles[user_id] = dict(profile)

    def set_usergroup(self, group_id: str, group: Mapping[str, Any]) -> None:
        """Add or replace a user group (``handle``, ``name``, ``users``, ``date_delete``)."""
        with self._lock:
            self._usergroups[group_id] = dict(group)

    # -------------------------------------------------------- fault injection

    def fail_next(self, method: str, error: str = "message_not_found", times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` with ``{"ok": false, "error"}``.

        ``method`` may be ``"response_url"`` to fail the next response_url post.
        """
        with self._lock:
            self._faults[method].extend(_Fault("error", error=error) for _ in range(times))

    def rate_limit_next(self, method: str, retry_after: int = 1, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` with HTTP 429 + ``Retry-After``."""
        with self._lock:
            self._faults[method].extend(
                _Fault("ratelimit", retry_after=retry_after) for _ in range(times)
            )

    def wait_until(self, condition: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
        """Block until ``condition()`` holds, re-checked at each call the fake receives (it may use
        the accessors: it runs without the lock, so a call landing meanwhile costs 0.2 s at most)."""
        deadline = time.monotonic() + timeout
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"fake Slack: {what or 'condition'} not met within {timeout}s")
            with self._changed:
                self._changed.wait(min(remaining, 0.2))

    def hang_next(self, method: str, *, after: bool = False) -> None:
        """Hold the next call of ``method`` until `release_hang()`: before it is handled (it is
        then dropped unanswered: nothing happened at Slack) or, with ``after``, once handled (the
        message exists, the answer comes only on release). ``hung`` is set while it is held: a
        test kills the caller there."""
        with self._lock:
            self._hang[method] = "after" if after else "before"
            self.hung.clear()
            self._hang_release = asyncio.Event()  # a fresh one: an earlier release must not let this go

    def hang_every(self, method: str) -> None:
        """Hold every call of ``method`` as `hang_next` holds one (before it is handled), until
        `release_hang()` lets them all go and ends the hold: a Slack that stopped answering it."""
        with self._lock:
            self._hang_every.add(method)
            self.hung.clear()
            self._hang_release = asyncio.Event()

    def release_hang(self) -> None:
        """Let a held call go on (its caller may be long dead)."""
        with self._lock:
            self._hang_every.clear()
        loop, release = self._loop, self._hang_release
        if loop is not None and release is not None:
            loop.call_soon_threadsafe(release.set)

    def delay(self, method: str, seconds: float) -> None:
        """Every call of ``method`` is answered ``seconds`` late (a slow Slack); 0 ends it."""
        with self._lock:
            self._delay[method] = seconds

    async def _held(self) -> None:
        with self._lock:
            release = self._hang_release = self._hang_release or asyncio.Event()
        self.hung.set()
        await release.wait()

    def down(self) -> None:
        """Simulate Slack unreachable: stop listening (connection refused) and drop
        open keep-alive connections, so pooled clients fail too."""
        self._run(self._stop_site())
        with self._lock:
            self._is_down = True

    def up(self) -> None:
        """Listen again on the same port after ``down()``."""
        with self._lock:
            self._is_down = False
        self._run(self._start_site())

    # --------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start the loop thread and listen on an ephemeral port."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(
            target=loop.run_forever, name="fake-slack", daemon=True
        )
        self._thread.start()
        self._run(self._setup())

    def stop(self) -> None:
        """Stop serving and end the loop thread."""
        if self._loop is None:
            return
        self._run(self._cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._loop.close()
        self._loop = None

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None, "fake Slack is not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _setup(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_post("/response/{response_id}", self._handle_response_url)
        app.router.add_post("/upload/{file_id}", self._handle_upload)
        app.router.add_get("/files-pri/{team_file}/download/{name}", self._handle_download)
        app.router.add_get("/files-origin/{team_file}/{name}", self._handle_download)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await self._start_site()

    async def _start_site(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await self._site.start()
        self.port = self._site.port

    async def _stop_site(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None
        if self._runner is not None and self._runner.server is not None:
            for conn in self._runner.server.connections:
                conn.force_close()

    async def _cleanup(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ----------------------------------------------------------------- HTTP

    async def _read_params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            ctype = request.content_type
            if ctype == "application/json":
                body = await request.json()
                if isinstance(body, dict):
                    params.update(body)
            else:
                form = await request.post()
                params.update({k: v for k, v in form.items() if isinstance(v, str)})
        for name in JSON_FIELDS:
            if isinstance(params.get(name), str):
                try:
                    params[name] = json.loads(params[name])
                except ValueError:
                    pass  # left as sent; the handler rejects it like Slack would
        return params

    def _token_error(self, request: web.Request, params: dict[str, Any]) -> str | None:
        auth = request.headers.get("Authorization", "")
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else params.get("token")
        if not token:
            return "not_authed"
        if not str(token).startswith("xoxb-") or (self.token and token != self.token):
            return "invalid_auth"
        return None

    async def _handle_api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._read_params(request)
        headers = dict(request.headers)
        status, body, extra_headers = 200, {}, {}
        with self._lock:
            hang = self._hang.pop(method, None) or ("before" if method in self._hang_every else None)
            delay = self._delay.get(method, 0.0)
        if delay:
            await asyncio.sleep(delay)
        if hang == "before":
            await self._held()
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=503)
        with self._lock:
            fault = self._faults[method].popleft() if self._faults.get(method) else None
            token_error = self._token_error(request, params)
            if token_error:
                body = {"ok": False, "error": token_error}
            elif fault is not None and fault.kind == "ratelimit":
                status, body = 429, {"ok": False, "error": "ratelimited"}
                extra_headers = {"Retry-After": str(fault.retry_after)}
            elif fault is not None:
                body = {"ok": False, "error": fault.error}
            elif method not in self._handlers:
                body = {"ok": False, "error": "unknown_method", "req_method": method}
            else:
                body = self._handlers[method](params)
            self._calls.append(SlackCall(method, params, headers, status, body))
            self._changed.notify_all()
        if hang == "after":
            await self._held()
        return web.json_response(body, status=status, headers=extra_headers)

    async def _handle_response_url(self, request: web.Request) -> web.Response:
        """Slack's response_url: JSON in, a short text answer out; 5 uses at most."""
        response_id = request.match_info["response_id"]
        try:
            body = await request.json()
        except ValueError:
            return web.Response(status=400, text="invalid_payload")
        with self._lock:
            fault = (
                self._faults[RESPONSE_URL_KEY].popleft()
                if self._faults.get(RESPONSE_URL_KEY)
                else None
            )
            if fault is not None and fault.kind == "ratelimit":
                return web.Response(
                    status=429, text="rate_limited", headers={"Retry-After": str(fault.retry_after)}
                )
            if fault is not None:
                return web.Response(status=404, text=fault.error)
            if len(self._responses[response_id]) >= self.response_url_max_uses:
                return web.Response(status=404, text="used_url")
            self._responses[response_id].append(body)
            self._changed.notify_all()
        return web.json_response({"ok": True})

    async def _handle_upload(self, request: web.Request) -> web.Response:
        """Step 2 of files_upload_v2: the bytes go to the URL step 1 handed out."""
        file_id = request.match_info["file_id"]
        data = await request.read()
        with self._lock:
            if file_id not in self._files:
                return web.Response(status=404, text="unknown file")
            self._files[file_id]["content"] = data
            self._changed.notify_all()
        return web.Response(text="OK - " + str(len(data)))

    def seed_file(self, file_id: str, name: str, content: bytes, *, user: str, channels: list[str],
                  groups: list[str] | None = None, size: int | None = None,
                  download_url: str | None = None, redirect: tuple[int, str] | None = None) -> None:
        """A file a user shared, as `files.info` describes it (api.slack.com/methods/files.info:
        `url_private_download` under /files-pri/<team>-<file>/download/<name>, `channels`,
        `groups`, `ims`, `size`). ``size`` can lie, as a test of the download cap.
        ``redirect`` (status, Location): the download answers that redirect instead of the bytes;
        `origin_url` names a second path here that serves them (Slack may redirect among its
        own file hosts)."""
        with self._lock:
            self._files[file_id] = {
                "id": file_id, "name": name, "title": name, "filetype": "yaml", "mimetype": "text/plain",
                "user": user, "size": len(content) if size is None else size, "mode": "snippet",
                "url_private": f"{self.base_url}/files-pri/{self.team_id}-{file_id}/{name}",
                "url_private_download": download_url
                or f"{self.base_url}/files-pri/{self.team_id}-{file_id}/download/{name}",
                "permalink": f"https://{self.team_domain}.slack.com/files/{user}/{file_id}/{name}",
                "channels": list(channels), "groups": list(groups or []), "ims": [],
                "content": content, "seeded": True, "redirect": redirect,
            }

    def origin_url(self, file_id: str, name: str) -> str:
        """Another path of this fake (so a Slack host) that serves a seeded file's bytes."""
        return f"{self.base_url}/files-origin/{self.team_id}-{file_id}/{name}"

    def downloads(self) -> list[str]:
        """The Authorization header of each file download, in order."""
        with self._lock:
            return list(self._downloads)

    async def _handle_download(self, request: web.Request) -> web.Response:
        team_file = request.match_info["team_file"]
        file_id = team_file.split("-", 1)[-1]
        with self._lock:
            self._downloads.append(request.headers.get("Authorization", ""))
            f = self._files.get(file_id)
            if f is None or not f.get("seeded"):
                return web.Response(status=404, text="file not found")
            if f.get("redirect") and request.path.startswith("/files-pri/"):
                code, location = f["redirect"]
                return web.Response(status=code, headers={"Location": location})
            auth = request.headers.get("Authorization", "")
            if not auth.startswith("Bearer xoxb-") or (self.token and auth != f"Bearer {self.token}"):
                # Slack answers an unauthenticated download with its sign-in page, not the file.
                return web.Response(status=200, text="<!DOCTYPE html><html>sign in</html>",
                                    content_type="text/html")
            return web.Response(body=f["content"], content_type="application/octet-stream")

    def _files_info(self, params: dict[str, Any]) -> dict[str, Any]:
        f = self._files.get(str(params.get("file") or ""))
        if f is None or not f.get("seeded"):
            return {"ok": False, "error": "file_not_found"}
        shown = {k: v for k, v in f.items() if k not in ("content", "seeded")}
        return {"ok": True, "file": shown, "comments": [], "response_metadata": {"next_cursor": ""}}

    def files(self) -> list[dict[str, Any]]:
        """Uploaded files: ``{id, filename, content (bytes), channel, thread_ts, title}``."""
        with self._lock:
            return [dict(f) for f in self._files.values() if f.get("shared")]

    # ---------------------------------------------------- method handlers
    # Called with the lock held.

    def _files_get_upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        if not params.get("filename") or not str(params.get("length") or "").isdigit():
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F{len(self._files) + 1:08d}"
        self._files[file_id] = {"id": file_id, "filename": params["filename"],
                                "length": int(params["length"]), "content": b""}
        return {"ok": True, "upload_url": f"{self.base_url}/upload/{file_id}", "file_id": file_id}

    def _files_complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        files = params.get("files")
        if isinstance(files, str):
            files = json.loads(files)
        done = []
        for entry in files or []:
            f = self._files.get(entry.get("id"))
            if f is None or len(f["content"]) != f["length"]:
                return {"ok": False, "error": "file_upload_incomplete"}
            f.update(shared=True, title=entry.get("title"), channel=params.get("channel_id"),
                     thread_ts=params.get("thread_ts"), initial_comment=params.get("initial_comment"))
            # Slack now answers with the file objects, permalink included (@slack/web-api 7.x
            # FilesCompleteUploadExternalResponse.File, generated from real responses; the
            # 6.x type had only id and title).
            done.append({"id": f["id"], "title": entry.get("title"), "name": f["filename"],
                         "permalink": f"https://{self.team_domain}.slack.com/files/{self.bot_user_id}/"
                                      f"{f['id']}/{f['filename']}"})
        return {"ok": True, "files": done}

    def _next_ts(self) -> str:
        self._ts_seq += 1
        second = int(self._ts_clock()) if self._ts_clock is not None else self._ts_second
        return f"{second}.{self._ts_seq:06d}"

    def _new_message(self, channel: str, ts: str, params: dict[str, Any]) -> dict[str, Any]:
        msg: dict[str, Any] = {
            "type": "message",
            "subtype": "bot_message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "channel": channel,
            "ts": ts,
            "text": params.get("text") or "",
        }
        for name in ("blocks", "attachments", "thread_ts", "metadata"):
            if params.get(name) is not None:
                msg[name] = params[name]
        return msg

    def _resolve_channel(self, channel: str) -> str:
        """Posting to a user id lands in the bot's DM with that user, as on Slack."""
        return self._dm_channel([channel]) if channel[:1] in ("U", "W") else channel

    @staticmethod
    def _dm_channel(users: list[str]) -> str:
        digest = hashlib.sha1(",".join(sorted(users)).encode()).hexdigest().upper()
        return "D" + "".join(ch for ch in digest if ch.isalnum())[:10]

    def _validate_content(self, params: dict[str, Any]) -> dict[str, Any] | None:
        blocks = params.get("blocks")
        text = params.get("text")
        if not text and not blocks and not params.get("attachments"):
            return {"ok": False, "error": "no_text"}
        if text and len(str(text)) > MAX_MESSAGE_TEXT:
            return {"ok": False, "error": "msg_too_long"}
        if blocks is not None:
            errors = block_errors(blocks)
            if errors:
                return {"ok": False, "error": "invalid_blocks", "errors": errors}
        return None

    def _api_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "args": {k: v for k, v in params.items() if k != "token"}}

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": f"https://{self.team_domain}.slack.com/",
            "team": "TauGrid",
            "user": "taubot",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _chat_post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        if not params.get("channel"):
            return {"ok": False, "error": "channel_not_found"}
        invalid = self._validate_content(params)
        if invalid:
            return invalid
        channel = self._resolve_channel(str(params["channel"]))
        ts = self._next_ts()
        msg = self._new_message(channel, ts, params)
        self._messages[(channel, ts)] = msg
        public = {k: v for k, v in msg.items() if k != "channel"}
        return {"ok": True, "channel": channel, "ts": ts, "message": public}

    def _chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel", "")), str(params.get("ts", ""))
        msg = self._messages.get((channel, ts))
        if msg is None:
            return {"ok": False, "error": "message_not_found"}
        invalid = self._validate_content(params)
        if invalid:
            return invalid
        for name in ("text", "blocks", "attachments", "metadata"):
            if name in params:
                msg[name] = params[name]
        msg["edited"] = {"user": self.bot_user_id, "ts": self._next_ts()}
        public = {k: v for k, v in msg.items() if k not in ("channel", "ts")}
        return {"ok": True, "channel": channel, "ts": ts, "text": msg["text"], "message": public}

    def _conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        """Top-level messages of a channel, newest first, from ``oldest`` on; ``metadata`` only
        with ``include_all_metadata`` (docs.slack.dev/reference/methods/conversations.history);
        ``limit`` per page with ``response_metadata.next_cursor`` (an offset here)."""
        channel = str(params.get("channel") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        oldest = float(params.get("oldest") or 0)
        with_metadata = str(params.get("include_all_metadata", "")).lower() in ("true", "1")
        top = [m for (ch, ts), m in self._messages.items()
               if ch == channel and float(ts) >= oldest and m.get("thread_ts") in (None, ts)]
        top.sort(key=lambda m: float(m["ts"]), reverse=True)
        start = int(params.get("cursor") or 0)
        limit = int(params.get("limit") or 100)
        page = top[start:start + limit]
        shown = [{k: v for k, v in m.items() if k != "channel" and (with_metadata or k != "metadata")}
                 for m in page]
        more = start + limit < len(top)
        return {"ok": True, "messages": json.loads(json.dumps(shown)), "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def _conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        """A thread, oldest first: its parent, then the replies from ``oldest`` on; ``metadata``
        only with ``include_all_metadata`` (docs.slack.dev/reference/methods/conversations.replies:
        "ts must be the timestamp of an existing message"; a missing one is thread_not_found);
        ``limit`` per page with ``response_metadata.next_cursor`` (an offset here)."""
        channel, ts = str(params.get("channel") or ""), str(params.get("ts") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        parent = self._messages.get((channel, ts))
        if parent is None:
            return {"ok": False, "error": "thread_not_found"}
        oldest = float(params.get("oldest") or 0)
        with_metadata = str(params.get("include_all_metadata", "")).lower() in ("true", "1")
        thread = sorted((m for (ch, t), m in self._messages.items()
                         if ch == channel and t != ts and m.get("thread_ts") == ts and float(t) >= oldest),
                        key=lambda m: float(m["ts"]))
        everything = [parent, *thread]
        start = int(params.get("cursor") or 0)
        limit = int(params.get("limit") or 1000)
        page = everything[start:start + limit]
        shown = [{k: v for k, v in m.items() if k != "channel" and (with_metadata or k != "metadata")}
                 for m in page]
        more = start + limit < len(everything)
        return {"ok": True, "messages": json.loads(json.dumps(shown)), "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def _chat_post_ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        if not params.get("channel"):
            return {"ok": False, "error": "channel_not_found"}
        if not params.get("user"):
            return {"ok": False, "error": "user_not_in_channel"}
        invalid = self._validate_content(params)
        if invalid:
            return invalid
        return {"ok": True, "message_ts": self._next_ts()}

    def _chat_get_permalink(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel", "")), str(params.get("message_ts", ""))
        msg = self._messages.get((channel, ts))
        if msg is None:
            return {"ok": False, "error": "message_not_found"}
        return {
            "ok": True,
            "channel": channel,
            "permalink": self.permalink(channel, ts, msg.get("thread_ts")),
        }

    def _chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel", "")), str(params.get("ts", ""))
        if self._messages.pop((channel, ts), None) is None:
            return {"ok": False, "error": "message_not_found"}
        return {"ok": True, "channel": channel, "ts": ts}

    def _user_object(self, user_id: str) -> dict[str, Any]:
        prof = self._profiles[user_id]
        top_level = ("name", "deleted", "is_bot", "is_admin", "is_restricted",
                     "is_ultra_restricted", "tz", "is_email_confirmed")
        profile = {k: v for k, v in prof.items() if k not in top_level}
        real_name = prof.get("real_name", "")
        profile.setdefault("real_name", real_name)
        profile.setdefault("display_name", prof.get("name", ""))
        user: dict[str, Any] = {
            "id": user_id,
            "team_id": self.team_id,
            "name": prof.get("name", str(prof.get("email", user_id)).split("@")[0]),
            "deleted": prof.get("deleted", False),
            "real_name": real_name,
            "tz": prof.get("tz", "Europe/Berlin"),
            "is_admin": prof.get("is_admin", False),
            "is_bot": prof.get("is_bot", False),
            "is_restricted": prof.get("is_restricted", False),
            "is_ultra_restricted": prof.get("is_ultra_restricted", False),
            "profile": profile,
        }
        # Slack sends is_email_confirmed on users.info; a profile given None here omits it (seen on
        # some guest and migrated accounts), so a test can check that absent is "not confirmed".
        confirmed = prof.get("is_email_confirmed", bool(prof.get("email")))
        if confirmed is not None:
            user["is_email_confirmed"] = confirmed
        return user

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user_id = str(params.get("user", ""))
        if user_id not in self._profiles:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": self._user_object(user_id)}

    def _users_lookup_by_email(self, params: dict[str, Any]) -> dict[str, Any]:
        email = str(params.get("email", "")).lower()
        for user_id, prof in self._profiles.items():
            if str(prof.get("email", "")).lower() == email and email:
                return {"ok": True, "user": self._user_object(user_id)}
        return {"ok": False, "error": "users_not_found"}

    def _usergroups_list(self, params: dict[str, Any]) -> dict[str, Any]:
        include_users = str(params.get("include_users", "")).lower() in ("1", "true")
        include_disabled = str(params.get("include_disabled", "")).lower() in ("1", "true")
        groups = []
        for group_id, g in self._usergroups.items():
            disabled = bool(g.get("date_delete"))
            if disabled and not include_disabled:
                continue
            users = list(g.get("users", []))
            group: dict[str, Any] = {
                "id": group_id,
                "team_id": self.team_id,
                "is_usergroup": True,
                "name": g.get("name", group_id),
                "description": g.get("description", ""),
                "handle": g.get("handle", group_id.lower()),
                "is_external": False,
                "date_create": 1446746793,
                "date_update": 1446746793,
                "date_delete": g.get("date_delete", 0),
                "auto_type": None,
                "created_by": "U0ADMIN",
                "updated_by": "U0ADMIN",
                "deleted_by": None,
                "prefs": {"channels": [], "groups": []},
                "user_count": str(len(users)),
            }
            if include_users:
                group["users"] = users
            groups.append(group)
        return {"ok": True, "usergroups": groups}

    def _conversations_open(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("channel"):
            return {"ok": True, "channel": {"id": str(params["channel"])}}
        users = [u for u in str(params.get("users", "")).split(",") if u]
        if not users:
            return {"ok": False, "error": "users_list_not_supplied"}
        return {"ok": True, "channel": {"id": self._dm_channel(users)}}

    def _views_open(self, params: dict[str, Any]) -> dict[str, Any]:
        if not params.get("trigger_id"):
            return {"ok": False, "error": "invalid_trigger_id"}
        view = params.get("view")
        if not isinstance(view, dict):
            return {"ok": False, "error": "invalid_arguments"}
        if view.get("blocks") is not None:
            errors = block_errors(view["blocks"], max_blocks=100)
            if errors:
                return {"ok": False, "error": "invalid_blocks", "errors": errors}
        self._view_seq += 1
        answered = {
            "id": f"V{self._view_seq:010d}",
            "team_id": self.team_id,
            "type": view.get("type", "modal"),
            "title": view.get("title"),
            "blocks": view.get("blocks", []),
            "private_metadata": view.get("private_metadata", ""),
            "callback_id": view.get("callback_id", ""),
            "state": {"values": {}},
            "hash": f"{self._ts_second}.{self._view_seq:08d}",
            "app_id": "A0TAUBOT",
            "bot_id": self.bot_id,
        }
        self._views.append(answered)
        return {"ok": True, "view": answered}


    def _views_publish(self, params: dict[str, Any]) -> dict[str, Any]:
        """`views.publish` (docs.slack.dev/reference/methods/views.publish): ``user_id`` and a
        ``view`` of type ``home`` (at most 100 blocks); an optional ``hash`` must be the one the
        last publish answered, else ``hash_conflict``. The answer is the view, as Slack keeps it."""
        user = str(params.get("user_id") or "")
        if not user:
            return {"ok": False, "error": "invalid_arguments"}
        view = params.get("view")
        if not isinstance(view, dict) or view.get("type") != "home":
            return {"ok": False, "error": "invalid_arguments"}
        errors = block_errors(view.get("blocks"), max_blocks=100)
        if errors:
            return {"ok": False, "error": "invalid_blocks", "errors": errors}
        previous = self._home.get(user)
        if params.get("hash") and previous is not None and params["hash"] != previous["hash"]:
            return {"ok": False, "error": "hash_conflict"}
        self._view_seq += 1
        answered = {
            "id": previous["id"] if previous else f"V{self._view_seq:010d}",
            "team_id": self.team_id, "type": "home", "blocks": view.get("blocks", []),
            "private_metadata": view.get("private_metadata", ""), "callback_id": view.get("callback_id", ""),
            "state": {"values": {}}, "hash": f"{self._ts_second}.{self._view_seq:08d}",
            "title": {"type": "plain_text", "text": "View Title"}, "clear_on_close": False,
            "notify_on_close": False, "close": None, "submit": None, "previous_view_id": None,
            "root_view_id": previous["id"] if previous else f"V{self._view_seq:010d}", "app_id": "A0TAUBOT",
            "external_id": "", "app_installed_team_id": self.team_id, "bot_id": self.bot_id,
        }
        self._home[user] = answered
        return {"ok": True, "view": answered}


def _text_len(obj: Any) -> int:
    return len(obj.get("text", "")) if isinstance(obj, dict) else 0


def block_errors(blocks: Any, max_blocks: int = MAX_BLOCKS) -> list[str]:
    """The Block Kit limit violations Slack would report (in its json-pointer form).

    Not a full schema check: only the limits our cards can plausibly exceed.
    """
    if not isinstance(blocks, list):
        return ["must be an array [json-pointer:/blocks]"]
    errors: list[str] = []
    if len(blocks) > max_blocks:
        errors.append(f"no more than {max_blocks} items allowed [json-pointer:/blocks]")
    for i, block in enumerate(blocks):
        where = f"/blocks/{i}"
        if not isinstance(block, dict) or "type" not in block:
            errors.append(f"missing required field: type [json-pointer:{where}]")
            continue
        kind = block["type"]
        if kind == "section":
            if _text_len(block.get("text")) > MAX_SECTION_TEXT:
                errors.append(
                    f"must be less than {MAX_SECTION_TEXT + 1} characters "
                    f"[json-pointer:{where}/text/text]"
                )
            fields = block.get("fields") or []
            if len(fields) > MAX_SECTION_FIELDS:
                errors.append(
                    f"no more than {MAX_SECTION_FIELDS} items allowed [json-pointer:{where}/fields]"
                )
            for j, fld in enumerate(fields):
                if _text_len(fld) > MAX_FIELD_TEXT:
                    errors.append(
                        f"must be less than {MAX_FIELD_TEXT + 1} characters "
                        f"[json-pointer:{where}/fields/{j}/text]"
                    )
            if isinstance(block.get("accessory"), dict):
                errors.extend(_element_errors(block["accessory"], f"{where}/accessory"))
        elif kind == "header" and _text_len(block.get("text")) > MAX_HEADER_TEXT:
            errors.append(
                f"must be less than {MAX_HEADER_TEXT + 1} characters "
                f"[json-pointer:{where}/text/text]"
            )
        elif kind in ("context", "actions"):
            elements = block.get("elements") or []
            limit = MAX_CONTEXT_ELEMENTS if kind == "context" else MAX_ACTIONS_ELEMENTS
            if len(elements) > limit:
                errors.append(f"no more than {limit} items allowed [json-pointer:{where}/elements]")
            seen: set[str] = set()
            for j, element in enumerate(elements):
                if not isinstance(element, dict):
                    continue
                errors.extend(_element_errors(element, f"{where}/elements/{j}"))
                action_id = element.get("action_id")
                if action_id is not None:
                    if action_id in seen:
                        errors.append(
                            f"duplicate action_id [json-pointer:{where}/elements/{j}/action_id]"
                        )
                    seen.add(action_id)
    return errors


def _element_errors(element: dict[str, Any], where: str) -> list[str]:
    errors: list[str] = []
    if element.get("type") == "button":
        if _text_len(element.get("text")) > MAX_BUTTON_TEXT:
            errors.append(
                f"must be less than {MAX_BUTTON_TEXT + 1} characters "
                f"[json-pointer:{where}/text/text]"
            )
        if len(str(element.get("value", ""))) > MAX_BUTTON_VALUE:
            errors.append(
                f"must be less than {MAX_BUTTON_VALUE + 1} characters [json-pointer:{where}/value]"
            )
    if len(str(element.get("action_id", ""))) > MAX_ACTION_ID:
        errors.append(
            f"must be less than {MAX_ACTION_ID + 1} characters [json-pointer:{where}/action_id]"
        )
    return errors


@contextmanager
def running_fake_slack(
    *,
    profiles: Mapping[str, Mapping[str, Any]] | None = None,
    usergroups: Mapping[str, Mapping[str, Any]] | None = None,
    token: str | None = None,
    team_domain: str = "taugrid",
    bot_user_id: str = "U0TAUBOT",
    ts_clock: Callable[[], float] | None = None,
) -> Iterator[FakeSlack]:
    """Run a fake Slack for the block; yields it started, with ``base_url`` set.

    ``profiles`` maps user id → ``{email, real_name, name, deleted, is_bot, …}``;
    ``usergroups`` maps group id → ``{handle, name, users: [user ids]}``;
    ``token``, when given, is the only bot token accepted (else any ``xoxb-…``).
    """
    fake = FakeSlack(
        profiles=profiles,
        usergroups=usergroups,
        token=token,
        team_domain=team_domain,
        bot_user_id=bot_user_id,
        ts_clock=ts_clock,
    )
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
