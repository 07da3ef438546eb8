"""The Kubernetes emulator, driven through kubernetes_asyncio over real HTTP.

These pin down the behaviours the collectors rely on: selectors really filter,
pagination really pages, ``watch=True`` really streams, 403/404 bodies are the
real Status shapes, and both Kueue and DRA versions are served.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakes.kube_api import BOT_USER, KubeEmulator, label_selector_matches, running_emulator
from workers.kube.client import ClusterTarget, Identity, make_bot_client, make_user_client
from workers.kube.reader import KubeReader, ReadError, proxy_path, resource_path

NS = "team-vision"

# Head pod of a RayCluster that cannot be scheduled. Shape and scheduler message
# from kuberay issue #2188, quoted in /work/shared/reference/pod-failure-shapes.md;
# labels from KubeRay's labelPod (/work/shared/reference/kuberay-status.md).
HEAD_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "train-7-raycluster-9c546-head-gdxkg",
        "namespace": NS,
        "uid": "0b1c7a52-3f7e-4b8e-9a43-5f3d1f0c9e11",
        "labels": {
            "ray.io/cluster": "train-7-raycluster-9c546",
            "ray.io/node-type": "head",
            "ray.io/is-ray-node": "yes",
            "app.kubernetes.io/name": "kuberay",
        },
    },
    "spec": {
        "containers": [{"name": "ray-head", "image": "rayproject/ray:2.9.0"}],
        "schedulerName": "default-scheduler",
    },
    "status": {
        "phase": "Pending",
        "conditions": [{
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": "2024-06-12T13:55:11Z",
            "reason": "Unschedulable",
            "message": "0/5 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated "
                       "taint {node-role.kubernetes.io/master: }, 3 node(s) didn't match Pod's "
                       "node affinity/selector. preemption: 0/5 nodes are available: 1 No "
                       "preemption victims found for incoming pod, 4 Preemption is not helpful "
                       "for scheduling..",
        }],
    },
}


def worker_pod(i: int, phase: str = "Running", node: str = "aks-gpu-0") -> dict[str, Any]:
    """A Ray worker pod named as in the Ray docs (kuberay-status.md, 'Pod labels')."""
    pod = copy.deepcopy(HEAD_POD)
    pod["metadata"]["name"] = f"train-7-raycluster-9c546-worker-small-group-{i:05d}"
    pod["metadata"]["uid"] = f"00000000-0000-4000-8000-{i:012d}"
    pod["metadata"]["labels"]["ray.io/node-type"] = "worker"
    pod["spec"] = {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.9.0"}],
                   "nodeName": node}
    pod["status"] = {"phase": phase}
    return pod


# Admitted Workload, from Kueue's troubleshooting_jobs.md, quoted in
# /work/shared/reference/kueue-workload-status.md ("Verbatim examples" 1).
WORKLOAD: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {"name": "rayjob-train-7-4e1b2", "namespace": NS,
                 "labels": {"kueue.x-k8s.io/job-uid": "6b0f3a1e-2c55-4d2b-8f0e-3d1c2b4a5e6f"}},
    "spec": {"queueName": "vision-default"},
    "status": {
        "admission": {"clusterQueue": "cluster-queue", "podSetAssignments": [
            {"count": 3, "flavors": {"cpu": "default-flavor", "memory": "default-flavor"},
             "name": "main", "resourceUsage": {"cpu": "3", "memory": "600Mi"}}]},
        "conditions": [
            {"lastTransitionTime": "2024-03-19T20:49:17Z",
             "message": "Quota reserved in ClusterQueue cluster-queue",
             "reason": "QuotaReserved", "status": "True", "type": "QuotaReserved"},
            {"lastTransitionTime": "2024-03-19T20:49:17Z", "message": "The workload is admitted",
             "reason": "Admitted", "status": "True", "type": "Admitted"},
        ],
    },
}

# A pending DRA claim, v1 shape from pod-failure-shapes.md ("ResourceClaim status").
CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "train-7-worker-gpu-x7k2p", "namespace": NS,
                 "finalizers": ["resource.kubernetes.io/delete-protection"]},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "allocationMode": "ExactCount", "count": 1, "deviceClassName": "gpu.nvidia.com"}}]}},
    "status": {},
}

# Core v1 FailedScheduling event for the head pod (pod-failure-shapes.md, table row
# "scheduling": FailedScheduling / default-scheduler, Warning).
EVENT: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Event",
    "metadata": {"name": "train-7-raycluster-9c546-head-gdxkg.17d8a", "namespace": NS},
    "involvedObject": {"kind": "Pod", "name": HEAD_POD["metadata"]["name"], "namespace": NS,
                       "uid": HEAD_POD["metadata"]["uid"], "apiVersion": "v1"},
    "reason": "FailedScheduling",
    "message": HEAD_POD["status"]["conditions"][0]["message"],
    "source": {"component": "default-scheduler"},
    "type": "Warning",
    "count": 4,
}

# dcgm-exporter exposition, trimmed from /work/shared/reference/dcgm-exporter.md.
DCGM_METRICS = (
    '# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n'
    '# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n'
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",modelName="NVIDIA A100 80GB PCIe",namespace="team-vision",'
    'pod="train-7-raycluster-9c546-worker-small-group-00001"} 87\n'
)
DCGM_POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "nvidia-dcgm-exporter-5xk2d", "namespace": "gpu-operator",
                 "labels": {"app.kubernetes.io/name": "dcgm-exporter"}},
    "spec": {"containers": [{"name": "nvidia-dcgm-exporter", "image": "nvcr.io/dcgm-exporter"}],
             "nodeName": "aks-gpu-0"},
    "status": {"phase": "Running"},
}
HEAD_SVC: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Service",
    "metadata": {"name": "train-7-raycluster-9c546-head-svc", "namespace": NS},
    "spec": {"ports": [{"name": "dashboard", "port": 8265}]},
}
NAMESPACE: dict[str, Any] = {"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": NS}}


def seed() -> list[dict[str, Any]]:
    """A small cluster: one run's pods, its Workload, a claim, an event, GPU exporter."""
    return [HEAD_POD, *(worker_pod(i) for i in range(1, 4)), worker_pod(4, "Failed", "aks-gpu-1"),
            WORKLOAD, CLAIM, EVENT, DCGM_POD, HEAD_SVC, NAMESPACE]


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    """An emulator seeded with ``seed()``, on a free port, stopped after the test."""
    async with KubeEmulator(seed()) as server:
        yield server


@pytest.fixture
async def api(emu: KubeEmulator) -> AsyncIterator[client.ApiClient]:
    """The bot's client against the emulator (no impersonation)."""
    api_client = await make_bot_client(ClusterTarget(server=emu.base_url))
    yield api_client
    await api_client.close()


async def test_label_selectors_filter(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    cases = {
        "ray.io/node-type=worker": 4,
        "ray.io/node-type==head": 1,
        "ray.io/node-type!=head": 4,
        "ray.io/node-type in (head,worker),ray.io/cluster=train-7-raycluster-9c546": 5,
        "ray.io/node-type notin (worker)": 1,
        "ray.io/cluster": 5,
        "!ray.io/cluster": 0,
        "ray.io/cluster=other": 0,
    }
    for selector, expected in cases.items():
        pods = await v1.list_namespaced_pod(NS, label_selector=selector)
        assert len(pods.items) == expected, selector


def test_label_selector_table() -> None:
    labels = {"a": "1", "b": "2"}
    assert label_selector_matches("a=1,b in (2, 3)", labels)
    assert not label_selector_matches("a=1,c", labels)
    assert label_selector_matches("!c,b notin (3)", labels)
    with pytest.raises(ValueError):
        label_selector_matches("a in 1)", labels)


async def test_field_selectors_filter(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    failed = await v1.list_namespaced_pod(NS, field_selector="status.phase=Failed")
    assert [p.metadata.name for p in failed.items] == [worker_pod(4)["metadata"]["name"]]
    on_node = await v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=aks-gpu-0")
    assert {p.metadata.namespace for p in on_node.items} == {NS, "gpu-operator"}
    not_running = await v1.list_namespaced_pod(
        NS, field_selector="status.phase!=Running,metadata.namespace==" + NS)
    assert len(not_running.items) == 2
    events = await v1.list_namespaced_event(
        NS, field_selector=f"involvedObject.kind=Pod,involvedObject.name={HEAD_POD['metadata']['name']}")
    assert [e.reason for e in events.items] == ["FailedScheduling"]
    with pytest.raises(ApiException) as err:
        await v1.list_namespaced_pod(NS, field_selector="spec.bogus=1")
    assert err.value.status == 400


async def test_events_served_through_both_event_apis(api: client.ApiClient) -> None:
    reader = KubeReader(api)
    uid = HEAD_POD["metadata"]["uid"]
    new = await reader.list(resource_path("events.k8s.io", "v1", "events", NS),
                            field_selector=f"regarding.uid={uid}")
    assert not isinstance(new, ReadError)
    assert [e["note"] for e in new] == [EVENT["message"]]
    assert new[0]["apiVersion"] == "events.k8s.io/v1" and new[0]["regarding"]["kind"] == "Pod"


async def test_pagination_with_limit_and_continue(emu: KubeEmulator,
                                                  api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    first = await v1.list_namespaced_pod(NS, limit=2)
    assert len(first.items) == 2 and first.metadata._continue
    assert first.metadata.resource_version
    names = [p.metadata.name for p in first.items]
    token = first.metadata._continue
    while token:
        page = await v1.list_namespaced_pod(NS, limit=2, _continue=token)
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
    assert len(names) == 5 == len(set(names))
    assert [r.query.get("limit") for r in emu.requests] == ["2", "2", "2"]
    assert "continue" in emu.requests[1].query


async def test_list_items_have_no_typemeta_for_builtin_types(emu: KubeEmulator,
                                                             api: client.ApiClient) -> None:
    """Like a real API server: kubectl, not the server, adds kind/apiVersion to items."""
    status, body = await _raw(api, "/api/v1/namespaces/team-vision/pods?limit=1")
    assert status == 200 and body["kind"] == "PodList"
    assert "kind" not in body["items"][0]
    status, body = await _raw(api, "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-vision/workloads")
    assert body["items"][0]["kind"] == "Workload"


async def test_watch_streams_added_then_mutations(emu: KubeEmulator,
                                                  api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    head = HEAD_POD["metadata"]["name"]

    def mutate() -> None:
        scheduled = copy.deepcopy(HEAD_POD)
        scheduled["status"] = {"phase": "Running"}
        emu.upsert(scheduled)
        emu.upsert(worker_pod(9))
        emu.delete("Pod", NS, worker_pod(1)["metadata"]["name"])
        emu.upsert({**worker_pod(10), "metadata": {**worker_pod(10)["metadata"],
                                                   "labels": {"other": "x"}}})

    events: list[tuple[str, str, str]] = []
    started = time.monotonic()
    async with watch.Watch() as w:
        async for event in w.stream(v1.list_namespaced_pod, NS,
                                    label_selector="ray.io/cluster", timeout_seconds=1):
            events.append((event["type"], event["object"].metadata.name,
                           event["object"].status.phase))
            if len(events) == 5:  # the initial ADDED events are in: the watch is open, change the pods
                mutate()
    assert time.monotonic() - started < 3
    assert [e[0] for e in events[:5]] == ["ADDED"] * 5
    assert events[5:] == [
        ("MODIFIED", head, "Running"),
        ("ADDED", worker_pod(9)["metadata"]["name"], "Running"),
        ("DELETED", worker_pod(1)["metadata"]["name"], "Running"),
    ]
    assert emu.requests[-1].query["watch"] == "True"


async def test_pod_log_container_and_tail_lines() -> None:
    name = HEAD_POD["metadata"]["name"]
    logs = {(NS, name, "ray-head"): "line 1\nline 2\nTraceback (most recent call last):\n"}
    async with KubeEmulator(seed(), pod_logs=logs) as emu:
        api = await make_bot_client(ClusterTarget(server=emu.base_url))
        async with api:
            v1 = client.CoreV1Api(api)
            text = await v1.read_namespaced_pod_log(name, NS, container="ray-head", tail_lines=2)
            assert text == "line 2\nTraceback (most recent call last):\n"
            reader = KubeReader(api)
            whole = await reader.text(resource_path("", "v1", "pods", NS, name, "log"), {})
            assert isinstance(whole, str) and whole.startswith("line 1")
            bad = await reader.text(resource_path("", "v1", "pods", NS, name, "log"),
                                    {"container": "nope"})
            assert isinstance(bad, ReadError) and bad.status == 400
    assert emu.requests[0].query["tailLines"] == "2"


async def test_pod_and_service_proxy(emu: KubeEmulator, api: client.ApiClient) -> None:
    emu.register_proxy("pods", "gpu-operator", "nvidia-dcgm-exporter-5xk2d", 9400, "metrics",
                       DCGM_METRICS)
    svc = HEAD_SVC["metadata"]["name"]
    emu.register_proxy("Service", NS, svc, "dashboard", "api/jobs/",
                       json.dumps([{"status": "RUNNING"}]), content_type="application/json")
    emu.register_proxy("pods", NS, HEAD_POD["metadata"]["name"], None, "healthz", "ok")
    reader = KubeReader(api)
    metrics = await reader.text(
        proxy_path("pods", "gpu-operator", "nvidia-dcgm-exporter-5xk2d", 9400, "metrics"))
    assert isinstance(metrics, str) and "DCGM_FI_DEV_GPU_UTIL" in metrics
    jobs = await reader.text(proxy_path("services", NS, svc, "dashboard", "api/jobs/"))
    assert jobs == '[{"status": "RUNNING"}]'
    health = await reader.text(proxy_path("pods", NS, HEAD_POD["metadata"]["name"], None,
                                          "healthz"))
    assert health == "ok"
    v1 = client.CoreV1Api(api)
    via_typed = await v1.connect_get_namespaced_pod_proxy_with_path(
        "nvidia-dcgm-exporter-5xk2d:9400", "gpu-operator", "metrics")
    assert "DCGM_FI_DEV_GPU_UTIL" in via_typed
    nothing = await reader.text(proxy_path("pods", "gpu-operator", "nvidia-dcgm-exporter-5xk2d",
                                           9400, "other"))
    assert isinstance(nothing, ReadError) and nothing.kind == "unavailable"
    assert emu.requests[0].path == "/api/v1/namespaces/gpu-operator/pods/" \
        "nvidia-dcgm-exporter-5xk2d:9400/proxy/metrics"


async def test_forbidden_for_one_user_not_another(emu: KubeEmulator) -> None:
    emu.forbid("list", "pods", user="alice@example.com", namespace=NS)
    target = ClusterTarget(server=emu.base_url)
    alice = await make_user_client(target, Identity(user="alice@example.com"))
    bob = await make_user_client(target, Identity(user="bob@example.com", groups=("team-vision",)))
    async with alice, bob:
        with pytest.raises(ApiException) as err:
            await client.CoreV1Api(alice).list_namespaced_pod(NS)
        assert err.value.status == 403
        body = json.loads(err.value.body)
        assert body == {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": 'pods is forbidden: User "alice@example.com" cannot list resource "pods" '
                       'in API group "" in the namespace "team-vision"',
            "reason": "Forbidden", "details": {"kind": "pods"}, "code": 403,
        }
        assert len((await client.CoreV1Api(bob).list_namespaced_pod(NS)).items) == 5
        # the rule is about listing: alice can still get one pod, and the SSAR agrees
        await client.CoreV1Api(alice).read_namespaced_pod(HEAD_POD["metadata"]["name"], NS)
        assert await KubeReader(alice).access_review("list", "pods", namespace=NS) is False
        assert await KubeReader(bob).access_review("list", "pods", namespace=NS) is True
    assert emu.requests[0].identity.user == "alice@example.com"


async def test_a_forbidden_custom_resource_is_named_with_its_group(emu: KubeEmulator) -> None:
    """The API server's RBAC message names the group-qualified resource for a CRD (apiserver
    authorizer via schema.GroupResource): `rayjobs.ray.io "train" is forbidden`."""
    emu.forbid("get", "rayjobs", user="alice@example.com", namespace=NS)
    alice = await make_user_client(ClusterTarget(server=emu.base_url), Identity(user="alice@example.com"))
    async with alice:
        with pytest.raises(ApiException) as err:
            await client.CustomObjectsApi(alice).get_namespaced_custom_object("ray.io", "v1", NS,
                                                                              "rayjobs", "train")
    assert json.loads(err.value.body)["message"] == (
        'rayjobs.ray.io "train" is forbidden: User "alice@example.com" cannot get resource "rayjobs" '
        'in API group "ray.io" in the namespace "team-vision"')


async def test_forbid_by_group(emu: KubeEmulator) -> None:
    emu.forbid("get", "pods", group="contractors", subresource="log")
    target = ClusterTarget(server=emu.base_url)
    carol = await make_user_client(target, Identity(user="carol", groups=("contractors",)))
    async with carol:
        reader = KubeReader(carol)
        log = await reader.text(resource_path("", "v1", "pods", NS, HEAD_POD["metadata"]["name"],
                                              "log"))
        assert isinstance(log, ReadError) and log.describe() == "permission denied (get pods/log)"
        assert isinstance(await reader.get(resource_path("", "v1", "pods", NS,
                                                         HEAD_POD["metadata"]["name"])), dict)


async def test_missing_object_is_404_with_status_body(api: client.ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        await client.CoreV1Api(api).read_namespaced_pod("x", NS)
    assert err.value.status == 404
    assert json.loads(err.value.body) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pods "x" not found', "reason": "NotFound",
        "details": {"name": "x", "kind": "pods"}, "code": 404,
    }


async def test_unknown_resource_is_404_empty_known_list_is_200(api: client.ApiClient) -> None:
    status, body = await _raw(api, "/apis/kueue.x-k8s.io/v1beta2/clusterqueues")
    assert status == 200 and body["items"] == [] and body["kind"] == "ClusterQueueList"
    status, _ = await _raw(api, "/apis/example.com/v1/widgets")
    assert status == 404
    status, body = await _raw(api, "/apis/taugrid.io/v1alpha1/tauworkspaces")
    assert status == 200 and body["items"] == []


async def test_kueue_and_dra_served_in_every_version(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    for version in ("v1beta2", "v1beta1"):
        listed = await custom.list_namespaced_custom_object("kueue.x-k8s.io", version, NS,
                                                            "workloads")
        assert listed["items"][0]["apiVersion"] == f"kueue.x-k8s.io/{version}"
        one = await custom.get_namespaced_custom_object("kueue.x-k8s.io", version, NS,
                                                        "workloads", WORKLOAD["metadata"]["name"])
        assert one["apiVersion"] == f"kueue.x-k8s.io/{version}"
    reader = KubeReader(api)
    for version in ("v1", "v1beta2", "v1beta1"):
        claims = await reader.list(resource_path("resource.k8s.io", version, "resourceclaims", NS))
        assert not isinstance(claims, ReadError)
        assert claims[0]["apiVersion"] == f"resource.k8s.io/{version}"
        assert claims[0]["kind"] == "ResourceClaim"
    gone = await reader.list(resource_path("resource.k8s.io", "v1alpha3", "resourceclaims", NS))
    assert isinstance(gone, ReadError) and gone.kind == "not_found"


async def test_serve_versions_models_an_older_cluster(emu: KubeEmulator,
                                                      api: client.ApiClient) -> None:
    emu.serve_versions("kueue.x-k8s.io", ["v1beta1"])
    status, _ = await _raw(api, "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-vision/workloads")
    assert status == 404


async def test_latency_is_applied(emu: KubeEmulator, api: client.ApiClient) -> None:
    emu.latency = 0.3
    started = time.monotonic()
    await client.CoreV1Api(api).list_namespaced_pod(NS)
    assert time.monotonic() - started >= 0.3


async def test_fault_injection_counts_down(emu: KubeEmulator, api: client.ApiClient) -> None:
    emu.fail("pods", status=503, times=1)
    v1 = client.CoreV1Api(api)
    with pytest.raises(ApiException) as err:
        await v1.list_namespaced_pod(NS)
    assert err.value.status == 503
    assert json.loads(err.value.body)["reason"] == "ServiceUnavailable"
    assert len((await v1.list_namespaced_pod(NS)).items) == 5


async def test_version_and_healthz(api: client.ApiClient) -> None:
    info = await client.VersionApi(api).get_code()
    assert info.git_version == "v1.34.1" and info.minor == "34"
    status, _ = await _raw(api, "/healthz", parse=False)
    assert status == 200


async def test_cluster_scoped_objects_and_request_identity(emu: KubeEmulator,
                                                           api: client.ApiClient) -> None:
    emu.upsert({"apiVersion": "taugrid.io/v1alpha1", "kind": "TauWorkspace",
                "metadata": {"name": "vision"}, "spec": {"namespace": NS},
                "status": {"phase": "Ready"}})
    custom = client.CustomObjectsApi(api)
    ws = await custom.get_cluster_custom_object("taugrid.io", "v1alpha1", "tauworkspaces",
                                                "vision")
    assert ws["status"]["phase"] == "Ready"
    ns = await client.CoreV1Api(api).read_namespace(NS)
    assert ns.metadata.name == NS
    assert emu.requests[-1].identity.user == BOT_USER
    assert emu.requests[-1].header_values("Impersonate-User") == []


def test_thread_hosted_emulator_from_sync_code() -> None:
    """rq jobs are synchronous functions that start their own loop with asyncio.run."""

    async def job(base_url: str) -> list[str]:
        api = await make_bot_client(ClusterTarget(server=base_url))
        async with api:
            pods = await KubeReader(api).list(resource_path("", "v1", "pods", NS),
                                              label_selector="ray.io/node-type=head")
        assert not isinstance(pods, ReadError)
        return [p["status"]["phase"] for p in pods]

    with running_emulator(seed()) as emu:
        assert asyncio.run(job(emu.base_url)) == ["Pending"]
        running = copy.deepcopy(HEAD_POD)
        running["status"] = {"phase": "Running"}
        emu.upsert(running)  # from this thread, while the server loop runs in another
        assert asyncio.run(job(emu.base_url)) == ["Running"]
        assert len(emu.requests) == 2


async def _raw(api: client.ApiClient, path_and_query: str,
               parse: bool = True) -> tuple[int, Any]:
    """GET a path through the ApiClient's own session and return (status, JSON)."""
    url = api.configuration.host + path_and_query
    async with api.rest_client.pool_manager.get(url) as response:
        data = await response.read()
        return response.status, json.loads(data) if parse else data
