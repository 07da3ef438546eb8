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

from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import rest
from multidict import CIMultiDict
from pydantic import BaseModel, ConfigDict, Field, model_validator

from workers.contracts.identity import Identity

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
IN_CLUSTER_CA = Path("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")

_IMPERSONATION_PREFIX = "impersonate-"


class ClusterTarget(BaseModel):
    """Where a cluster is: a kubeconfig context, an explicit server, or in-cluster.

    Field names follow the WorkspaceConnection descriptor (``certificateAuthority``,
    ``tokenFile``); unknown fields are an error so a typo cannot pass silently.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    context: str | None = None
    kubeconfig: Path | None = None
    server: str | None = None
    certificate_authority: Path | None = Field(default=None, alias="certificateAuthority")
    token_file: Path | None = Field(default=None, alias="tokenFile")
    in_cluster: bool = Field(default=False, alias="inCluster")

    @model_validator(mode="after")
    def _exactly_one_way(self) -> ClusterTarget:
        """Exactly one of context / server / in_cluster, each with only its own options."""
        chosen = [bool(self.context), bool(self.server), self.in_cluster]
        if sum(chosen) != 1:
            raise ValueError("give exactly one of context, server or in_cluster")
        if self.kubeconfig is not None and not self.context:
            raise ValueError("kubeconfig is only valid with context")
        if (self.certificate_authority or self.token_file) and not self.server:
            raise ValueError("certificateAuthority and tokenFile are only valid with server")
        return self


class _ImpersonatingRESTClient(rest.RESTClientObject):
    """kubernetes_asyncio's REST client, adding repeated impersonation headers."""

    _identity: Identity

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

    def refresh(configuration: client.Configuration) -> None:
        mtime = path.stat().st_mtime
        if mtime != last_mtime[0]:
            configuration.api_key["BearerToken"] = path.read_text().strip()
            configuration.api_key_prefix["BearerToken"] = "Bearer"
            last_mtime[0] = mtime

    return refresh


async def _configuration(target: ClusterTarget) -> client.Configuration:
    """A fresh Configuration for the target; never the library's global default."""
    cfg = client.Configuration()
    if target.context:
        await config.load_kube_config(
            config_file=str(target.kubeconfig) if target.kubeconfig else None,
            context=target.context,
            client_configuration=cfg,
            persist_config=False,
        )
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


async def make_api_client(target: ClusterTarget, identity: Identity | None,
                          pool_size: int | None = None) -> client.ApiClient:
    """An ApiClient for ``target``; impersonating ``identity`` when one is given.

    Prefer ``make_user_client`` / ``make_bot_client``, which make the choice of
    identity explicit at the call site. Call this inside the event loop that
    will use the client (rq starts a fresh loop per job). ``pool_size`` caps the connections
    to the server (kubernetes_asyncio's default is 100; 0 means no cap).
    """
    cfg = await _configuration(target)
    if pool_size is not None:
        cfg.connection_pool_maxsize = pool_size
    api = client.ApiClient(configuration=cfg)
    if identity is not None:
        # Re-class the REST client ApiClient just built rather than building a second one:
        # the subclass only overrides request(), and each construction loads the system CA
        # bundle into a new SSL context (~20 ms), which is most of a status's local cost.
        rest_client = api.rest_client
        rest_client.__class__ = _ImpersonatingRESTClient
        rest_client._identity = identity
    return api


async def make_user_client(target: ClusterTarget, identity: Identity | None) -> client.ApiClient:
    """A client acting as a user; refuses to exist without that user's identity."""
    if identity is None or not isinstance(identity, Identity) or not identity.user.strip():
        raise ValueError("a user client needs the user's Kubernetes identity")
    return await make_api_client(target, identity)


async def make_bot_client(target: ClusterTarget, pool_size: int | None = None) -> client.ApiClient:
    """The bot's own read-only client, for the stall monitor only."""
    return await make_api_client(target, None, pool_size)


class KubeClients:
    """The one seam every Kubernetes client comes through (`Services.kube`): as a user
    (impersonated, for every user-initiated call) or as the bot (the monitor only). One place
    for timeouts, retries and pool sizes; tests and the shell hand in their own."""

    async def user(self, target: ClusterTarget, identity: Identity) -> client.ApiClient:
        return await make_user_client(target, identity)

    async def bot(self, target: ClusterTarget, pool_size: int | None = None) -> client.ApiClient:
        return await make_bot_client(target, pool_size)


__all__ = [
    "ClusterTarget",
    "KubeClients",
    "Identity",
    "make_api_client",
    "make_bot_client",
    "make_user_client",
]
