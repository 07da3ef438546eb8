"""How taubot opens a connection to a cluster, and as whom.

Two kinds of client exist and they are built by different functions so that a
user's request can never run with the bot's own permissions by accident:

* ``make_user_client(target, identity)`` — every request impersonates the Slack
  user's mapped Kubernetes identity; there is no default identity.
* ``make_bot_client(target)`` — the bot's own (read-only) service account, for
  the stall monitor only.

Impersonation needs one ``Impersonate-Group`` header *per group*: the API
server reads repeated headers, and a comma-joined value would be a single group
called "a,b". kubernetes_asyncio keeps default and per-call headers in plain
dicts, which cannot repeat a name. We therefore subclass its REST client and
turn the header dict into a ``CIMultiDict`` just before aiohttp sends it. Why
that hook and not the alternatives:

* an aiohttp client middleware would also work, but kubernetes_asyncio builds
  its ``ClientSession`` inside ``RESTClientObject.__init__`` without a way to
  pass ``middlewares``, so we would still subclass and rebuild the session;
* a trace hook (``on_request_start``) only observes headers, it cannot add to
  the request reliably;
* overriding ``request`` is the single funnel every call goes through — typed
  API calls, ``call_api`` raw reads, watches and pagination pages — so there is
  exactly one place where the headers are attached, and nothing a caller passes
  can remove or replace them (caller-supplied ``Impersonate-*`` headers are
  dropped first).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import ssl
import time
import urllib.parse
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from multidict import CIMultiDict
from yarl import URL

from workers.contracts.cluster import ClusterTarget
from workers.contracts.identity import Identity
from workers.plumbing.loop import PROCESS_LOOP, ProcessLoop

from .errors import KubeconfigError
from .sdk import ApiClient, ConfigException, Configuration, config, rest

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
IN_CLUSTER_CA = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")

_IMPERSONATION_PREFIX = "impersonate-"


class _ImpersonatingRESTClient(rest.RESTClientObject):
    """kubernetes_asyncio's REST client, adding repeated impersonation headers."""

    _identity: Identity
    _opening: asyncio.Future[None] | None = None  # connections opened ahead (`_open_connections`)

    async def close(self) -> None:
        """Stop opening connections ahead, then close the session (and every connection)."""
        if self._opening is not None:
            self._opening.cancel()
            await asyncio.gather(self._opening, return_exceptions=True)
        await super().close()

    async def opened_ahead(self) -> None:
        """Until the connections opened ahead are idle in the pool (or failed to open): the server
        accepts one before the client has put it there, so a request sent in between opens another."""
        if self._opening is not None:
            await asyncio.gather(self._opening, return_exceptions=True)

    async def request(self, method: str, url: str, query_params: Any = None,
                      headers: Any = None, body: Any = None, post_params: Any = None,
                      _preload_content: bool = True, _request_timeout: Any = None) -> Any:
        """Send the request with the identity's headers, whatever the caller passed."""
        multi: CIMultiDict[str] = CIMultiDict(
            (k, v) for k, v in (headers or {}).items()
            if not k.lower().startswith(_IMPERSONATION_PREFIX)
        )
        multi.add("Impersonate-User", self._identity.user)
        for group in self._identity.groups:
            multi.add("Impersonate-Group", group)
        return await super().request(
            method, url, query_params=query_params, headers=multi, body=body,
            post_params=post_params, _preload_content=_preload_content,
            _request_timeout=_request_timeout,
        )


def _token_refresher(path: Path) -> Any:
    """A ``refresh_api_key_hook`` re-reading a projected token when the file changes.

    Bound service-account tokens rotate (about hourly); reading once at start
    would make a long-running worker fail with 401 later.
    """
    last_mtime: list[float] = [-1.0]

    def refresh(configuration: Configuration) -> None:
        mtime = path.stat().st_mtime
        if mtime != last_mtime[0]:
            configuration.api_key["BearerToken"] = path.read_text().strip()
            configuration.api_key_prefix["BearerToken"] = "Bearer"
            last_mtime[0] = mtime

    return refresh


async def _configuration(target: ClusterTarget) -> Configuration:
    """A fresh Configuration for the target; never the library's global default."""
    cfg = Configuration()
    if target.context:
        await _load_context(target, cfg)
    elif target.in_cluster:
        config.load_incluster_config(client_configuration=cfg)
    else:
        assert target.server is not None  # guaranteed by ClusterTarget validation
        cfg.host = target.server.rstrip("/")
        if target.certificate_authority is not None:
            cfg.ssl_ca_cert = str(target.certificate_authority)
        token_file = target.token_file
        if token_file is None and IN_CLUSTER_TOKEN.exists():
            token_file = IN_CLUSTER_TOKEN
            if target.certificate_authority is None and IN_CLUSTER_CA.exists():
                cfg.ssl_ca_cert = str(IN_CLUSTER_CA)
        if token_file is not None:
            cfg.refresh_api_key_hook = _token_refresher(token_file)
            cfg.refresh_api_key_hook(cfg)
    return cfg


def _kubeconfig_paths(target: ClusterTarget) -> tuple[str, list[Path]]:
    """Where the context is looked up, as kubectl does: the descriptor's `kubeconfig`, else
    `$KUBECONFIG` (a `:`-separated list), else `~/.kube/config` — the setting's name and its files."""
    if target.kubeconfig is not None:
        return "the descriptor's spec.cluster.kubeconfig", [target.kubeconfig.expanduser()]
    value = os.environ.get("KUBECONFIG", "")
    if value:
        return "KUBECONFIG", [Path(p).expanduser() for p in value.split(os.pathsep) if p]
    return "~/.kube/config", [Path("~/.kube/config").expanduser()]


def _context_names(paths: list[Path]) -> list[str]:
    """The contexts the files define, for the one-line error's "it has: …"; unreadable ones add none."""
    names: list[str] = []
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        entries = doc.get("contexts") if isinstance(doc, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                names.append(entry["name"])
    return names


async def _load_context(target: ClusterTarget, cfg: Configuration) -> None:
    """Load the target's kubeconfig context into `cfg`, or raise `KubeconfigError` saying what to set.

    kubernetes_asyncio reads a missing file as an empty config and then fails on its missing
    `contexts` key (and a missing context as "Expected object with name …"); a person at a
    terminal needs the file, the context and the fix instead."""
    setting, paths = _kubeconfig_paths(target)
    shown = os.pathsep.join(str(p) for p in paths) or "(empty)"
    existing = [p for p in paths if p.is_file()]
    if not existing:
        raise KubeconfigError(
            f"no kubeconfig at {shown} ({setting}): set KUBECONFIG to the file that holds context "
            f"{target.context!r} (kubectl config get-contexts lists it), or get one from the cluster "
            "(e.g. az aks get-credentials)")
    names = _context_names(existing)
    if target.context not in names:
        fix = (f"it has {', '.join(sorted(names))}: set the workspace descriptor's spec.cluster.context "
               "to one of them, or add it" if names else "it has no contexts: add it")
        raise KubeconfigError(f"kubeconfig {shown} ({setting}) has no context {target.context!r}; {fix} "
                              "(kubectl config get-contexts lists them)")
    try:
        await config.load_kube_config(
            config_file=os.pathsep.join(str(p) for p in existing),
            context=target.context,
            client_configuration=cfg,
            persist_config=False,
        )
    except (ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise KubeconfigError(f"kubeconfig {shown} ({setting}), context {target.context!r}: {reason}: "
                              "check it with kubectl config view --minify "
                              f"--context {target.context}") from None


async def make_api_client(target: ClusterTarget, identity: Identity | None,
                          pool_size: int | None = None) -> ApiClient:
    """An ApiClient for ``target``; impersonating ``identity`` when one is given.

    Prefer ``make_user_client`` / ``make_bot_client``, which make the choice of
    identity explicit at the call site. Call this inside the event loop that
    will use the client (rq starts a fresh loop per job). ``pool_size`` caps the connections
    to the server (kubernetes_asyncio's default is 100; 0 means no cap).
    """
    cfg = await _configuration(target)
    if pool_size is not None:
        cfg.connection_pool_maxsize = pool_size
    api = ApiClient(configuration=cfg)
    if identity is not None:
        # Re-class the REST client ApiClient just built rather than building a second one:
        # the subclass only overrides request(), and each construction loads the system CA
        # bundle into a new SSL context (~20 ms), which is most of a status's local cost.
        rest_client = api.rest_client
        rest_client.__class__ = _ImpersonatingRESTClient
        rest_client._identity = identity
    return api


async def make_user_client(target: ClusterTarget, identity: Identity | None) -> ApiClient:
    """A client acting as a user; refuses to exist without that user's identity. Its session is
    taubot's (`_own_session`), as a worker's pooled clients' are."""
    if identity is None or not isinstance(identity, Identity) or not identity.user.strip():
        raise ValueError("a user client needs the user's Kubernetes identity")
    api = await make_api_client(target, identity)
    # As many connections as kubernetes_asyncio's own session allows (its Configuration's, 100): a
    # status reads every rank's log of a 32-rank job at once.
    await _own_session(api, connections=api.configuration.connection_pool_maxsize,
                       idle_seconds=POOL_IDLE_SECONDS)
    return api


async def make_bot_client(target: ClusterTarget, pool_size: int | None = None) -> ApiClient:
    """The bot's own read-only client, for the stall monitor only."""
    return await make_api_client(target, None, pool_size)


class KubeClients:
    """The one seam every Kubernetes client comes through (`Services.kube`): as a user
    (impersonated, for every user-initiated call) or as the bot (the monitor only). One place
    for timeouts, retries and pool sizes; tests and the shell hand in their own.

    This one opens a client (and its connections) per call: right for a one-shot CLI process;
    a worker uses `WarmKubeClients`. Its user clients open `PRECONNECT` connections beside the
    first round's own (`_open_connections`): a status's second round goes out at once, wider
    than its first, and each request of it that found no open connection waited a handshake
    (a round trip; two with TLS) before it could be sent."""

    async def user(self, target: ClusterTarget, identity: Identity) -> ApiClient:
        api = await make_user_client(target, identity)
        _open_connections(api, PRECONNECT)
        return api

    async def bot(self, target: ClusterTarget, pool_size: int | None = None) -> ApiClient:
        return await make_bot_client(target, pool_size)


def env_proxy(server: str) -> str | None:
    """The proxy `HTTPS_PROXY`/`HTTP_PROXY` name for ``server``, unless `NO_PROXY` exempts it (the
    standard library's reading of them, as aiohttp's `trust_env` would)."""
    parts = urllib.parse.urlsplit(server)
    if not parts.hostname or urllib.request.proxy_bypass(parts.hostname):
        return None
    return urllib.request.getproxies().get(parts.scheme or "https")


# Per cluster and process. A status's widest round is its third when a distributed run hangs or
# fails: every rank's log tail (at most 64 pods, SPEC §5c) beside the run's log, the nodes and the
# reviews. A smaller pool sends such a round in waves, each a round trip (16 took 32 rank logs in
# two). Connections are opened only as requests need them and idle ones close after
# `POOL_IDLE_SECONDS`, so a worker that reads no ranks holds as few as before.
POOL_CONNECTIONS = 72
# Connections a one-shot client opens beside its first round's (4 requests), so that its second
# round (a waiting Job's: 7) finds them open: 200 ms at 200 ms RTT (bench/bench_cold_cli.py).
PRECONNECT = 4
PRECONNECT_SECONDS = 10.0  # an API server that answers no handshake in this long gets no more tries ahead
# Shorter than the API server's own idle timeout (kube-apiserver closes an idle connection after
# 90 s; an Azure load balancer in front of AKS after 4 min), so taubot closes first and does not
# send on a connection the server is closing.
POOL_IDLE_SECONDS = 30.0
MAX_CLUSTERS = 16  # pools kept per process; the least recently used one past this is closed
POOL_MAX_AGE_SECONDS = 600.0  # the kubeconfig (exec tokens, client certificates) is read again this often
_IDEMPOTENT = frozenset({"GET", "HEAD"})


async def _own_session(api: ApiClient, *, connections: int, idle_seconds: float) -> ApiClient:
    """``api`` with taubot's session in place of the one kubernetes_asyncio's REST client made:
    at most ``connections`` to the server, idle ones closed after ``idle_seconds``, no cookies,
    and the environment's proxy for this API server read once. Why not theirs: with `trust_env`
    aiohttp re-reads the proxy variables and ~/.netrc in a thread on every request — two thread
    hops before each request is sent, a sixth of a watch tick's CPU — and a netrc entry is never
    how taubot authenticates (bearer tokens, client certificates). No cookies: a `services/proxy`
    answer could carry a dashboard's cookie, and it must not ride along with the next request."""
    cfg = api.configuration
    await api.rest_client.pool_manager.close()  # opened nothing yet
    https = cfg.host.startswith("https:")  # a plain-http server (a test's, a proxy's) needs no TLS context
    connector = aiohttp.TCPConnector(limit=connections, keepalive_timeout=idle_seconds,
                                     ssl=_ssl_context(cfg) if https else True)
    if not api.rest_client.proxy:
        api.rest_client.proxy = env_proxy(cfg.host)
    api.rest_client.pool_manager = aiohttp.ClientSession(
        connector=connector, trust_env=False, read_bufsize=2**21, cookie_jar=aiohttp.DummyCookieJar())
    return api


def _open_connections(api: ApiClient, count: int) -> None:
    """Open ``count`` connections to ``api``'s server in the background, left idle in its pool for
    the requests to come (TCP and TLS handshakes, no request sent); a failure is the requests' to
    report. Not through a proxy (its CONNECT is per request). The client's close cancels it."""
    rest_client = api.rest_client
    session: aiohttp.ClientSession = rest_client.pool_manager
    if count <= 0 or rest_client.proxy or session.connector is None:
        return
    connector = session.connector
    request = aiohttp.ClientRequest("GET", URL(api.configuration.host), loop=asyncio.get_running_loop(),
                                    session=session, server_hostname=rest_client.server_hostname)

    async def one() -> None:
        with contextlib.suppress(aiohttp.ClientError, OSError, asyncio.TimeoutError):
            connection = await connector.connect(request, [], aiohttp.ClientTimeout(total=PRECONNECT_SECONDS))
            connection.release()  # idle in the pool: the next request takes it

    async def all_of_them() -> None:
        await asyncio.gather(*(one() for _ in range(count)))

    rest_client._opening = asyncio.ensure_future(all_of_them())


def _ssl_context(cfg: Configuration) -> ssl.SSLContext:
    """The TLS settings kubernetes_asyncio's RESTClientObject derives from a Configuration."""
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.disable_strict_ssl_verification:
        ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return ctx


class _SharedRESTClient(_ImpersonatingRESTClient):
    """One identity's view of a cluster's shared connection pool: the identity's headers on each
    request, the pool's connections underneath. Closing it leaves the pool open (the pool outlives
    every client made from it)."""

    def __init__(self, pooled: rest.RESTClientObject, identity: Identity) -> None:  # noqa: D107
        # RESTClientObject.__init__ would build an SSL context and a session: taken from the pool
        self.pool_manager = pooled.pool_manager
        self.proxy, self.proxy_headers = pooled.proxy, pooled.proxy_headers
        self.server_hostname = pooled.server_hostname
        self._identity = identity

    async def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        """As the parent; a read whose kept connection the server had closed while it was idle
        (it went before the server's FIN was seen) is sent once more, on a fresh connection."""
        try:
            return await super().request(method, url, *args, **kwargs)
        except aiohttp.ServerDisconnectedError:
            if method.upper() not in _IDEMPOTENT:
                raise
            return await super().request(method, url, *args, **kwargs)

    async def close(self) -> None:
        """The pool stays open for the next client."""


@dataclass
class _ClusterPool:
    api: ApiClient  # the bot-less template every identity's client is copied from
    opened: float

    async def close(self) -> None:
        await self.api.rest_client.pool_manager.close()


class WarmKubeClients(KubeClients):
    """One connection pool per cluster for the life of the worker process, shared by every job
    and every identity (issue 28): a status after the first opens no connection.

    Why sharing leaks nothing between users: a kept connection carries no identity. The API
    server authenticates and authorises each request from its own headers — the bot's bearer
    token and this request's `Impersonate-User`/`Impersonate-Group`, which `_SharedRESTClient`
    sets on every request from the client's own identity — and HTTP/1.1 never lets one request
    see another's answer. The one per-session state aiohttp keeps, cookies, is switched off
    (`DummyCookieJar`): a `services/proxy` answer could carry a dashboard's cookie, and it must
    not ride along with the next user's request.

    Bounded: `connections` per cluster (more concurrent requests wait for one), idle ones closed
    after `idle_seconds`, at most `MAX_CLUSTERS` pools (the least recently used is closed), and
    each pool replaced after `POOL_MAX_AGE_SECONDS` so a kubeconfig's credentials are read again.
    A pool belongs to the process's long-lived loop (`workers/plumbing/loop.py`); a call from any other
    loop (the CLI, a test's own loop) gets a client of its own, as `KubeClients` gives.
    `bot()` — the monitor's streams, sized by the caller — is never pooled."""

    def __init__(self, *, connections: int = POOL_CONNECTIONS, idle_seconds: float = POOL_IDLE_SECONDS,
                 loop: ProcessLoop = PROCESS_LOOP) -> None:
        self.connections, self.idle_seconds, self.process_loop = connections, idle_seconds, loop
        self._pools: OrderedDict[ClusterTarget, _ClusterPool] = OrderedDict()
        self._opening: dict[ClusterTarget, asyncio.Future[_ClusterPool]] = {}

    async def user(self, target: ClusterTarget, identity: Identity) -> ApiClient:
        if identity is None or not isinstance(identity, Identity) or not identity.user.strip():
            raise ValueError("a user client needs the user's Kubernetes identity")
        if not self.process_loop.owns_running_loop():
            return await make_user_client(target, identity)
        pool = await self._pool(target)
        api = copy.copy(pool.api)
        api.default_headers = dict(pool.api.default_headers)
        api.rest_client = _SharedRESTClient(pool.api.rest_client, identity)
        return api

    async def _pool(self, target: ClusterTarget) -> _ClusterPool:
        pool = self._pools.get(target)
        if pool is not None and time.monotonic() - pool.opened < POOL_MAX_AGE_SECONDS:
            self._pools.move_to_end(target)
            return pool
        opening = self._opening.get(target)
        if opening is not None:  # another job's first request to this cluster is opening it
            return await asyncio.shield(opening)
        future: asyncio.Future[_ClusterPool] = asyncio.get_running_loop().create_future()
        self._opening[target] = future
        try:
            fresh = await self._open(target)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a waiter re-raises it, none is also fine
            raise
        finally:
            self._opening.pop(target, None)
        future.set_result(fresh)
        if pool is not None:  # too old: in-flight requests keep their connections until they end
            asyncio.get_running_loop().call_later(self.idle_seconds, _close_later, pool)
        self._pools[target] = fresh
        self._pools.move_to_end(target)
        while len(self._pools) > MAX_CLUSTERS:
            _, evicted = self._pools.popitem(last=False)
            asyncio.get_running_loop().call_later(self.idle_seconds, _close_later, evicted)
        return fresh

    async def _open(self, target: ClusterTarget) -> _ClusterPool:
        cfg = await _configuration(target)
        api = await _own_session(ApiClient(configuration=cfg), connections=self.connections,
                                 idle_seconds=self.idle_seconds)
        return _ClusterPool(api=api, opened=time.monotonic())

    @property
    def pools(self) -> int:
        """Clusters with an open pool."""
        return len(self._pools)

    async def close(self) -> None:
        """Close every pool (a test's or a shutting-down worker's)."""
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            await pool.close()


def _close_later(pool: _ClusterPool) -> None:
    asyncio.ensure_future(pool.close())


__all__ = [
    "ClusterTarget",
    "KubeClients",
    "Identity",
    "POOL_CONNECTIONS",
    "POOL_IDLE_SECONDS",
    "WarmKubeClients",
    "make_api_client",
    "make_bot_client",
    "make_user_client",
]
