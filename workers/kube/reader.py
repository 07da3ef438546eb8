"""Raw, read-only Kubernetes reads that turn the failures a user must see into values.

Why raw JSON and not kubernetes_asyncio's typed models: the models validate
required fields on deserialisation (a Pod without ``spec.containers`` raises),
rename fields to snake_case, and drop unknown ones, while a run snapshot must
be exactly ``kubectl get -o json`` output. So every read goes through
``ApiClient.call_api(..., _preload_content=False)`` and we parse the bytes.

Why error values: a 403 must reach the user as *permission denied*, never as
"not found" or as an empty list, and one unreachable resource must not sink a
whole diagnosis. ``ReadError`` carries which of the three outcomes happened
(forbidden / not_found / unavailable); requests that are malformed — our bug,
not the cluster's state — raise ``KubeRequestError`` instead.

Every call has its own timeout (``timeout`` seconds, covering connect, headers
and body) and counts in ``requests_made`` so tests and the collector can hold a
request budget.
"""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
from pydantic import BaseModel, ConfigDict

from workers.kube.sdk import ApiClient
from workers.plumbing.metrics import KUBE_REQUESTS

ErrorKind = Literal["forbidden", "not_found", "unavailable"]
QueryValue = str | int | bool

_SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
# Statuses that mean our request was wrong, not that the cluster said no.
_PROGRAM_ERRORS = frozenset({400, 405, 409, 415, 422})


class ReadError(BaseModel):
    """Why a read produced no data, in terms a user can act on."""

    model_config = ConfigDict(frozen=True)

    kind: ErrorKind
    verb: str
    resource: str
    detail: str = ""
    status: int | None = None
    path: str = ""
    message: str = ""  # the API server's own words (Status.message), for evidence

    def describe(self) -> str:
        """Short text for a card: ``permission denied (list pods)``, ``not found``, …"""
        if self.kind == "forbidden":
            return f"permission denied ({self.verb} {self.resource})"
        if self.kind == "not_found":
            return "not found"
        return f"unavailable ({self.detail})" if self.detail else "unavailable"


class DryRunAnswer(BaseModel):
    """The API server's answer to a dry-run create: the object it would store, or its Status."""

    model_config = ConfigDict(frozen=True)

    status: int
    body: dict[str, Any]

    @property
    def accepted(self) -> bool:
        return 200 <= self.status < 300


class KubeRequestError(Exception):
    """The API server rejected the request itself (bad selector, bad path): a bug."""

    def __init__(self, status: int, path: str, message: str) -> None:
        super().__init__(f"HTTP {status} for {path}: {message}")
        self.status = status
        self.path = path
        self.message = message


def resource_path(group: str, version: str, plural: str, namespace: str | None = None,
                  name: str | None = None, subresource: str | None = None) -> str:
    """The URL path of a collection, object or subresource.

    ``group`` is "" for the core API (``/api/v1``). ``subresource`` may contain
    slashes (``proxy/metrics``); each segment is escaped separately and a
    trailing slash survives (the Ray dashboard distinguishes ``/api/jobs/``). A ``:`` in
    ``name`` is kept, because ``pods/{name}:{port}/proxy`` needs it.
    """
    if not version or not plural:
        raise ValueError("version and plural are required")
    if subresource and not name:
        raise ValueError("a subresource needs an object name")
    for part, label in ((namespace, "namespace"), (name, "name")):
        if part is not None and (not part or "/" in part):
            raise ValueError(f"invalid {label} {part!r}")
    segments = ["api", version] if not group else ["apis", group, version]
    if namespace is not None:
        segments += ["namespaces", namespace]
    segments.append(plural)
    if name is not None:
        segments.append(name)
    if subresource:
        segments += subresource.lstrip("/").split("/")  # a trailing "/" is kept: proxies care
    return "/" + "/".join(quote(s, safe=":") for s in segments)


def proxy_path(plural: str, namespace: str, name: str, port: int | str | None,
               path: str) -> str:
    """Path of ``pods|services/{name}[:{port}]/proxy/{path}`` (dcgm-exporter, Ray dashboard)."""
    target = f"{name}:{port}" if port is not None else name
    return resource_path("", "v1", plural, namespace, target, "proxy/" + path.lstrip("/"))


def _resource_of(path: str) -> str:
    """``pods``, ``pods/log``, ``workloads``… from an API path, for error messages."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return path
    plural = rest[0]
    return f"{plural}/{rest[2]}" if len(rest) > 2 else plural


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


class KubeReader:
    """Read-only access to one cluster through one (possibly impersonating) ApiClient."""

    def __init__(self, api_client: ApiClient, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout
        self.requests_made = 0

    async def _call(self, method: str, path: str, verb: str,
                    query: list[tuple[str, QueryValue]] | None = None,
                    body: Mapping[str, Any] | None = None,
                    accept: str = "application/json",
                    max_bytes: int | None = None) -> tuple[int, bytes] | ReadError:
        """One HTTP exchange; transport failures become ``unavailable`` values. With
        ``max_bytes``, at most that much of the body is read (the rest is never downloaded)."""
        self.requests_made += 1
        resource = _resource_of(path)
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            async with asyncio.timeout(self.timeout):
                response = await self.api_client.call_api(
                    path, method,
                    query_params=[(k, _query_text(v)) for k, v in query or []],
                    header_params=headers,
                    body=dict(body) if body is not None else None,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=self.timeout,
                )
                try:
                    data = await (response.read() if max_bytes is None
                                  else _read_at_most(response.content, max_bytes))
                finally:
                    response.release()
        except TimeoutError:
            KUBE_REQUESTS.labels(verb, resource, "timeout").inc()
            return ReadError(kind="unavailable", verb=verb, resource=resource, path=path,
                             detail=f"timeout after {_format_seconds(self.timeout)}")
        except aiohttp.ClientConnectorError as err:
            KUBE_REQUESTS.labels(verb, resource, "unreachable").inc()
            refused = getattr(err.os_error, "errno", None) == errno.ECONNREFUSED
            detail = "connection refused" if refused else f"cannot connect: {err.os_error}"
            return ReadError(kind="unavailable", verb=verb, resource=resource, path=path,
                             detail=detail)
        except aiohttp.ServerDisconnectedError:
            KUBE_REQUESTS.labels(verb, resource, "disconnected").inc()
            return ReadError(kind="unavailable", verb=verb, resource=resource, path=path,
                             detail="server disconnected")
        except aiohttp.ClientError as err:
            KUBE_REQUESTS.labels(verb, resource, "error").inc()
            return ReadError(kind="unavailable", verb=verb, resource=resource, path=path,
                             detail=f"connection error: {type(err).__name__}")
        KUBE_REQUESTS.labels(verb, resource, str(response.status)).inc()
        return response.status, data

    def _error_for(self, status: int, data: bytes, path: str, verb: str,
                   *, program_errors: bool = True) -> ReadError:
        """Map a non-2xx answer to a ReadError (or raise when the request was our bug)."""
        message = _status_message(data)
        resource = _resource_of(path)
        if status in (403, 404):
            return ReadError(kind="forbidden" if status == 403 else "not_found", verb=verb,
                             resource=resource, status=status, path=path, detail=message,
                             message=message)
        if program_errors and status in _PROGRAM_ERRORS:
            raise KubeRequestError(status, path, message)
        detail = f"HTTP {status}"
        if status == 401:
            detail += " unauthorized"
        elif status < 500 and message:
            detail += f": {message}"
        return ReadError(kind="unavailable", verb=verb, resource=resource, status=status,
                         path=path, detail=detail, message=message)

    async def _json(self, method: str, path: str, verb: str,
                    query: list[tuple[str, QueryValue]] | None = None,
                    body: Mapping[str, Any] | None = None) -> dict[str, Any] | ReadError:
        result = await self._call(method, path, verb, query, body)
        if isinstance(result, ReadError):
            return result
        status, data = result
        if not 200 <= status < 300:
            return self._error_for(status, data, path, verb)
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            return ReadError(kind="unavailable", verb=verb, resource=_resource_of(path),
                             status=status, path=path, detail="malformed response")
        return parsed

    async def get(self, path: str) -> dict[str, Any] | ReadError:
        """One object (or any JSON document, e.g. ``/version``)."""
        return await self._json("GET", path, "get")

    async def list(self, path: str, *, label_selector: str | None = None,
                   field_selector: str | None = None,
                   limit: int = 500) -> list[dict[str, Any]] | ReadError:
        """All items of a collection, following ``continue`` tokens page by page.

        Items get ``apiVersion``/``kind`` filled in from the list (the API server
        omits them on built-in types; kubectl adds them), so the result has the
        shape of ``kubectl get -o json`` items. An error on any page is the
        result: a partial list would look like "fewer pods", which is a lie.
        """
        got = await self._paged(path, label_selector, field_selector, limit)
        return got if isinstance(got, ReadError) else got[0]

    async def _paged(self, path: str, label_selector: str | None, field_selector: str | None,
                     limit: int) -> tuple[list[dict[str, Any]], str] | ReadError:
        items: list[dict[str, Any]] = []
        token: str | None = None
        seen_tokens: set[str] = set()
        version = ""
        while True:
            query: list[tuple[str, QueryValue]] = []
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if limit:
                query.append(("limit", limit))
            if token:
                query.append(("continue", token))
            page = await self._json("GET", path, "list", query)
            if isinstance(page, ReadError):
                return page
            version = version or str((page.get("metadata") or {}).get("resourceVersion") or "")
            api_version = page.get("apiVersion", "")
            list_kind = page.get("kind", "")
            item_kind = list_kind[:-4] if list_kind.endswith("List") else ""
            for item in page.get("items") or []:
                if api_version:
                    item.setdefault("apiVersion", api_version)
                if item_kind:
                    item.setdefault("kind", item_kind)
                items.append(item)
            token = (page.get("metadata") or {}).get("continue") or None
            if not token:
                return items, version
            if token in seen_tokens:
                raise KubeRequestError(200, path, "the server repeated a continue token")
            seen_tokens.add(token)

    async def list_versioned(self, path: str, *, label_selector: str | None = None,
                             field_selector: str | None = None, limit: int = 500
                             ) -> tuple[list[dict[str, Any]], str] | ReadError:
        """Like `list`, plus the list's resourceVersion: where a WATCH resumes without a gap."""
        return await self._paged(path, label_selector, field_selector, limit)

    async def watch(self, path: str, *, label_selector: str | None = None, field_selector: str | None = None,
                    resource_version: str = "", timeout: float = 60.0,
                    bookmarks: bool = False) -> AsyncIterator[dict[str, Any]]:
        """WATCH events (`{"type", "object"}`) from ``resource_version`` until the server ends the
        stream (``timeoutSeconds``). A non-200 answer is one `ERROR` event carrying its Status, as
        a real watch reports `410 Gone` — the caller re-LISTs then. With ``bookmarks`` the server
        may send `BOOKMARK` events (only a resourceVersion) so a quiet stream resumes without 410."""
        self.requests_made += 1
        query: list[tuple[str, str]] = [("watch", "true"), ("timeoutSeconds", str(int(timeout)))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        response = await self.api_client.call_api(
            path, "GET", query_params=query, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout + 10)
        KUBE_REQUESTS.labels("watch", _resource_of(path), str(response.status)).inc()
        try:
            if response.status != 200:
                data = await response.read()
                yield {"type": "ERROR", "object": {"kind": "Status", "code": response.status,
                                                   "message": _status_message(data)}}
                return
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)
        finally:
            response.release()

    async def text(self, path: str, query: Mapping[str, QueryValue] | None = None, *,
                   max_bytes: int | None = None) -> str | ReadError:
        """A text body: ``pods/log`` or a ``pods|services/proxy`` answer, at most ``max_bytes``
        of it when given (a log read is bounded in bytes as well as lines, SPEC §11).

        Any non-2xx is a value here, including 400: for logs it means "container
        not started yet", a state of the cluster rather than a bug of ours.
        """
        result = await self._call("GET", path, "get", list((query or {}).items()),
                                  accept="*/*", max_bytes=max_bytes)
        if isinstance(result, ReadError):
            return result
        status, data = result
        if not 200 <= status < 300:
            return self._error_for(status, data, path, "get", program_errors=False)
        return data.decode("utf-8", errors="replace")

    async def write(self, method: str, path: str, body: Mapping[str, Any] | None = None
                    ) -> dict[str, Any] | ReadError:
        """A write (POST create, DELETE) under the same client — only `cluster validate nodes`
        writes, and only as the caller. Every non-2xx is a value: the caller's RBAC answers."""
        verb = {"POST": "create", "DELETE": "delete"}[method]
        result = await self._call(method, path, verb, None, body)
        if isinstance(result, ReadError):
            return result
        status, data = result
        if not 200 <= status < 300:
            return self._error_for(status, data, path, verb, program_errors=False)
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        return parsed if isinstance(parsed, dict) else {}

    async def dry_run_create(self, path: str, body: Mapping[str, Any]) -> DryRunAnswer | ReadError:
        """POST ``body`` to the collection at ``path`` with ``dryRun=All``: the API server runs
        authentication, RBAC, schema validation (``fieldValidation=Strict``: unknown fields are
        errors) and every admission webhook, and stores nothing. The only write `/tau validate`
        makes; ``dryRun`` is set here, never by the caller, so it cannot be forgotten. Every HTTP
        answer is a value with the server's Status (403, 422 ``details.causes``, a webhook denial)."""
        query: list[tuple[str, QueryValue]] = [("dryRun", "All"), ("fieldValidation", "Strict")]
        result = await self._call("POST", path, "create", query, body)
        if isinstance(result, ReadError):
            return result
        status, data = result
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            parsed = {"message": data[:200].decode("utf-8", errors="replace").strip()}
        return DryRunAnswer(status=status, body=parsed)

    async def access_review(self, verb: str, resource: str, group: str = "",
                            namespace: str | None = None, subresource: str | None = None,
                            name: str | None = None) -> bool | ReadError:
        """Whether the caller may ``verb`` the resource (SelfSubjectAccessReview)."""
        attributes: dict[str, str] = {"verb": verb, "resource": resource, "group": group}
        for key, value in (("namespace", namespace), ("subresource", subresource),
                           ("name", name)):
            if value:
                attributes[key] = value
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        result = await self._call("POST", _SSAR_PATH, "create", None, body)
        if isinstance(result, ReadError):
            return result
        status, data = result
        if not 200 <= status < 300:
            return self._error_for(status, data, _SSAR_PATH, "create")
        try:
            allowed = json.loads(data)["status"]["allowed"]
        except (ValueError, KeyError, TypeError):
            return ReadError(kind="unavailable", verb="create",
                             resource="selfsubjectaccessreviews", status=status,
                             path=_SSAR_PATH, detail="malformed response")
        return bool(allowed)


def _query_text(value: QueryValue) -> str:
    """Query values as the API server expects them (``true``, not Python's ``True``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


async def _read_at_most(content: aiohttp.StreamReader, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await content.read(min(65536, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _status_message(data: bytes) -> str:
    """The ``message`` of a Status body, else the start of the raw body — or, for a Python
    traceback (the Ray dashboard answers its 500s with one), its last line: the exception."""
    try:
        parsed = json.loads(data)
    except ValueError:
        text = data.decode("utf-8", errors="replace").strip()
        if text.startswith("Traceback (most recent call last):"):
            return text.splitlines()[-1].strip()[:200]
        return text[:200].strip()
    if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
        return parsed["message"]
    return ""


__all__ = [
    "DryRunAnswer",
    "KubeReader",
    "KubeRequestError",
    "ReadError",
    "proxy_path",
    "resource_path",
]
