"""Reading the Ray driver log through `services/proxy`: bounded in bytes, and every failure says whose.

Answers are the shapes Ray 2.60's dashboard gives (tests/fixtures/ray_dashboard.py;
the 500 body is Ray's own: a Python traceback as text/plain, measured for a driver
log holding a byte that is not UTF-8, shared/reference/training-logs.md §2.6).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.fakes.kube_api import KubeEmulator
from tests.fixtures import k8s
from tests.fixtures.ray_dashboard import serve_driver_log
from workers.collect.logs.sources import DASHBOARD_MAX_BYTES, logs_live
from workers.config.workspaces import load_descriptors
from workers.kube.client import Identity

from .conftest import workspace_objects, write_descriptor

NOW = k8s.T0 + timedelta(minutes=30)
ALICE = Identity(user="alice@example.com", groups=("team-vision",))
RAY_500 = """Traceback (most recent call last):
  File "/home/ray/anaconda3/lib/python3.11/site-packages/ray/dashboard/modules/job/job_head.py", line 591, in get_job_logs
    await job_agent_client.get_job_logs_internal(job.submission_id)
  File "/home/ray/anaconda3/lib/python3.11/site-packages/ray/dashboard/modules/job/job_head.py", line 134, in _raise_error
    raise RuntimeError(f"Request failed with status code {status}: {error_text}.")
RuntimeError: Request failed with status code 500: UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 19: invalid start byte.
"""


def ray_run() -> tuple[list[dict], str, str]:
    rj = k8s.rayjob("ray-pretrain-13b")
    rc = k8s.raycluster(rayjob=rj, state="ready")
    service = f"{rj['status']['rayClusterName']}-head-svc"
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": service, "namespace": k8s.NS},
           "spec": {"ports": [{"name": "dashboard", "port": 8265}]}}
    return [*workspace_objects(), rj, rc, svc], service, rj["status"]["jobId"]


async def test_a_driver_log_over_the_byte_bound_is_read_up_to_it(tmp_path: Path) -> None:
    objects, service, job_id = ray_run()
    line = "step={} loss=2.0 " + "x" * 1000  # a log of 1 KB lines (Ray turned tqdm's \r into \n)
    log = "".join(line.format(i) + "\n" for i in range(6 * 1024))  # 6 MiB: over the bound
    async with KubeEmulator(objects) as emu:
        serve_driver_log(emu, k8s.NS, service, job_id, log)
        write_descriptor(tmp_path, emu.base_url)
        got = await logs_live(load_descriptors(tmp_path), run="ray-pretrain-13b", identity=ALICE, now=NOW,
                              workspace="vision", tail=5000)
    assert got.source == "ray-dashboard" and got.truncated is True
    texts = [x.text for x in got.lines]
    assert sum(len(t) + 1 for t in texts) <= DASHBOARD_MAX_BYTES
    assert all(t.startswith("step=") and t.endswith("x" * 1000) for t in texts)  # no half line kept


async def test_a_5xx_from_ray_keeps_rays_reason(tmp_path: Path) -> None:
    objects, service, job_id = ray_run()
    async with KubeEmulator(objects) as emu:
        emu.register_proxy("Service", k8s.NS, service, "dashboard", f"api/jobs/{job_id}", RAY_500, status=500)
        write_descriptor(tmp_path, emu.base_url)
        got = await logs_live(load_descriptors(tmp_path), run="ray-pretrain-13b", identity=ALICE, now=NOW,
                              workspace="vision")
    assert got.source is None
    [why] = [w for w in got.unavailable if w.startswith("ray dashboard")]
    assert "HTTP 500" in why and "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff" in why
