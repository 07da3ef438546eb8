"""`build_profile` without I/O: which samples count, and every way evidence can be missing.

Scrapes follow shared/reference/dcgm-exporter.md (see tests/fixtures/dcgm.py). The rule under
test throughout: missing evidence is `unavailable` with a reason, never a zero; a real 0 % is 0 %.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from pydantic import TypeAdapter

from tests.fixtures import k8s
from tests.fixtures.dcgm import FP64_BLANK, INT64_BLANK_NOT_FOUND, README_SCRAPE, Gpu, scrape
from workers.collect.dcgm import read_problem
from workers.diagnosis.profile import (
    CUDA_REASON,
    FINISHED_REASON,
    Activity,
    Allocation,
    GpuProfile,
    Stat,
    Unavailable,
)
from workers.diagnosis.profile_build import build_profile
from workers.kube.reader import ReadError
from workers.render.profile import profile_lines, render_profile_text, utilization_sparkline

NODE_A, NODE_B = "aks-gpupool-00000000-vmss000000", "aks-gpupool-00000000-vmss000001"
JOB = k8s.job("train", gpus=2)
POD = k8s.job_pod(JOB, node=NODE_A)
POD_B = k8s.job_pod(JOB, 1, node=NODE_B)
NAME = POD["metadata"]["name"]
NAME_B = POD_B["metadata"]["name"]


def mine(index: int, util: float | None = 0, fb_used: float | None = 0, *, pod: str = NAME,
         node: str = NODE_A, **kw: object) -> Gpu:
    return Gpu(index, pod=pod, namespace=k8s.NS, container="trainer", util=util, fb_used=fb_used,
               node=node, **kw)  # type: ignore[arg-type]


def theirs(index: int, util: float = 100, fb_used: float = 70000, *, pod: str = "other-team-0",
           namespace: str = "team-speech") -> Gpu:
    return Gpu(index, pod=pod, namespace=namespace, container="main", util=util, fb_used=fb_used,
               node=NODE_A)


@dataclass
class Case:
    name: str
    scrapes: dict[str, str | ReadError]
    expect: dict[str, str]  # key → substring of its profile_lines value
    pods: list[dict] = field(default_factory=lambda: [POD])
    claims: dict[str, dict] = field(default_factory=dict)
    finished: bool = False
    discovery_problem: str | None = None
    node_problems: dict[str, str] = field(default_factory=dict)


FORBIDDEN_PROXY = ReadError(kind="forbidden", verb="get", resource="pods/proxy", status=403)
PROXY_503 = ReadError(kind="unavailable", verb="get", resource="pods/proxy", status=503, detail="HTTP 503")

CASES = [
    Case("active: any utilization above zero",
         {NODE_A: scrape([mine(0, 80, 40960), mine(1, 20, 20480)], hostname=NODE_A)},
         {"gpu_utilization": "avg 50 %, max 80 % (2 GPUs)", "gpu_memory": "avg 30 GiB, max 40 GiB (2 GPUs)",
          "gpu_activity": "active", "gpu_devices": f"{NAME}/trainer GPU 0 GPU-"}),
    Case("a real zero is shown as 0 %, and idle when framebuffer is empty too",
         {NODE_A: scrape([mine(0, 0, 0), mine(1, 0, 0)], hostname=NODE_A)},
         {"gpu_utilization": "avg 0 %, max 0 % (2 GPUs)", "gpu_memory": "avg 0 GiB, max 0 GiB",
          "gpu_activity": "idle"}),
    Case("idle now: zero utilization, framebuffer still in use",
         {NODE_A: scrape([mine(0, 0, 30720), mine(1, 0, 0)], hostname=NODE_A)},
         {"gpu_utilization": "max 0 %", "gpu_memory": "avg 15 GiB, max 30 GiB", "gpu_activity": "idle now"}),
    Case("other pods on the same GPU node do not count",
         {NODE_A: scrape([mine(0, 0, 1024), theirs(1), theirs(2, pod=NAME, namespace="team-speech"),
                          Gpu(3, node=NODE_A)], hostname=NODE_A)},
         {"gpu_utilization": "avg 0 %, max 0 % (1 GPU)", "gpu_memory": "avg 1 GiB, max 1 GiB (1 GPU)",
          "gpu_activity": "idle now"}),
    Case("Prometheus-renamed labels: exported_pod wins over the target's pod label",
         {NODE_A: scrape([mine(0, 55, 2048)], hostname=NODE_A, style="prometheus")},
         {"gpu_utilization": "avg 55 %", "gpu_devices": f"{NAME}/trainer GPU 0"}),
    Case("--use-old-namespace: pod_name/pod_namespace, lower-case names and uuid",
         {NODE_A: scrape([mine(0, 12.5, 512)], hostname=NODE_A, style="old")},
         {"gpu_utilization": "avg 12.5 %", "gpu_memory": "avg 0.5 GiB", "gpu_devices": "GPU-"}),
    Case("lower-case hostname (dcgm-exporter main) names the node",
         {NODE_A: scrape([mine(0, 1, 1024)], hostname=NODE_A, host_label="hostname")},
         {"gpu_devices": f"on {NODE_A}", "gpu_activity": "active"}),
    Case("Hostname falls back to the exporter pod's name: the scraped node is kept",
         {NODE_A: scrape([mine(0, 1, 1024)], hostname="dcgm-exporter-lcxpl")},
         {"gpu_devices": f"on {NODE_A}"}),
    Case("no hostname label at all (--no-hostname)",
         {NODE_A: scrape([mine(0, 3, 1024)], host_label=None)},
         {"gpu_devices": f"on {NODE_A}", "gpu_utilization": "avg 3 %"}),
    Case("int64 blank sentinel is no data, not a number",
         {NODE_A: scrape([mine(0, INT64_BLANK_NOT_FOUND, 1024)], hostname=NODE_A)},
         {"gpu_utilization": "unavailable — DCGM_FI_DEV_GPU_UTIL has no data (DCGM blank value)",
          "gpu_activity": "unavailable — needs gpu_utilization", "gpu_memory": "avg 1 GiB"}),
    Case("fp64 blank sentinel is no data; utilization 0 then cannot say idle vs idle now",
         {NODE_A: scrape([mine(0, 0, FP64_BLANK)], hostname=NODE_A)},
         {"gpu_memory": "unavailable — DCGM_FI_DEV_FB_USED has no data", "gpu_utilization": "max 0 %",
          "gpu_activity": "unavailable — utilization is 0 % but framebuffer use is unavailable"}),
    Case("one blank GPU of two: the other still counts, and says so",
         {NODE_A: scrape([mine(0, 40, 1024), mine(1, INT64_BLANK_NOT_FOUND, 1024)], hostname=NODE_A)},
         {"gpu_utilization": "avg 40 %, max 40 % (1 of 2 GPUs)"}),
    Case("metric missing from the collectors CSV",
         {NODE_A: scrape([mine(0, None, 1024)], hostname=NODE_A)},
         {"gpu_utilization": "unavailable — DCGM_FI_DEV_GPU_UTIL missing", "gpu_memory": "avg 1 GiB",
          "gpu_activity": "unavailable — needs gpu_utilization"}),
    Case("no samples for the run's pods (README scrape: pod labels empty)",
         {NODE_A: README_SCRAPE},
         {"gpu_devices": "unavailable — no dcgm-exporter samples match the run's pods (namespace and pod)",
          **{key: "unavailable — as gpu_devices"
             for key in ("gpu_utilization", "gpu_memory", "gpu_activity")}}),
    Case("pods/proxy forbidden",
         {NODE_A: FORBIDDEN_PROXY},
         {"gpu_devices": "unavailable — metrics request failed: permission denied (get pods/proxy) — "
                             "reading exporter metrics needs the pods/proxy subresource (node "}),
    Case("no exporter pod on the run's node",
         {},
         {"gpu_devices": "unavailable — no dcgm-exporter pod on the node (node "}),
    Case("exporter pod not running",
         {}, {"gpu_devices": "unavailable — exporter pod gpu-operator/dcgm-exporter-abc is not running",
              "gpu_memory": "unavailable — as gpu_devices"},
         node_problems={NODE_A: "exporter pod gpu-operator/dcgm-exporter-abc is not running (phase Pending)"
                        }),
    Case("not Prometheus text",
         {NODE_A: "<html>502 Bad Gateway</html>\n"},
         {"gpu_devices": "unavailable — metrics are not Prometheus text"}),
    Case("discovery problem wins",
         {}, {"gpu_devices": "unavailable — cannot list exporter pods",
              "gpu_activity": "unavailable — as gpu_devices"},
         discovery_problem="cannot list exporter pods (app.kubernetes.io/name=dcgm-exporter): "
                           "permission denied (list pods)"),
    Case("multi-node: both nodes' GPUs, one line per device",
         {NODE_A: scrape([mine(0, 90, 1024)], hostname=NODE_A),
          NODE_B: scrape([mine(0, 10, 3072, pod=NAME_B, node=NODE_B)], hostname=NODE_B)},
         {"gpu_utilization": "avg 50 %, max 90 % (2 GPUs)", "gpu_devices": f"on {NODE_B}"},
         pods=[POD, POD_B]),
    Case("multi-node, one node forbidden: observed values from the other, marked partial",
         {NODE_A: scrape([mine(0, 90, 1024)], hostname=NODE_A), NODE_B: PROXY_503},
         {"gpu_utilization": "avg 90 %, max 90 % (1 GPU)",
          "partial": f"metrics request failed: unavailable (HTTP 503) (node {NODE_B})"},
         pods=[POD, POD_B]),
    Case("multi-node, every node fails the same way: one reason, all nodes",
         {NODE_A: FORBIDDEN_PROXY, NODE_B: FORBIDDEN_PROXY},
         {"gpu_devices": f"pods/proxy subresource (nodes {NODE_A}, {NODE_B})"},
         pods=[POD, POD_B]),
    Case("pods not on a node yet",
         {}, {"gpu_devices": "unavailable — no pod of the run holds a GPU on a node yet"},
         pods=[k8s.job_pod(JOB)]),
    Case("finished run: telemetry unavailable",
         {NODE_A: scrape([mine(0, 80, 1024)], hostname=NODE_A)},
         {"gpu_devices": f"unavailable — {FINISHED_REASON}",
          "gpu_utilization": "unavailable — as gpu_devices",
          "gpu_allocation": "not applicable — the run uses no DRA ResourceClaim"},
         finished=True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_build_profile(case: Case) -> None:
    # A failed metrics request reaches the builder as its reason in words, as collect_profile hands it.
    failed = {node: read_problem(got) for node, got in case.scrapes.items() if isinstance(got, ReadError)}
    bodies = {node: got for node, got in case.scrapes.items() if not isinstance(got, ReadError)}
    profile = build_profile(case.pods, case.claims, bodies, case.finished, case.discovery_problem,
                            node_problems={**(case.node_problems or {}), **failed})
    rows = dict(profile_lines(profile, list_limit=None))
    for key, wanted in case.expect.items():
        assert wanted in rows[key], (key, rows[key])
    assert rows["cuda_compute_process"] == f"unavailable — {CUDA_REASON}"
    # Never a zero that was not observed: every unavailable key is only a reason.
    for key in ("gpu_utilization", "gpu_memory"):
        value = getattr(profile, key)
        if isinstance(value, Unavailable):
            assert not rows[key].startswith(("avg", "0")), rows[key]
    # The JSON form round-trips (the CLI prints it; a card may store it).
    assert GpuProfile.model_validate_json(profile.model_dump_json()) == profile
    assert render_profile_text(profile)


def test_observed_numbers_are_typed_for_the_card() -> None:
    profile = build_profile([POD], {}, {NODE_A: scrape([mine(0, 0, 0)], hostname=NODE_A)}, False, None)
    assert profile.gpu_utilization == Stat(avg=0, max=0, unit="%", gpus=1, of_gpus=1)
    assert profile.gpu_activity == Activity(state="idle")
    assert profile.gpu_devices.status == "observed"


def test_dra_allocation_identity_kept_for_a_finished_run() -> None:
    claim = k8s.resource_claim(pod=POD, pool=NODE_A, device="gpu-3")
    pod = k8s.job_pod(JOB, node=NODE_A, resource_claims=[claim])
    profile = build_profile([pod], {claim["metadata"]["name"]: claim}, {}, True, None)
    assert isinstance(profile.gpu_allocation, Allocation)
    [device] = profile.gpu_allocation.devices
    assert (device.driver, device.pool, device.device) == ("gpu.nvidia.com", NODE_A, "gpu-3")
    assert device.reserved_for == [POD["metadata"]["name"]]
    rows = dict(profile_lines(profile))
    assert rows["gpu_allocation"] == (f"gpu.nvidia.com pool {NODE_A} device gpu-3 "
                                      f"(claim {claim['metadata']['name']})")
    assert rows["gpu_devices"] == f"unavailable — {FINISHED_REASON}"


def test_dra_claims_gone_or_unallocated_are_unavailable() -> None:
    claim = k8s.resource_claim(pod=POD, allocated=False)
    pod = k8s.job_pod(JOB, node=NODE_A, resource_claims=[claim])
    gone = build_profile([pod], {}, {}, True, None).gpu_allocation
    assert isinstance(gone, Unavailable) and "no ResourceClaim of theirs is present" in gone.reason
    pending = build_profile([pod], {"c": claim}, {}, False, None).gpu_allocation
    assert isinstance(pending, Unavailable) and "no ResourceClaim of the run is allocated" in pending.reason


def test_card_rows_cut_long_device_lists() -> None:
    gpus = [mine(i, 50, 1024) for i in range(8)]
    profile = build_profile([POD], {}, {NODE_A: scrape(gpus, hostname=NODE_A)}, False, None)
    rows = dict(profile_lines(profile))
    assert rows["gpu_devices"].endswith("… and 4 more")
    text = render_profile_text(profile)
    assert text.count(f"{NAME}/trainer GPU ") == 8
    assert "instantaneous device-level signal" in text


def test_profile_json_schema_has_the_six_keys() -> None:
    schema = TypeAdapter(GpuProfile).json_schema()
    for key in ("gpu_allocation", "gpu_devices", "gpu_utilization", "gpu_memory", "gpu_activity",
                "cuda_compute_process"):
        assert key in schema["properties"]


def test_sparkline_shows_gaps_not_zeros() -> None:
    assert utilization_sparkline([0, 50, 100, None]) == "▁▅█·"


def _with_xid(body: str, gpu: Gpu, xid: int, err_msg: str) -> str:
    """Append the exporter's XID gauge (dcgm-exporter default-counters.csv; `err_code`/`err_msg`
    labels per internal/pkg/collector/gpu_collector.go) for one GPU of a scrape."""
    labels = (f'gpu="{gpu.index}",UUID="{gpu.uuid}",Hostname="{NODE_A}",container="{gpu.container}",'
              f'namespace="{gpu.namespace}",pod="{gpu.pod}",err_code="{xid}",err_msg="{err_msg}"')
    return (body + "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n"
            "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n" + f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {xid}\n")


def test_dcgm_hardware_xid_is_a_node_fault_and_unexported_fields_say_so() -> None:
    gpu = mine(0, 90, 1000)
    body = _with_xid(scrape([gpu], hostname=NODE_A), gpu, 79, "GPU has fallen off the bus")
    profile = build_profile([POD], {}, {NODE_A: body}, False, None)
    assert profile.gpu_health == {NODE_A: ["GPU 0: XID 79 GPU has fallen off the bus"]}
    assert profile.health_not_exported == ["DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_EXP_GPU_HEALTH_STATUS"]
    rows = dict(profile_lines(profile))
    assert "XID 79" in rows["gpu_health"] and "not exported" in rows["gpu_health"]


def test_dcgm_application_xid_is_not_a_node_fault() -> None:
    gpu = mine(0, 90, 1000)
    body = _with_xid(scrape([gpu], hostname=NODE_A), gpu, 13, "Graphics Engine Exception")
    profile = build_profile([POD], {}, {NODE_A: body}, False, None)
    assert profile.gpu_health == {} and "XID 13" in profile.application_xids[0]


def test_no_health_field_exported_reads_not_exported_never_zero() -> None:
    profile = build_profile([POD], {}, {NODE_A: scrape([mine(0, 0, 0)], hostname=NODE_A)}, False, None)
    assert profile.gpu_health == {} and len(profile.health_not_exported) == 3
    assert dict(profile_lines(profile))["gpu_health"].startswith("no fault (DCGM_FI_DEV_XID_ERRORS")
