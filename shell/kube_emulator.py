"""A local Kubernetes API server for tests, speaking real HTTP on aiohttp.

Why our own and not kmock (0.8): kmock ignores ``labelSelector`` and
``fieldSelector`` (it returns everything, so a test could never catch a
collector that forgets its selector), treats only ``watch=true`` as a watch
while kubernetes_asyncio sends ``watch=True`` (so a watch silently becomes a
list), ignores ``timeoutSeconds``, and 404s an empty list until the resource is
declared. Each of those hides exactly the bugs taubot's collectors can have.

What it serves: the plain objects a test seeds (``kubectl get -o json`` shapes)
under ``/api/v1`` and ``/apis/{group}/{version}``, namespaced and cluster-wide,
with selectors, pagination, watch, ``pods/log``, ``pods|services/proxy``,
SelfSubjectAccessReview, impersonation-aware 403 rules, fault injection and
latency. Every request is recorded (path, query, headers as a multidict,
impersonated identity) so a test asserts on what the code under test *sent*.

Behaviour copied from a real API server on purpose, because code that works
here must work against a cluster:

* List items of built-in groups carry no ``kind``/``apiVersion`` (the API
  server omits TypeMeta on items; kubectl fills them in when printing). CRD list
  items keep theirs. Single GETs and watch event objects always carry them.
* An object of a group is served under every version of that group that the
  emulator knows (``apiVersion`` rewritten), like a conversion webhook or the
  built-in conversion would do; a version the group does not serve is 404.
* core/v1 ``Event`` and ``events.k8s.io/v1`` ``Event`` are two views of one
  store: a seeded core Event is also listed under events.k8s.io (converted,
  ``involvedObject`` → ``regarding``, ``message`` → ``note``) and the reverse.
* Unsupported field selectors are 400, as on a real server.
* A forbid rule without a subresource does not cover subresources (RBAC on
  ``pods`` does not reach ``pods/log``); use ``subresource="*"`` for all.
* Cost as a real server's, so a client at scale meets the same server: a
  namespaced LIST reads only its namespace (etcd's and the watch cache's
  per-namespace key prefix), a WATCH from a resourceVersion finds its start in
  the change history by binary search (the watch cache's `sort.Search`), and
  the listen backlog is the kernel's `somaxconn` as Go's `net.Listen` asks
  (aiohttp's default of 128 dropped connections at 1,600 streams).

Two ways to run it: ``async with KubeEmulator(objs) as emu`` (or ``await
emu.start()``) inside a test's event loop, or ``with running_emulator(objs) as
emu`` from synchronous code (rq jobs run their own loops), which hosts the
server loop in a daemon thread; mutation methods are thread-safe in both modes.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import copy
import functools
import json
import re
import ssl
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, MultiDict

_KUBELET_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) ")
BOT_USER = "system:serviceaccount:taubot:taubot"
BOT_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:taubot", "system:authenticated")

# Kind -> plural, for the kinds taubot reads. Anything else: lower(kind) + "s".
KIND_PLURALS: dict[str, str] = {
    "Pod": "pods",
    "Event": "events",
    "Job": "jobs",
    "Workload": "workloads",
    "LocalQueue": "localqueues",
    "ClusterQueue": "clusterqueues",
    "ResourceFlavor": "resourceflavors",
    "Topology": "topologies",
    "RayJob": "rayjobs",
    "RayCluster": "rayclusters",
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "ResourceSlice": "resourceslices",
    "DeviceClass": "deviceclasses",
    "Node": "nodes",
    "Service": "services",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "TauWorkspace": "tauworkspaces",
    "TauCluster": "tauclusters",
    "Namespace": "namespaces",
    "ConfigMap": "configmaps",
}
PLURAL_KINDS: dict[str, str] = {plural: kind for kind, plural in KIND_PLURALS.items()}

# Groups the emulator serves even with no objects, and the versions of each.
# The first version listed is the one stored objects are normalised to.
KNOWN_GROUPS: dict[str, tuple[str, ...]] = {
    "": ("v1",),
    "batch": ("v1",),
    "apps": ("v1",),
    "events.k8s.io": ("v1",),
    "authorization.k8s.io": ("v1",),
    "kueue.x-k8s.io": ("v1beta2", "v1beta1"),
    "ray.io": ("v1", "v1alpha1"),
    "resource.k8s.io": ("v1", "v1beta2", "v1beta1"),
    "taugrid.io": ("v1alpha1",),
    # Kueue's on-demand visibility API (an aggregated API served by kueue-controller-manager,
    # v0.9+); `serve_versions(VISIBILITY_GROUP, [])` is a Kueue without it (404 for the group).
    "visibility.kueue.x-k8s.io": ("v1beta1",),
}
KNOWN_RESOURCES: dict[str, frozenset[str]] = {
    "": frozenset(
        {"pods", "events", "nodes", "services", "persistentvolumeclaims", "namespaces",
         "configmaps"}
    ),
    "batch": frozenset({"jobs"}),
    "apps": frozenset({"deployments", "daemonsets", "statefulsets", "replicasets"}),
    "events.k8s.io": frozenset({"events"}),
    "authorization.k8s.io": frozenset({"selfsubjectaccessreviews"}),
    "kueue.x-k8s.io": frozenset(
        {"workloads", "localqueues", "clusterqueues", "resourceflavors", "admissionchecks", "topologies"}
    ),
    "ray.io": frozenset({"rayjobs", "rayclusters", "rayservices"}),
    "resource.k8s.io": frozenset(
        {"resourceclaims", "resourceclaimtemplates", "resourceslices", "deviceclasses"}
    ),
    "taugrid.io": frozenset({"tauworkspaces", "tauclusters"}),
    "visibility.kueue.x-k8s.io": frozenset({"localqueues", "clusterqueues"}),
}
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
# Resources a real server lists as cluster-scoped (`namespaced: false` in its discovery).
CLUSTER_SCOPED = frozenset(
    {"nodes", "namespaces", "persistentvolumes", "clusterqueues", "resourceflavors", "admissionchecks",
     "topologies", "tauworkspaces", "tauclusters", "resourceslices", "deviceclasses",
     "selfsubjectaccessreviews"}
)
# Groups whose list items carry no TypeMeta on a real server (built-in types).
BUILTIN_GROUPS = frozenset(
    {"", "batch", "apps", "events.k8s.io", "authorization.k8s.io", "resource.k8s.io"}
)

# Field selectors a real server accepts, per (group, plural); metadata.* always.
_COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_EVENT_CORE_FIELDS = frozenset(
    {f"involvedObject.{f}" for f in
     ("kind", "name", "namespace", "uid", "apiVersion", "resourceVersion", "fieldPath")}
    | {"reason", "type", "source", "reportingComponent"}
)
_EVENT_NEW_FIELDS = frozenset(
    {f"regarding.{f}" for f in
     ("kind", "name", "namespace", "uid", "apiVersion", "resourceVersion", "fieldPath")}
    | {"reason", "type", "reportingController"}
)
SUPPORTED_FIELDS: dict[tuple[str, str], frozenset[str]] = {
    ("", "pods"): frozenset(
        {"spec.nodeName", "spec.schedulerName", "spec.serviceAccountName", "status.phase",
         "status.podIP", "status.nominatedNodeName", "spec.restartPolicy"}
    ),
    ("", "events"): _EVENT_CORE_FIELDS,
    ("events.k8s.io", "events"): _EVENT_NEW_FIELDS,
    ("", "nodes"): frozenset({"spec.unschedulable"}),
    ("batch", "jobs"): frozenset({"status.successful"}),
    # Kueue's Workload CRD declares one selectable field (`+kubebuilder:selectablefield:JSONPath=
    # .status.admission.clusterQueue`, apis/kueue/v1beta2/workload_types.go): the Workloads holding
    # a ClusterQueue's quota, listed by the API server itself.
    ("kueue.x-k8s.io", "workloads"): frozenset({"status.admission.clusterQueue"}),
}

DEFAULT_WATCH_TIMEOUT = 5.0
# Go's net.Listen (kube-apiserver) asks the kernel for its largest accept queue: somaxconn.
LISTEN_BACKLOG = 4096
DEFAULT_BOOKMARK_INTERVAL = 60.0
# kube-apiserver compresses an answer of at least this size for a client that accepts gzip
# (k8s.io/apiserver pkg/endpoints/handlers/responsewriters: defaultGzipThresholdBytes).
GZIP_THRESHOLD_BYTES = 128 * 1024

# GET /version of a v1.34.1 API server (every field is required by VersionApi's model).
VERSION_INFO = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.1",
    "gitCommit": "93248f9ae092f571eb870b7664c534bfc7d00f03",
    "gitTreeState": "clean",
    "buildDate": "2025-09-09T19:43:15Z",
    "goVersion": "go1.24.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 422: "Invalid",
    429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout",
}


@dataclass(frozen=True)
class CallerIdentity:
    """Who a request acts as: the impersonated user, else the bot's service account."""

    user: str
    groups: tuple[str, ...]


@dataclass
class RecordedRequest:
    """One request as the emulator received it; tests assert on these."""

    method: str
    path: str
    query: MultiDict[str]
    headers: CIMultiDict[str]
    identity: CallerIdentity
    body: Any = None
    gzipped: bool = False  # the answer went gzip-compressed (see GZIP_THRESHOLD_BYTES)
    # 1 + the deepest round among requests answered before this one arrived: the round it can at
    # most belong to (a request can only depend on answers it has seen). Exact with some latency.
    round: int = 0
    # The client's (address, port): one per TCP connection, so distinct peers are connections opened.
    peer: tuple[str, int] | None = None

    def header_values(self, name: str) -> list[str]:
        """All values of a (possibly repeated) header, in order."""
        return self.headers.getall(name, [])


@dataclass(frozen=True)
class ForbidRule:
    """A permission the caller lacks; see ``KubeEmulator.forbid``."""

    verb: str
    resource: str
    user: str | None = None
    group: str | None = None
    namespace: str | None = None
    subresource: str | None = None
    cluster_scope: bool = False

    def matches(
        self, verb: str, resource: str, subresource: str | None, namespace: str | None,
        caller: CallerIdentity,
    ) -> bool:
        """True when this rule denies the request described by the arguments."""
        if self.verb not in ("*", verb) or self.resource not in ("*", resource):
            return False
        if self.subresource != "*" and (self.subresource or None) != (subresource or None):
            return False
        if self.namespace is not None and self.namespace != namespace:
            return False
        if self.cluster_scope and namespace is not None:
            return False
        if self.user is not None and self.user != caller.user:
            return False
        groups = (*caller.groups, "system:authenticated")
        return self.group is None or self.group in groups


@dataclass
class _Fault:
    resource: str
    status: int
    remaining: int | None


@dataclass(frozen=True)
class _Key:
    group: str
    plural: str
    namespace: str  # "" for cluster-scoped
    name: str


@dataclass
class _Change:
    rv: int
    kind: str  # ADDED / MODIFIED / DELETED
    key: _Key
    old: dict[str, Any] | None
    new: dict[str, Any] | None


@dataclass
class _Watcher:
    group: str
    plural: str
    namespace: str | None
    label_selector: str | None
    field_selector: str | None
    queue: asyncio.Queue[_Change | None] = field(default_factory=asyncio.Queue)


@dataclass(frozen=True)
class _Target:
    """A parsed API path."""

    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None  # "log", "proxy", "status", ...
    rest: str  # what follows the subresource (the proxied path)


class _HTTPStatus(Exception):
    """Raised inside handlers to answer with a Kubernetes Status body."""

    def __init__(self, code: int, message: str, *, name: str = "", kind: str = "",
                 group: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = {k: v for k, v in (("name", name), ("group", group), ("kind", kind)) if v}


def status_body(code: int, message: str, details: Mapping[str, str] | None = None) -> dict:
    """A ``Status`` object exactly as the API server returns it for failures."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": _REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details:
        body["details"] = dict(details)
    return body


def invalid_status(kind: str, group: str, name: str, causes: Iterable[tuple[str, str, str]]) -> dict:
    """The 422 the API server returns for a schema error; ``causes`` are (reason, field, message),
    e.g. ("FieldValueRequired", "spec.template.spec.containers[0].image", "Required value")."""
    listed = [{"reason": r, "message": m, "field": f} for r, f, m in causes]
    qualified = f"{kind}.{group}" if group else kind
    text = ", ".join(f"{c['field']}: {c['message']}" for c in listed)
    body = status_body(422, f'{qualified} "{name}" is invalid: {text}')
    body["details"] = {"name": name, "group": group, "kind": kind, "causes": listed}
    return body


def webhook_denial(webhook: str, message: str) -> dict:
    """A validating webhook's refusal as the API server relays it (controller-runtime's
    `admission.Denied`: code 403, reason Forbidden)."""
    return status_body(403, f'admission webhook "{webhook}" denied the request: {message}')


def strict_decoding_error(paths: Iterable[str]) -> dict:
    """`fieldValidation=Strict` and unknown fields: 400 BadRequest."""
    fields = ", ".join(f'unknown field "{p}"' for p in paths)
    return status_body(400, f"strict decoding error: {fields}")


def plural_for(kind_or_plural: str) -> str:
    """Resource plural for a Kind ("Pod") or a plural ("pods")."""
    if kind_or_plural in KIND_PLURALS:
        return KIND_PLURALS[kind_or_plural]
    if kind_or_plural.islower():
        return kind_or_plural
    return kind_or_plural.lower() + "s"


def _kind_for(plural: str) -> str:
    return PLURAL_KINDS.get(plural, plural[:-1].capitalize() if plural.endswith("s") else plural)


def _split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


# ---------------------------------------------------------------- selectors

_SET_TERM = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\((.*)\)\s*$")
_EQ_TERM = re.compile(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)\s*$")
_EXISTS_TERM = re.compile(r"^\s*(!?)\s*([^\s!=()]+)\s*$")


def _split_terms(selector: str) -> list[str]:
    """Split on commas that are not inside ``( )`` (set-based values)."""
    terms, depth, current = [], 0, []
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


@functools.lru_cache(maxsize=4096)
def _parse_selector(selector: str) -> tuple[tuple[str, str, Any], ...]:
    """A label selector's terms as (op, key, value), parsed once per selector string: a LIST
    by label over thousands of objects asks the same question of each (bench_watch: the
    emulator spent a fifth of its time re-parsing one selector per object)."""
    terms: list[tuple[str, str, Any]] = []
    for term in _split_terms(selector):
        if m := _SET_TERM.match(term):
            key, op, raw = m.groups()
            terms.append((op, key, frozenset(v.strip() for v in raw.split(",") if v.strip())))
        elif m := _EQ_TERM.match(term):
            key, op, value = m.groups()
            terms.append(("!=" if op == "!=" else "=", key, value))
        elif m := _EXISTS_TERM.match(term):
            negate, key = m.groups()
            terms.append(("!exists" if negate else "exists", key, None))
        else:
            raise ValueError(f"unable to parse requirement: {term!r}")
    return tuple(terms)


def label_selector_matches(selector: str | None, labels: Mapping[str, str]) -> bool:
    """Evaluate a Kubernetes label selector string; raises ValueError if malformed."""
    if not selector:
        return True
    for op, key, value in _parse_selector(selector):
        if op == "=":
            if labels.get(key) != value:
                return False
        elif op == "!=":
            if labels.get(key) == value:
                return False
        elif op == "in":
            if labels.get(key) not in value:
                return False
        elif op == "notin":
            if key in labels and labels[key] in value:
                return False
        elif (key in labels) != (op == "exists"):
            return False
    return True


def _dotted(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _parse_field_selector(selector: str | None) -> list[tuple[str, str, str]]:
    if not selector:
        return []
    out = []
    for term in selector.split(","):
        m = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise ValueError(f"invalid field selector: {term!r}")
        out.append((m.group(1), m.group(2), m.group(3)))
    return out


def field_selector_matches(terms: list[tuple[str, str, str]], obj: Mapping[str, Any]) -> bool:
    """Evaluate parsed field selector terms against an object."""
    for path, op, value in terms:
        actual = _dotted(obj, path)
        if (actual == value) != (op != "!="):
            return False
    return True


# ---------------------------------------------------------------- events views

_EVENT_RENAMES = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("source", "deprecatedSource"),
)


def _convert_event(obj: dict[str, Any], to_group: str) -> dict[str, Any]:
    """Show a stored Event through the other Events API, as the API server does."""
    out = copy.deepcopy(obj)
    pairs = _EVENT_RENAMES if to_group == "events.k8s.io" else [(b, a) for a, b in _EVENT_RENAMES]
    for old, new in pairs:
        if old in out:
            out[new] = out.pop(old)
    out["apiVersion"] = "events.k8s.io/v1" if to_group == "events.k8s.io" else "v1"
    return out


# ---------------------------------------------------------------- the emulator


def _kubelet_log_refusal(pod: Mapping[str, Any], container: str) -> str | None:
    """Why the kubelet refuses a container's current log, or None when it has one: its
    `validateContainerLogStatus` (pkg/kubelet/kubelet_pods.go) answers a container that never ran
    with "waiting to start", naming the image-pull reasons in words. A pod with no node gets an
    empty log from the API server itself (no location to stream from), so it is not refused here."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return None
    name = (pod.get("metadata") or {}).get("name", "")
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    status = next((s for s in statuses if s.get("name") == container), None)
    if status is None:
        return f'container "{container}" in pod "{name}" is waiting to start - no logs yet'
    state, last = status.get("state") or {}, status.get("lastState") or {}
    if state.get("running") or state.get("terminated") or last.get("terminated"):
        return None
    reason = (state.get("waiting") or {}).get("reason", "")
    words = {"ErrImagePull": "image can't be pulled", "ImagePullBackOff": "trying and failing to pull image"}
    return f'container "{container}" in pod "{name}" is waiting to start: {words.get(reason, reason)}'


class KubeEmulator:
    """An in-process Kubernetes API server; see the module docstring.

    ``objects`` is a list of objects or a kubectl ``List``. ``pod_logs`` maps
    ``(namespace, pod, container or None)`` to log text.
    """

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]] | Mapping[str, Any] = (),
        *,
        latency: float = 0.0,
        pod_logs: Mapping[tuple[str, str, str | None], str] | None = None,
        watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
        ssl_context: ssl.SSLContext | None = None,
        bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL,
    ) -> None:
        self.latency = latency
        # With `allowWatchBookmarks=true`, a quiet WATCH gets a BOOKMARK (only a resourceVersion)
        # this often; kube-apiserver sends one about every minute (and at the stream's end).
        self.bookmark_interval = bookmark_interval
        self.ssl_context = ssl_context  # serve https (a benchmark's "TLS with a named CA")
        self.watch_timeout = watch_timeout
        self.pod_logs: dict[tuple[str, str, str | None], str] = dict(pod_logs or {})
        # The previous (terminated) instance's log of a container, as `kubectl logs --previous`.
        self.previous_logs: dict[tuple[str, str, str], str] = {}
        # Opt-in (the demo cluster): a scheduled pod's container that never started answers as the
        # kubelet does (`_kubelet_log_refusal`) instead of with an empty log.
        self.kubelet_log_states = False
        self.requests: list[RecordedRequest] = []
        self.base_url = ""
        self._lock = threading.RLock()
        self._store: dict[_Key, dict[str, Any]] = {}
        # (group, plural, namespace) → that scope's keys: a namespaced LIST reads only its own.
        self._scopes: dict[tuple[str, str, str], set[_Key]] = {}
        self._changes: list[_Change] = []
        self._rv = 0
        self._groups: dict[str, list[str]] = {g: list(v) for g, v in KNOWN_GROUPS.items()}
        self._resources: dict[str, set[str]] = {g: set(r) for g, r in KNOWN_RESOURCES.items()}
        self._rules: list[ForbidRule] = []
        self._faults: list[_Fault] = []
        # (plural or "*", hook): a hook sees a created object and its caller and returns None or the
        # Status body of a refusal (see `invalid_status`, `webhook_denial`), like validation and
        # admission webhooks of a real API server; they answer dry runs and real creates alike.
        self._admission: list[tuple[str, Callable[[dict[str, Any], CallerIdentity], dict | None]]] = []
        self._proxies: dict[tuple[str, str, str, str | None, str], tuple[bytes, int, str]] = {}
        # (plural, namespace, name, port) -> base URL of a real server behind the proxy (a real Ray
        # dashboard in tests/real): every path under it is forwarded, query string and all.
        self._forwards: dict[tuple[str, str, str, str | None], str] = {}
        self._watchers: list[_Watcher] = []
        self._compacted = 0  # watches from an older resourceVersion get 410 Gone (etcd compaction)
        # Called with (event type, object) after each change, outside the lock: a test plays a
        # controller with it (the kubelet finishing a pod), as a real cluster would.
        self.on_change: list[Callable[[str, dict[str, Any]], None]] = []
        self._hangs = 0  # the next N requests get no answer until `release()` (a stuck API server)
        self.hung = threading.Event()  # set when a request is being held
        self._released: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._answered_round = 0  # see RecordedRequest.round
        self.replace_all(objects)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> str:
        """Listen on 127.0.0.1 (free port) and return the base URL."""
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._loop = asyncio.get_running_loop()
        self._runner = web.AppRunner(
            app, handle_signals=False, shutdown_timeout=1.0, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.ssl_context, backlog=LISTEN_BACKLOG)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{port}"
        return self.base_url

    async def stop(self) -> None:
        """Close open watches, then the server."""
        with self._lock:
            watchers = list(self._watchers)
        for w in watchers:
            w.queue.put_nowait(None)
        if self._released is not None:
            self._released.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> KubeEmulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @classmethod
    @contextlib.contextmanager
    def in_thread(cls, objects: Iterable[Mapping[str, Any]] | Mapping[str, Any] = (),
                  **kwargs: Any) -> Iterator[KubeEmulator]:
        """Host the server loop in a daemon thread, for synchronous callers."""
        emu = cls(objects, **kwargs)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="kube-emulator", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(emu.start(), loop).result(timeout=10)
            yield emu
        finally:
            asyncio.run_coroutine_threadsafe(emu.stop(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()

    # ------------------------------------------------------------ mutation API

    def upsert(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace an object; bumps resourceVersion and notifies watches."""
        stored = copy.deepcopy(dict(obj))
        group, _version = _split_api_version(stored.get("apiVersion", "v1"))
        plural = plural_for(stored["kind"])
        meta = stored.setdefault("metadata", {})
        key = _Key(group, plural, meta.get("namespace") or "", meta["name"])
        with self._lock:
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            meta.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, repr(key))))
            old = self._store.get(key)
            self._store[key] = stored
            self._scopes.setdefault((key.group, key.plural, key.namespace), set()).add(key)
            self._resources.setdefault(group, set()).add(plural)
            versions = self._groups.setdefault(group, [])
            if _version not in versions:
                versions.append(_version)
            change = _Change(self._rv, "MODIFIED" if old else "ADDED", key, old, stored)
            self._changes.append(change)
        self._dispatch(change)
        for hook in list(self.on_change):
            hook(change.kind, copy.deepcopy(stored))
        return copy.deepcopy(stored)

    def delete(self, kind_or_plural: str, namespace: str | None, name: str) -> bool:
        """Delete an object by kind or plural; True if it existed."""
        plural = plural_for(kind_or_plural)
        with self._lock:
            key = next(
                (k for k in self._store
                 if k.plural == plural and k.namespace == (namespace or "") and k.name == name),
                None,
            )
            if key is None:
                return False
            self._delete_key(key)
        return True

    def _delete_key(self, key: _Key) -> None:
        with self._lock:
            old = self._store.pop(key)
            self._scopes.get((key.group, key.plural, key.namespace), set()).discard(key)
            self._rv += 1
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(self._rv)
            change = _Change(self._rv, "DELETED", key, old, gone)
            self._changes.append(change)
        self._dispatch(change)

    def replace_all(self, objects: Iterable[Mapping[str, Any]] | Mapping[str, Any]) -> None:
        """Replace the whole store (a list of objects or a kubectl ``List``)."""
        if isinstance(objects, Mapping):
            objects = objects.get("items", [])
        with self._lock:
            for key in list(self._store):
                self._delete_key(key)
            for obj in objects:
                self.upsert(obj)

    def objects(self) -> list[dict[str, Any]]:
        """A copy of every stored object."""
        with self._lock:
            return [copy.deepcopy(o) for o in self._store.values()]

    def serve_versions(self, group: str, versions: Iterable[str]) -> None:
        """Set the versions a group serves (first is the preferred one)."""
        with self._lock:
            self._groups[group] = list(versions)

    def forbid(self, verb: str, resource: str, *, user: str | None = None,
               group: str | None = None, namespace: str | None = None,
               subresource: str | None = None, cluster_scope: bool = False) -> None:
        """Deny ``verb`` on ``resource`` (a plural; "*" for any) to matching callers.

        ``cluster_scope`` denies only the cluster-wide form (``/api/v1/pods``): the usual
        RBAC of a team, a RoleBinding in its namespace and no ClusterRole.
        """
        with self._lock:
            self._rules.append(ForbidRule(verb, resource, user, group, namespace, subresource,
                                          cluster_scope))

    def admit(self, plural: str, hook: Callable[[dict[str, Any], CallerIdentity], dict | None]) -> None:
        """Add an admission hook for creates of ``plural`` ("*": every kind)."""
        with self._lock:
            self._admission.append((plural, hook))

    def clear_rules(self) -> None:
        """Drop every forbid rule."""
        with self._lock:
            self._rules.clear()

    def fail(self, resource: str, status: int = 500, times: int | None = None) -> None:
        """Answer requests for ``resource`` with ``status`` and a Status body.

        ``resource`` is a plural (which covers its subresources too), a
        ``plural/subresource`` such as "pods/log", or "*". ``times`` failures,
        then normal service again; None fails forever.
        """
        with self._lock:
            self._faults.append(_Fault(resource, status, times))

    def hang(self, times: int = 1) -> None:
        """Hold the next ``times`` requests unanswered until `release()` or `stop()`: an API
        server that accepted the connection and went quiet (``hung`` is set once one waits)."""
        with self._lock:
            self._hangs += times
            self.hung.clear()

    def release(self) -> None:
        """Let held requests go on (each then gets its normal answer)."""
        loop, released = self._loop, self._released
        if loop is not None and released is not None:
            loop.call_soon_threadsafe(released.set)

    def clear_faults(self) -> None:
        """Drop every injected fault."""
        with self._lock:
            self._faults.clear()

    def register_proxy(self, kind: str, namespace: str, name: str, port: int | str | None,
                       path: str, body: str | bytes, status: int = 200,
                       content_type: str = "text/plain") -> None:
        """Answer ``{pods|services}/{name}[:port]/proxy/{path}`` with a fixed body."""
        data = body.encode() if isinstance(body, str) else body
        key = (plural_for(kind), namespace, name, None if port is None else str(port),
               path.lstrip("/"))
        with self._lock:
            self._proxies[key] = (data, status, content_type)

    def forward_proxy(self, kind: str, namespace: str, name: str, port: int | str | None,
                      base_url: str) -> None:
        """Forward ``{pods|services}/{name}[:port]/proxy/<path>?<query>`` to a real server at
        ``base_url`` (loopback only), as the API server forwards to a Service's endpoints: the
        upstream's status, body and content type come back unchanged; an upstream that cannot be
        reached is the API server's own 503 ("error trying to reach service")."""
        if not re.match(r"^https?://(127\.0\.0\.1|localhost|\[::1\])[:/]", base_url):
            raise ValueError(f"forward_proxy forwards to this machine only, not {base_url}")
        key = (plural_for(kind), namespace, name, None if port is None else str(port))
        with self._lock:
            self._forwards[key] = base_url.rstrip("/")

    def call_soon(self, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback(*args)`` on the server's loop, after what it is doing now: a controller's
        next step (a kubelet moves a pod on once its create has been answered), from any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback, *args)

    def compact(self) -> None:
        """Forget the change history, as etcd compaction does: a WATCH from an older
        resourceVersion is answered `410 Gone` (`too old resource version`) and must re-LIST."""
        with self._lock:
            self._compacted = self._rv
            self._changes.clear()
            watchers = list(self._watchers)
        loop = self._loop
        for w in watchers:  # open streams end, as on an API server restart; clients re-WATCH
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(w.queue.put_nowait, None)

    def clear_requests(self) -> None:
        """Forget the request log (and its rounds)."""
        with self._lock:
            self.requests.clear()
            self._answered_round = 0

    def requests_to(self, path_prefix: str) -> list[RecordedRequest]:
        """Recorded requests whose path starts with ``path_prefix``."""
        with self._lock:
            return [r for r in self.requests if r.path.startswith(path_prefix)]

    # ------------------------------------------------------------ internals

    def _dispatch(self, change: _Change) -> None:
        """Hand a change to live watches on the server loop, from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with self._lock:
            watchers = list(self._watchers)
        for w in watchers:
            loop.call_soon_threadsafe(w.queue.put_nowait, change)

    def _caller(self, request: web.Request) -> CallerIdentity:
        user = request.headers.get("Impersonate-User")
        groups = tuple(request.headers.getall("Impersonate-Group", []))
        if user is None:
            if groups:
                raise _HTTPStatus(
                    500, f"requested {list(groups)} without impersonating a user"
                )
            return CallerIdentity(BOT_USER, BOT_GROUPS)
        return CallerIdentity(user, groups)

    def _parse(self, path: str) -> _Target | None:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            return None
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        tail = ""
        if sub is not None:  # the proxied path, verbatim (a trailing "/" matters)
            marker = f"/{rest[1]}/{sub}"
            tail = path[path.index(marker) + len(marker):].lstrip("/")
        return _Target(group, version, plural, namespace, name, sub, tail)

    def _check_forbidden(self, verb: str, target: _Target, caller: CallerIdentity) -> None:
        with self._lock:
            rules = list(self._rules)
        sub = target.subresource
        if any(r.matches(verb, target.plural, sub, target.namespace, caller) for r in rules):
            resource = f"{target.plural}/{sub}" if sub else target.plural
            # The API server names the group-qualified resource (schema.GroupResource's String):
            # `rayjobs.ray.io "train" is forbidden`, `pods is forbidden`.
            qualified = f"{target.plural}.{target.group}" if target.group else target.plural
            who = f"{qualified} \"{target.name}\"" if target.name else qualified
            scope = (f'in the namespace "{target.namespace}"' if target.namespace
                     else "at the cluster scope")
            raise _HTTPStatus(
                403,
                f'{who} is forbidden: User "{caller.user}" cannot {verb} resource '
                f'"{resource}" in API group "{target.group}" {scope}',
                name=target.name or "", group=target.group, kind=target.plural,
            )

    def _check_fault(self, target: _Target) -> None:
        resource = (f"{target.plural}/{target.subresource}" if target.subresource
                    else target.plural)
        with self._lock:
            for fault in self._faults:
                if fault.resource not in ("*", resource, target.plural):
                    continue
                if fault.remaining is not None:
                    if fault.remaining <= 0:
                        continue
                    fault.remaining -= 1
                raise _HTTPStatus(fault.status, f"injected fault for {resource}")

    def _discovery(self, path: str) -> dict[str, Any] | None:
        """The APIResourceList of `/api/v1` or `/apis/{group}/{version}` (GET, any caller), as
        clients that map a kind to its resource ask for it (Helm's `lookup`, kubectl): each
        resource's kind (from a stored object, else derived), scope and verbs."""
        parts = [p for p in path.split("/") if p]
        if parts == ["api", "v1"]:
            group, version = "", "v1"
        elif len(parts) == 3 and parts[0] == "apis":
            group, version = parts[1], parts[2]
        else:
            return None
        with self._lock:
            if version not in self._groups.get(group, ()):
                return None
            kinds = {k.plural: o.get("kind") for k, o in self._store.items() if k.group == group}
            plurals = sorted(self._resources.get(group, ()))
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": [{"name": plural, "singularName": "", "namespaced": plural not in CLUSTER_SCOPED,
                               "kind": kinds.get(plural) or _kind_for(plural),
                               "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
                              for plural in plurals]}

    def _known(self, group: str, version: str, plural: str) -> bool:
        with self._lock:
            return version in self._groups.get(group, ()) and plural in self._resources.get(
                group, ()
            )

    def _view(self, obj: dict[str, Any], group: str, version: str) -> dict[str, Any]:
        """The object as seen through ``group/version`` (apiVersion rewritten)."""
        stored_group, _ = _split_api_version(obj.get("apiVersion", "v1"))
        if obj.get("kind") == "Event" and stored_group != group:
            out = _convert_event(obj, group)
        else:
            # A shallow copy: stored objects are replaced on every write, never changed in place,
            # and a view is only serialized (its top-level apiVersion/kind set or dropped), so the
            # nested parts may be shared. A deep copy per listed object was a quarter of the
            # emulator's time under 1,000 watches.
            out = dict(obj)
        out["apiVersion"] = f"{group}/{version}" if group else version
        return out

    def _matching(self, target: _Target) -> list[tuple[_Key, dict[str, Any]]]:
        groups = {target.group}
        if target.plural == "events" and target.group in ("", "events.k8s.io"):
            groups = {"", "events.k8s.io"}
        with self._lock:
            if target.namespace is not None:
                keys = [k for g in groups for k in self._scopes.get((g, target.plural, target.namespace), ())]
            else:
                keys = [k for (g, plural, _ns), scope in self._scopes.items()
                        if g in groups and plural == target.plural for k in scope]
            found = [(k, self._store[k]) for k in keys]
        found.sort(key=lambda item: (item[0].namespace, item[0].name))
        return found

    def _filter(self, obj: dict[str, Any], label_selector: str | None,
                fields: list[tuple[str, str, str]]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return label_selector_matches(label_selector, labels) and field_selector_matches(
            fields, obj
        )

    def _selectors(self, target: _Target, query: MultiDict[str]
                   ) -> tuple[str | None, list[tuple[str, str, str]]]:
        label_selector = query.get("labelSelector")
        try:
            label_selector_matches(label_selector, {})
            fields = _parse_field_selector(query.get("fieldSelector"))
        except ValueError as err:
            raise _HTTPStatus(400, str(err)) from err
        allowed = _COMMON_FIELDS | SUPPORTED_FIELDS.get((target.group, target.plural), frozenset())
        for path, _op, _value in fields:
            if path not in allowed:
                raise _HTTPStatus(
                    400,
                    f'field label not supported: {path}',
                )
        return label_selector, fields

    # ------------------------------------------------------------ handlers

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
        try:
            caller = self._caller(request)
        except _HTTPStatus as err:
            caller = CallerIdentity("", ())
            self._record(request, caller, body)
            return self._status(err)
        record = self._record(request, caller, body)
        try:
            return await self._answer(request, caller, body, record)
        finally:
            with self._lock:
                self._answered_round = max(self._answered_round, record.round)

    def rounds(self) -> int:
        """Sequential request rounds of the requests recorded since the last `clear_requests`."""
        with self._lock:
            return max((r.round for r in self.requests), default=0)

    def connections(self) -> set[tuple[str, int]]:
        """The client ends of the TCP connections that carried the recorded requests."""
        with self._lock:
            return {r.peer for r in self.requests if r.peer is not None}

    async def _answer(self, request: web.Request, caller: CallerIdentity, body: Any,
                      record: RecordedRequest) -> web.StreamResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        with self._lock:
            hold, self._hangs = self._hangs > 0, max(self._hangs - 1, 0)
        if hold:
            if self._released is None:
                self._released = asyncio.Event()
            self.hung.set()
            await self._released.wait()
        try:
            response = await self._route(request, caller, body)
        except _HTTPStatus as err:
            return self._status(err)
        # As kube-apiserver does (APIResponseCompression, on by default): a large answer goes
        # gzip-compressed to a client that accepts it.
        if (isinstance(response, web.Response) and isinstance(response.body, bytes)
                and len(response.body) >= GZIP_THRESHOLD_BYTES
                and "gzip" in request.headers.get("Accept-Encoding", "")):
            response.enable_compression(web.ContentCoding.gzip)
            record.gzipped = True
        return response

    def _record(self, request: web.Request, caller: CallerIdentity, body: Any) -> RecordedRequest:
        rec = RecordedRequest(
            method=request.method,
            path=request.path,
            query=MultiDict(request.query),
            headers=CIMultiDict(request.headers),
            identity=caller,
            body=body,
        )
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        rec.peer = (str(peer[0]), int(peer[1])) if peer else None
        with self._lock:
            rec.round = self._answered_round + 1
            self.requests.append(rec)
        return rec

    @staticmethod
    def _status(err: _HTTPStatus) -> web.Response:
        return web.json_response(status_body(err.code, err.message, err.details or None),
                                 status=err.code)

    async def _route(self, request: web.Request, caller: CallerIdentity,
                     body: Any) -> web.StreamResponse:
        path = request.path
        if path.rstrip("/") == "/version":  # VersionApi asks for "/version/"
            return web.json_response(VERSION_INFO)
        if path in ("/healthz", "/readyz", "/livez"):
            return web.Response(text="ok")
        if (resources := self._discovery(path)) is not None:
            return web.json_response(resources)
        target = self._parse(path)
        if target is None or not self._known(target.group, target.version, target.plural):
            raise _HTTPStatus(404, "the server could not find the requested resource")
        if target.group == "authorization.k8s.io" and target.plural == "selfsubjectaccessreviews":
            if request.method != "POST":
                raise _HTTPStatus(405, "the server does not allow this method")
            self._check_forbidden("create", target, caller)
            self._check_fault(target)
            return self._access_review(target, body, caller)
        if request.method == "POST" and target.name is None and target.subresource is None:
            self._check_forbidden("create", target, caller)
            self._check_fault(target)
            return self._create(target, body, caller, dry_run=request.query.get("dryRun") == "All")
        if request.method == "DELETE" and target.name is not None and target.subresource is None:
            self._check_forbidden("delete", target, caller)
            self._check_fault(target)
            return self._delete_one(target)
        if request.method != "GET":
            raise _HTTPStatus(405, f"method {request.method} not supported by the emulator")
        query = request.query
        is_watch = query.get("watch", "").lower() in ("true", "1")
        if target.subresource is not None:
            verb = "get"
        elif target.name is not None:
            verb = "get"
        else:
            verb = "watch" if is_watch else "list"
        self._check_forbidden(verb, target, caller)
        self._check_fault(target)
        if target.subresource == "log" and target.plural == "pods":
            return self._pod_log(target, query)
        if target.subresource == "proxy":
            return await self._proxy(target, request.query_string)
        if target.group == VISIBILITY_GROUP:
            return self._pending_workloads(target, query)
        if target.subresource is not None:
            return self._get(target)  # e.g. /status: the object itself
        if target.name is not None:
            return self._get(target)
        if is_watch:
            return await self._watch(request, target)
        return self._list(target, MultiDict(query))

    def _create(self, target: _Target, body: Any, caller: CallerIdentity, *,
                dry_run: bool = False) -> web.Response:
        """POST to a collection: the object is stored (generateName honoured) and returned, 201.

        With ``dryRun=All`` the admission hooks (`admit`) answer first, as the API server's
        validation and webhooks would, and the object is returned but not stored."""
        if not isinstance(body, dict):
            raise _HTTPStatus(400, "the body of the request was in an unknown format")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if target.namespace:
            meta["namespace"] = target.namespace
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise _HTTPStatus(422, "name or generateName is required")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        key = _Key(target.group, target.plural, target.namespace or "", meta["name"])
        with self._lock:
            exists = key in self._store
        if exists:
            raise _HTTPStatus(409, f'{target.plural} "{meta["name"]}" already exists', name=meta["name"],
                              group=target.group, kind=target.plural)
        obj.setdefault("kind", _kind_for(target.plural))
        obj.setdefault("apiVersion", f"{target.group}/{target.version}" if target.group else target.version)
        meta.setdefault("creationTimestamp", "2026-11-30T10:30:00Z")
        with self._lock:
            hooks = [hook for plural, hook in self._admission if plural in ("*", target.plural)]
        for hook in hooks:
            refusal = hook(copy.deepcopy(obj), caller)
            if refusal is not None:
                return web.json_response(refusal, status=int(refusal.get("code", 422)))
        if dry_run:
            meta.setdefault("uid", str(uuid.uuid4()))
            return web.json_response(obj, status=201)
        stored = self.upsert(obj)
        return web.json_response(stored, status=201)

    def _delete_one(self, target: _Target) -> web.Response:
        obj = self._lookup(target)
        self.delete(target.plural, target.namespace, target.name or "")
        return web.json_response(obj)

    def _lookup(self, target: _Target, name: str | None = None) -> dict[str, Any]:
        name = name or target.name or ""
        with self._lock:  # by its key first: a GET among 20,000 objects need not scan them
            direct = self._store.get(_Key(target.group, target.plural, target.namespace or "", name))
        if direct is not None:
            return direct
        for key, obj in self._matching(target):
            if key.name == name and (target.namespace or "") == key.namespace:
                return obj
        raise _HTTPStatus(404, f'{target.plural} "{name}" not found', name=name,
                          group=target.group, kind=target.plural)

    def _get(self, target: _Target) -> web.Response:
        obj = self._lookup(target)
        return web.json_response(self._view(obj, target.group, target.version))

    def _list(self, target: _Target, query: MultiDict[str]) -> web.Response:
        label_selector, fields = self._selectors(target, query)
        with self._lock:
            list_rv = self._rv
        items: list[tuple[dict[str, Any], bool]] = []  # (object, already a view)
        for _key, obj in self._matching(target):
            # Select first, copy after — and copy only the page: a LIST by label of 10 pods among
            # 5,000 copies 10, and a page of 500 among 20,000 copies 500, as an API server's watch
            # cache (or etcd's range read from the continue key) would. Only an Event seen through
            # the other events API differs in its fields (involvedObject/regarding), so it is
            # converted before selecting.
            converted = _split_api_version(obj.get("apiVersion", "v1"))[0] != target.group
            if obj.get("kind") == "Event" and converted:
                view = self._view(obj, target.group, target.version)
                if self._filter(view, label_selector, fields):
                    items.append((view, True))
            elif self._filter(obj, label_selector, fields):
                items.append((obj, False))
        start = 0
        if token := query.get("continue"):
            try:
                start = int(json.loads(base64.urlsafe_b64decode(token))["start"])
            except (ValueError, KeyError, TypeError) as err:
                raise _HTTPStatus(400, "continue key is not valid") from err
        limit = int(query.get("limit") or 0)
        page = [obj if viewed else self._view(obj, target.group, target.version)
                for obj, viewed in (items[start:start + limit] if limit > 0 else items[start:])]
        end = start + len(page)
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if end < len(items):
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"start": end, "rv": list_rv}).encode()
            ).decode()
            meta["remainingItemCount"] = len(items) - end
        if target.group in BUILTIN_GROUPS:
            for item in page:
                item.pop("apiVersion", None)
                item.pop("kind", None)
        return web.json_response({
            "kind": f"{_kind_for(target.plural)}List",
            "apiVersion": f"{target.group}/{target.version}" if target.group else target.version,
            "metadata": meta,
            "items": page,
        })

    async def _watch(self, request: web.Request, target: _Target) -> web.StreamResponse:
        label_selector, fields = self._selectors(target, request.query)
        timeout = float(request.query.get("timeoutSeconds") or self.watch_timeout)
        since = request.query.get("resourceVersion") or "0"
        if not since.isdigit():
            raise _HTTPStatus(400, f"invalid resource version {since!r}")
        watcher = _Watcher(target.group, target.plural, target.namespace, label_selector,
                           request.query.get("fieldSelector"))
        with self._lock:
            self._watchers.append(watcher)
            snapshot_rv = self._rv
            if since == "0":
                initial = [_Change(int(o["metadata"]["resourceVersion"]), "ADDED", k, None, o)
                           for k, o in self._matching(target)]
            else:  # the history is in resourceVersion order: where to start is a binary search
                initial = self._changes[bisect.bisect_right(self._changes, int(since), key=lambda c: c.rv):]
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if since != "0" and int(since) < self._compacted:
            # kube-apiserver's watch cache answers 200 with one ERROR event carrying the Status.
            gone = status_body(410, f"too old resource version: {since} ({self._compacted})")
            gone["reason"] = "Expired"
            await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            with self._lock:
                self._watchers.remove(watcher)
            await response.write_eof()
            return response
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        bookmarks = request.query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        seen_rv = snapshot_rv  # every change up to here was sent or filtered: a bookmark may say so
        next_bookmark = loop.time() + self.bookmark_interval

        async def bookmark() -> None:
            # kube-apiserver's BOOKMARK: the kind's apiVersion/kind and only metadata.resourceVersion.
            mark = {"kind": _kind_for(target.plural),
                    "apiVersion": f"{target.group}/{target.version}" if target.group else target.version,
                    "metadata": {"resourceVersion": str(seen_rv)}}
            await response.write(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")

        async def send(change: _Change) -> None:
            event = self._watch_event(change, target, label_selector, fields)
            if event is not None:
                await response.write(json.dumps(event).encode() + b"\n")

        try:
            for change in initial:
                await send(change)
            while (remaining := deadline - loop.time()) > 0:
                wait = min(remaining, next_bookmark - loop.time()) if bookmarks else remaining
                try:
                    change = await asyncio.wait_for(watcher.queue.get(), max(wait, 0.0))
                except TimeoutError:
                    if bookmarks and loop.time() >= next_bookmark:
                        await bookmark()
                        next_bookmark = loop.time() + self.bookmark_interval
                        continue
                    break
                if change is None:
                    break
                if change.rv > snapshot_rv:  # older ones were in `initial`
                    await send(change)
                    seen_rv = max(seen_rv, change.rv)
        except ConnectionResetError:
            pass  # the client went away; nothing left to tell it
        finally:
            with self._lock:
                self._watchers.remove(watcher)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    def _watch_event(self, change: _Change, target: _Target, label_selector: str | None,
                     fields: list[tuple[str, str, str]]) -> dict[str, Any] | None:
        key = change.key
        groups = {"", "events.k8s.io"} if target.plural == "events" else {target.group}
        if key.group not in groups or key.plural != target.plural:
            return None
        if target.namespace is not None and key.namespace != target.namespace:
            return None

        def matches(obj: dict[str, Any] | None) -> bool:
            return obj is not None and self._filter(
                self._view(obj, target.group, target.version), label_selector, fields
            )

        was, now = matches(change.old), matches(change.new)
        if change.kind == "DELETED":
            kind = "DELETED" if was else None
        elif was and now:
            kind = "MODIFIED"
        elif now:
            kind = "ADDED"
        elif was:
            kind = "DELETED"
        else:
            kind = None
        if kind is None or change.new is None:
            return None
        return {"type": kind, "object": self._view(change.new, target.group, target.version)}

    def _pod_log(self, target: _Target, query: Mapping[str, str]) -> web.Response:
        pod = self._lookup(target)
        spec = pod.get("spec") or {}
        names = [c["name"] for c in (spec.get("initContainers") or [])
                 + (spec.get("containers") or [])]
        container = query.get("container")
        ns, name = target.namespace or "", target.name or ""
        if container is None:
            main = [c["name"] for c in spec.get("containers") or []]
            if (ns, name, None) in self.pod_logs:
                text = self.pod_logs[(ns, name, None)]
            elif len(main) == 1:
                text = self.pod_logs.get((ns, name, main[0]), "")
            else:
                raise _HTTPStatus(
                    400,
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(main)}]",
                )
        else:
            if names and container not in names:
                raise _HTTPStatus(400, f"container {container} is not valid for pod {name}")
            text = self.pod_logs.get((ns, name, container),
                                     self.pod_logs.get((ns, name, None), ""))
        if self.kubelet_log_states and query.get("previous") != "true":
            main = container or (spec.get("containers") or [{}])[0].get("name", "")
            refusal = _kubelet_log_refusal(pod, main)
            if refusal:
                raise _HTTPStatus(400, refusal)
        if query.get("previous") == "true":
            # kubelet: "previous terminated container %q in pod %q not found"
            previous = self.previous_logs.get((ns, name, container or ""))
            if previous is None:
                raise _HTTPStatus(400, f'previous terminated container "{container}" in pod "{name}" '
                                  "not found")
            text = previous
        if query.get("timestamps") != "true":
            # Stored logs carry the kubelet's RFC 3339 prefix (as `--timestamps` shows them).
            text = "".join(_KUBELET_STAMP.sub("", line, count=1) for line in text.splitlines(keepends=True))
        if tail := query.get("tailLines"):
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail):]) if int(tail) > 0 else ""
        if limit := query.get("limitBytes"):
            # The kubelet stops after limitBytes of the selected output (its start, not its end).
            text = text.encode("utf-8")[:int(limit)].decode("utf-8", errors="ignore")
        return web.Response(text=text, content_type="text/plain")

    def _pending_workloads(self, target: _Target, query: Mapping[str, str]) -> web.Response:
        """Kueue's ``…/{localqueues|clusterqueues}/NAME/pendingworkloads``, computed from the stored
        Workloads and LocalQueues as Kueue's queue manager orders them (BestEffortFIFO/StrictFIFO:
        higher priority first, then older first; positions start from 0).

        Shapes: kueue apis/visibility/v1beta1/types.go (PendingWorkloadsSummary, PendingWorkload)
        and site/…/pending_workloads_on_demand.md; a missing queue is Kueue's NotFound of
        ``localqueue``/``clusterqueue``, any other subresource the API server's 404.
        """
        if target.subresource != "pendingworkloads" or target.name is None:
            raise _HTTPStatus(404, "the server could not find the requested resource")
        with self._lock:
            stored = list(self._store.items())
        cq_of = {(k.namespace, k.name): (o.get("spec") or {}).get("clusterQueue")
                 for k, o in stored if k.group == "kueue.x-k8s.io" and k.plural == "localqueues"}
        cqs = {k.name for k, _o in stored if k.group == "kueue.x-k8s.io" and k.plural == "clusterqueues"}
        singular = target.plural[:-1]
        if target.plural == "localqueues" and (target.namespace or "", target.name) not in cq_of:
            raise _HTTPStatus(404, f'{singular}.kueue.x-k8s.io "{target.name}" not found',
                              name=target.name, group="kueue.x-k8s.io", kind=singular)
        cluster_queue = (cq_of[(target.namespace or "", target.name)] if target.plural == "localqueues"
                         else target.name)
        if cluster_queue not in cqs and target.plural == "clusterqueues":
            raise _HTTPStatus(404, f'{singular}.kueue.x-k8s.io "{target.name}" not found',
                              name=target.name, group="kueue.x-k8s.io", kind=singular)

        def pending(wl: dict[str, Any]) -> bool:
            conds = {c.get("type"): c.get("status") for c in (wl.get("status") or {}).get("conditions") or []}
            return ((wl.get("spec") or {}).get("active") is not False and conds.get("Finished") != "True"
                    and conds.get("QuotaReserved") != "True" and conds.get("Admitted") != "True")

        def in_queue(key: _Key, wl: dict[str, Any]) -> bool:
            lq = (wl.get("spec") or {}).get("queueName")
            return key.group == "kueue.x-k8s.io" and key.plural == "workloads" and pending(wl) \
                and cq_of.get((key.namespace, lq)) == cluster_queue

        queued = sorted(
            ((k, o) for k, o in stored if in_queue(k, o)),
            key=lambda ko: (-int((ko[1].get("spec") or {}).get("priority") or 0),
                            (ko[1].get("metadata") or {}).get("creationTimestamp") or "", ko[0].name))
        items: list[dict[str, Any]] = []
        in_lq: dict[tuple[str, str], int] = {}
        for position, (key, wl) in enumerate(queued):
            lq = (wl.get("spec") or {}).get("queueName") or ""
            local = in_lq.get((key.namespace, lq), 0)
            in_lq[(key.namespace, lq)] = local + 1
            if target.plural == "localqueues" and (key.namespace, lq) != (target.namespace, target.name):
                continue
            md = wl.get("metadata") or {}
            items.append({
                "metadata": {k: md[k] for k in ("name", "namespace", "creationTimestamp", "ownerReferences")
                             if k in md},
                "priority": int((wl.get("spec") or {}).get("priority") or 0),
                "localQueueName": lq,
                "positionInClusterQueue": position,
                "positionInLocalQueue": local,
            })
        offset, limit = int(query.get("offset") or 0), int(query.get("limit") or 1000)
        return web.json_response({
            "kind": "PendingWorkloadsSummary",
            "apiVersion": f"{VISIBILITY_GROUP}/{target.version}",
            "metadata": {"creationTimestamp": None},
            "items": items[offset:offset + limit],
        })

    async def _proxy(self, target: _Target, query_string: str = "") -> web.Response:
        raw_name = target.name or ""
        name, _, port = raw_name.partition(":")
        path = target.rest
        self._lookup(target, name)
        key = (target.plural, target.namespace or "", name, port or None, path)
        refused = _HTTPStatus(
            503,
            f'error trying to reach service: dial tcp 10.244.0.1:{port or 80}: '
            f'connect: connection refused',
        )
        with self._lock:
            hit = self._proxies.get(key)
            upstream = self._forwards.get(key[:4])
        if hit is None and upstream is not None:
            url = f"{upstream}/{path}" + (f"?{query_string}" if query_string else "")
            try:
                async with aiohttp.ClientSession(auto_decompress=True) as session, \
                        session.get(url, timeout=aiohttp.ClientTimeout(total=60)) as answer:
                    data = await answer.read()
                    kind = answer.content_type or "text/plain"
                    return web.Response(body=data, status=answer.status, content_type=kind,
                                        charset=answer.charset)
            except (aiohttp.ClientError, TimeoutError):
                raise refused from None
        if hit is None:
            raise refused
        data, status, content_type = hit
        return web.Response(body=data, status=status, content_type=content_type)

    def _access_review(self, target: _Target, body: Any,
                       caller: CallerIdentity) -> web.Response:
        spec = (body or {}).get("spec") or {}
        attrs = spec.get("resourceAttributes") or {}
        asked = _Target(
            group=attrs.get("group", ""), version=attrs.get("version", ""),
            plural=attrs.get("resource", ""), namespace=attrs.get("namespace") or None,
            name=attrs.get("name") or None, subresource=attrs.get("subresource") or None,
            rest="",
        )
        try:
            self._check_forbidden(attrs.get("verb", ""), asked, caller)
            allowed = True
        except _HTTPStatus:
            allowed = False
        status: dict[str, Any] = {"allowed": allowed}
        if allowed:
            status["reason"] = "RBAC: allowed by the emulator"
        return web.json_response(
            {
                "kind": "SelfSubjectAccessReview",
                "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": None},
                "spec": spec,
                "status": status,
            },
            status=201,
        )


@contextlib.contextmanager
def running_emulator(objects: Iterable[Mapping[str, Any]] | Mapping[str, Any] = (),
                     **kwargs: Any) -> Iterator[KubeEmulator]:
    """``KubeEmulator.in_thread``: a server usable from synchronous code."""
    with KubeEmulator.in_thread(objects, **kwargs) as emu:
        yield emu


__all__ = [
    "BOT_USER",
    "CallerIdentity",
    "KubeEmulator",
    "RecordedRequest",
    "invalid_status",
    "label_selector_matches",
    "plural_for",
    "running_emulator",
    "status_body",
    "strict_decoding_error",
    "webhook_denial",
]
