"""How taubot reaches a cluster: targets, impersonation on the wire, errors as values.

Every assertion about impersonation reads what the emulator *received*, so a
comma-joined group header or a request that slipped out without the headers
fails here.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pydantic
import pytest
import yaml
from kubernetes_asyncio import client, watch

from bench.emulator_process import DelayingProxy
from tests.fakes.kube_api import KubeEmulator, RecordedRequest, running_emulator
from workers.kube.client import (
    PRECONNECT,
    ClusterTarget,
    Identity,
    KubeClients,
    make_api_client,
    make_bot_client,
    make_user_client,
)
from workers.kube.reader import KubeReader, KubeRequestError, ReadError, resource_path

NS = "team-vision"
ALICE = Identity(user="alice@example.com", groups=("team-vision", "gpu-users", "oncall"))


def job_pod(i: int) -> dict[str, Any]:
    """A batch Job's pod, labelled as the Job controller labels it.

    Shape: a Pod as ``kubectl get pod -o json`` prints it, with the
    ``batch.kubernetes.io/job-name`` / ``job-name`` labels named in SPEC.md §2
    and the CrashLoopBackOff waiting state from
    /work/shared/reference/pod-failure-shapes.md ("CrashLoopBackOff / OOMKilled").
    """
    name = f"train-3-{i:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"9d0c4c1e-0000-4000-8000-{i:012d}",
            "labels": {"batch.kubernetes.io/job-name": "train-3", "job-name": "train-3"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train-3",
                                 "uid": "5f1e0e7c-7d7a-4a53-bb0a-0d1c5e7b9a10",
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"containers": [{"name": "trainer", "image": "acr.example.io/train:1.4"}],
                 "nodeName": "aks-gpu-0"},
        "status": {
            "phase": "Running",
            "containerStatuses": [{
                "name": "trainer", "ready": False, "started": False, "restartCount": 6,
                "image": "acr.example.io/train:1.4",
                "imageID": "acr.example.io/train@sha256:"
                           "3f1c2a9be0d4c7a8e5b6f7a8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8",
                "containerID": f"containerd://{i:064x}",
                "state": {"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off 5m0s restarting failed container=trainer "
                               f"pod={name}_{NS}(9d0c4c1e-0000-4000-8000-{i:012d})"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                             "startedAt": "2026-11-02T10:00:00Z",
                                             "finishedAt": "2026-11-02T10:00:05Z"}},
            }],
        },
    }


PODS = [job_pod(i) for i in range(5)]


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    """An emulator holding one Job's five pods."""
    async with KubeEmulator(PODS) as server:
        yield server


@pytest.fixture
async def alice(emu: KubeEmulator) -> AsyncIterator[client.ApiClient]:
    """A user client for alice (three groups) against the emulator."""
    api = await make_user_client(ClusterTarget(server=emu.base_url), ALICE)
    yield api
    await api.close()


def assert_impersonates_alice(requests: list[RecordedRequest]) -> None:
    """Each request names alice once and carries each group as its own header value."""
    assert requests
    for request in requests:
        assert request.header_values("Impersonate-User") == ["alice@example.com"], request.path
        assert request.header_values("Impersonate-Group") == list(ALICE.groups), request.path
        assert request.identity.groups == ALICE.groups


async def test_every_request_carries_repeated_group_headers(emu: KubeEmulator,
                                                           alice: client.ApiClient) -> None:
    reader = KubeReader(alice)
    pods = await reader.list(resource_path("", "v1", "pods", NS), limit=2)
    assert not isinstance(pods, ReadError) and len(pods) == 5
    assert reader.requests_made == 3  # three pages
    assert await reader.access_review("get", "pods", namespace=NS, subresource="log") is True
    await reader.get(resource_path("", "v1", "pods", NS, "train-3-00000"))
    await reader.text(resource_path("", "v1", "pods", NS, "train-3-00000", "log"),
                      {"tailLines": 10})
    v1 = client.CoreV1Api(alice)
    await v1.list_namespaced_pod(NS, label_selector="job-name=train-3")
    async with watch.Watch() as w:
        async for _ in w.stream(v1.list_namespaced_pod, NS, timeout_seconds=1):
            w.stop()
    paths = [r.path for r in emu.requests]
    assert paths.count("/api/v1/namespaces/team-vision/pods") == 5  # 3 pages, list, watch
    assert "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" in paths
    assert [r.query.get("continue") is not None for r in emu.requests[:3]] == [False, True, True]
    assert_impersonates_alice(emu.requests)


async def test_caller_headers_cannot_replace_the_identity(emu: KubeEmulator,
                                                          alice: client.ApiClient) -> None:
    alice.set_default_header("Impersonate-User", "system:admin")
    await client.CoreV1Api(alice).list_namespaced_pod(
        NS, _headers={"Impersonate-Group": "system:masters"})
    assert_impersonates_alice(emu.requests)


async def test_bot_client_does_not_impersonate(emu: KubeEmulator) -> None:
    async with await make_bot_client(ClusterTarget(server=emu.base_url)) as api:
        await KubeReader(api).list(resource_path("", "v1", "pods", NS))
    assert emu.requests[0].header_values("Impersonate-User") == []
    assert emu.requests[0].identity.user == "system:serviceaccount:taubot:taubot"


async def test_user_client_requires_an_identity(emu: KubeEmulator) -> None:
    target = ClusterTarget(server=emu.base_url)
    with pytest.raises(ValueError):
        await make_user_client(target, None)
    with pytest.raises(ValueError):
        await make_user_client(target, Identity.model_construct(user="", groups=()))
    for bad in ({"user": ""}, {"user": "  "}, {"user": "a\nb"}, {"user": "a", "groups": [""]}):
        with pytest.raises(pydantic.ValidationError):
            Identity.model_validate(bad)
    assert emu.requests == []


async def test_forbidden_list_is_permission_denied_never_not_found(
        emu: KubeEmulator, alice: client.ApiClient) -> None:
    emu.forbid("list", "pods", group="gpu-users", namespace=NS)
    reader = KubeReader(alice)
    result = await reader.list(resource_path("", "v1", "pods", NS),
                               label_selector="job-name=train-3")
    assert isinstance(result, ReadError)
    assert result.kind == "forbidden" and result.status == 403
    assert result.describe() == "permission denied (list pods)"
    assert "alice@example.com" in result.detail
    assert await reader.access_review("list", "pods", namespace=NS) is False


async def test_forbidden_access_review_itself_is_a_value(emu: KubeEmulator,
                                                         alice: client.ApiClient) -> None:
    emu.forbid("create", "selfsubjectaccessreviews", user=ALICE.user)
    result = await KubeReader(alice).access_review("list", "pods", namespace=NS)
    assert isinstance(result, ReadError)
    assert result.describe() == "permission denied (create selfsubjectaccessreviews)"


async def test_missing_object_is_not_found(alice: client.ApiClient) -> None:
    result = await KubeReader(alice).get(
        resource_path("batch", "v1", "jobs", NS, "train-404"))
    assert isinstance(result, ReadError)
    assert (result.kind, result.describe(), result.resource) == ("not_found", "not found", "jobs")


@pytest.mark.parametrize("status", [500, 503])
async def test_server_errors_are_unavailable(emu: KubeEmulator, alice: client.ApiClient,
                                             status: int) -> None:
    emu.fail("pods", status=status)
    result = await KubeReader(alice).list(resource_path("", "v1", "pods", NS))
    assert isinstance(result, ReadError)
    assert result.kind == "unavailable"
    assert result.describe() == f"unavailable (HTTP {status})"


async def test_latency_above_timeout_is_unavailable_timeout(emu: KubeEmulator,
                                                            alice: client.ApiClient) -> None:
    emu.latency = 1.0
    reader = KubeReader(alice, timeout=0.2)
    started = time.monotonic()
    result = await reader.get(resource_path("", "v1", "pods", NS, "train-3-00000"))
    assert time.monotonic() - started < 0.9
    assert isinstance(result, ReadError)
    assert result.describe() == "unavailable (timeout after 0.2s)"
    assert reader.requests_made == 1


async def test_connection_refused_is_unavailable() -> None:
    with socket.socket() as sock:  # a port that nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = await make_bot_client(ClusterTarget(server=f"http://127.0.0.1:{port}"))
    async with api:
        result = await KubeReader(api, timeout=2).get("/version")
    assert isinstance(result, ReadError)
    assert result.describe() == "unavailable (connection refused)"


async def test_bad_selector_is_a_bug_not_a_value(alice: client.ApiClient) -> None:
    with pytest.raises(KubeRequestError) as err:
        await KubeReader(alice).list(resource_path("", "v1", "pods", NS),
                                     field_selector="spec.containers=1")
    assert err.value.status == 400


async def test_list_items_look_like_kubectl_output(alice: client.ApiClient) -> None:
    pods = await KubeReader(alice).list(resource_path("", "v1", "pods", NS))
    assert not isinstance(pods, ReadError)
    assert {(p["apiVersion"], p["kind"]) for p in pods} == {("v1", "Pod")}
    assert pods[0]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] \
        == "CrashLoopBackOff"


async def test_kubeconfig_context_target(emu: KubeEmulator, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "emu", "cluster": {"server": emu.base_url}},
            {"name": "elsewhere", "cluster": {"server": "http://127.0.0.1:9"}},
        ],
        "users": [{"name": "taubot", "user": {"token": "emulator-token"}}],
        "contexts": [
            {"name": "aks-east", "context": {"cluster": "emu", "user": "taubot"}},
            {"name": "aks-west", "context": {"cluster": "elsewhere", "user": "taubot"}},
        ],
        "current-context": "aks-west",
    }))
    target = ClusterTarget.model_validate({"context": "aks-east", "kubeconfig": str(kubeconfig)})
    api = await make_user_client(target, ALICE)
    async with api:
        pods = await KubeReader(api).list(resource_path("", "v1", "pods", NS))
    assert not isinstance(pods, ReadError) and len(pods) == 5
    assert emu.requests[0].headers["Authorization"] == "Bearer emulator-token"
    assert_impersonates_alice(emu.requests)


async def test_server_target_reads_and_rereads_its_token_file(emu: KubeEmulator,
                                                             tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    target = ClusterTarget.model_validate({"server": emu.base_url, "tokenFile": str(token)})
    api = await make_api_client(target, None)
    async with api:
        reader = KubeReader(api)
        await reader.get("/version")
        token.write_text("rotated\n")
        stat = token.stat()
        os.utime(token, (stat.st_atime, stat.st_mtime + 5))
        await reader.get("/version")
    assert [r.headers["Authorization"] for r in emu.requests] == ["Bearer first",
                                                                  "Bearer rotated"]


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"context": "a", "server": "http://x"},
        {"server": "http://x", "inCluster": True},
        {"server": "http://x", "kubeconfig": "/k"},
        {"context": "a", "tokenFile": "/t"},
        {"context": "a", "contxt": "typo"},
    ],
)
def test_cluster_target_needs_exactly_one_way(fields: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        ClusterTarget.model_validate(fields)


def test_cluster_target_descriptor_spelling() -> None:
    """The descriptor's camelCase names and Python's snake_case both work."""
    a = ClusterTarget.model_validate({"server": "https://k", "certificateAuthority": "/ca"})
    b = ClusterTarget(server="https://k", certificate_authority=Path("/ca"))
    assert a == b
    assert ClusterTarget.model_validate({"in_cluster": True}).in_cluster


def test_resource_path_builds_what_the_server_routes() -> None:
    cases = [
        (("", "v1", "pods", NS), "/api/v1/namespaces/team-vision/pods"),
        (("kueue.x-k8s.io", "v1beta2", "clusterqueues"), "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"),
        (("", "v1", "pods", NS, "p", "log"), "/api/v1/namespaces/team-vision/pods/p/log"),
        (("", "v1", "services", NS, "head-svc:dashboard", "proxy/api/jobs/"),
         "/api/v1/namespaces/team-vision/services/head-svc:dashboard/proxy/api/jobs/"),
        (("", "v1", "pods", NS, "a b"), "/api/v1/namespaces/team-vision/pods/a%20b"),
    ]
    for args, expected in cases:
        assert resource_path(*args) == expected
    with pytest.raises(ValueError):
        resource_path("", "v1", "pods", NS, "x/y")
    with pytest.raises(ValueError):
        resource_path("", "v1", "pods", NS, None, "log")


def test_a_warm_pool_takes_the_proxy_the_environment_names_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool reads HTTPS_PROXY/NO_PROXY once (aiohttp's `trust_env` re-read them, and ~/.netrc,
    on every request): an API server behind the proxy gets it, one NO_PROXY exempts does not."""
    from workers.kube.client import env_proxy

    for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("https://aks-east.hcp.eastus.azmk8s.io:443") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp.example:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,.internal.example")
    assert env_proxy("https://aks-east.hcp.eastus.azmk8s.io:443") == "http://proxy.corp.example:3128"
    assert env_proxy("https://127.0.0.1:6443") is None
    assert env_proxy("https://api.internal.example:6443") is None


async def test_a_one_shot_client_opens_connections_ahead_and_its_requests_take_them(emu: KubeEmulator) -> None:
    """A cold `taubot diagnose` sends its second round at once, wider than its first: each request
    of it that found no open connection waited a handshake (a round trip, two with TLS) first.
    The one-shot client opens `PRECONNECT` connections beside the first requests; the server
    sees them before any request, and requests sent together take them instead of opening more.
    Counted at a TCP proxy in front of the emulator (bench/emulator_process.py, no delay)."""
    proxy = DelayingProxy(("127.0.0.1", int(urlsplit(emu.base_url).port or 0)), rtt=0.0)
    try:
        api = await KubeClients().user(ClusterTarget(server=f"http://127.0.0.1:{proxy.port}"), ALICE)
        try:
            assert await asyncio.to_thread(proxy.wait_for_connections, PRECONNECT, 10)
            await asyncio.wait_for(api.rest_client.opened_ahead(), 10)  # and idle in the client's pool
            assert emu.requests == [] and proxy.connections == PRECONNECT
            reader = KubeReader(api)
            pods = resource_path("", "v1", "pods", NS)
            answers = await asyncio.gather(*(reader.list(pods) for _ in range(PRECONNECT)))
            assert all(isinstance(a, list) and len(a) == len(PODS) for a in answers)
            assert proxy.connections == PRECONNECT  # every request on a connection opened ahead
            assert_impersonates_alice(emu.requests)
        finally:
            await api.close()
    finally:
        proxy.close()


async def test_a_netrc_entry_for_the_api_server_is_not_sent(emu: KubeEmulator, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """taubot authenticates with the kubeconfig's credentials only: a ~/.netrc naming the API
    server's host adds no Basic credentials to a user's request (aiohttp's `trust_env` would, and
    next to a bearer token it refuses the request outright)."""
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login mallory password hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    token = tmp_path / "token"
    token.write_text("bot-token\n")
    api = await make_user_client(ClusterTarget(server=emu.base_url, token_file=token), ALICE)
    try:
        assert isinstance(await KubeReader(api).list(resource_path("", "v1", "pods", NS)), list)
    finally:
        await api.close()
    [request] = emu.requests
    assert request.header_values("Authorization") == ["Bearer bot-token"]


def test_a_workers_pool_sends_a_round_of_64_rank_log_reads_at_once() -> None:
    """A hung or failed distributed run's third round reads every rank's log tail (at most 64
    pods, SPEC §5c) beside its other reads: a worker's shared pool (`WarmKubeClients`, on the
    process loop as a job runs) must not hold some of them back for a connection, or the round
    arrives in waves — a round trip each (the pool's former 16 connections took 32 ranks in two).
    The emulator holds each answer, so a request's round says whether it waited for another's."""
    from workers.kube.client import POOL_CONNECTIONS, WarmKubeClients
    from workers.plumbing.loop import ProcessLoop

    # Pods of an Indexed Job (batch/v1, shape as in `job_pod`); their logs are what a rank read asks for.
    pods = [job_pod(i) for i in range(64)]
    loop = ProcessLoop(name="test-warm-pool")
    with running_emulator(pods, latency=0.3) as emu:
        async def read_every_rank() -> list[object]:
            clients = WarmKubeClients(loop=loop)
            try:
                reader = KubeReader(await clients.user(ClusterTarget(server=emu.base_url), ALICE))
                return await asyncio.gather(*(
                    reader.text(resource_path("", "v1", "pods", NS, p["metadata"]["name"], "log"),
                                {"tailLines": 500}) for p in pods))
            finally:
                await clients.close()

        answers = loop.run(read_every_rank())
        assert POOL_CONNECTIONS >= 64 + 8
        assert all(not isinstance(a, ReadError) for a in answers), answers[:3]
        assert len(emu.requests) == 64 and emu.rounds() == 1, sorted({r.round for r in emu.requests})
        assert_impersonates_alice(emu.requests)
