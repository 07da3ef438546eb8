"""Where a stalled RayJob's driver waits: its Python stack from the Ray dashboard (SPEC §5c).

Why: a driver that stops printing says nothing about where it is stuck; the Ray dashboard
runs `py-spy dump` on a process when asked (Ray 2.60 `dashboard/modules/reporter/
reporter_head.py`: `GET /worker/traceback?pid=…&ip=…`, answered as text), and the driver's
pid and node come from the job's details (`GET /api/jobs/<submission_id>` →
`driver_info{pid, node_ip_address}`). Both go through the API server's `services/proxy` of the
head service, impersonated, and only after the user's access reviews for that proxy and for
`pods/log` (a stack is a process's inside, as much as its log is).

Ray answers 403 when profiling is off (`RAY_DASHBOARD_ENABLE_PROFILING`, off by default) and
500 "py-spy is not installed" when the node lacks it: each is said as Ray's own reason, never
as a permission of the user's. The frames are stripped of control characters and redacted here;
the engine keeps the main thread's top frames (docs/reference/training-logs-ranks.md §6.1).
"""

from __future__ import annotations

import asyncio
import json
import re

from workers.diagnosis.linkage import RunObjects
from workers.kube.reader import KubeReader, ReadError, proxy_path
from workers.outside.text import redact, strip_controls

TOP_FRAMES = 8
STACK_MAX_BYTES = 64 * 1024
DETAILS_MAX_BYTES = 256 * 1024
# py-spy 0.4 `dump`: `Thread 18714 (idle): "MainThread"` then indented `function (file.py:55)` frames.
_THREAD = re.compile(r"^Thread (?:0x)?[0-9A-Fa-f]+ \([^)]*\)(?:: \"(?P<name>[^\"]*)\")?")
_FRAME = re.compile(r"^\s+\S.*\(.*\)\s*$")


def top_frames(dump: str, limit: int = TOP_FRAMES) -> list[str]:
    """The main thread's innermost frames (py-spy prints the innermost first), else the first
    thread's; each line stripped of control characters and redacted."""
    threads: list[tuple[str | None, list[str]]] = []
    for line in dump.splitlines():
        if (m := _THREAD.match(line)) is not None:
            threads.append((m["name"], []))
        elif threads and _FRAME.match(line):
            threads[-1][1].append(line.strip())
    if not threads:
        return []
    main = next((frames for name, frames in threads if name == "MainThread"), threads[0][1])
    return [redact(strip_controls(frame))[:300] for frame in main[:limit]]


def _ray_why(error: ReadError) -> str:
    """Ray's own refusals (its text body) apart from the API server's (a JSON Status)."""
    message = " ".join((error.message or "").split())[:200]
    if error.kind == "forbidden" and "Profiling is disabled" in message:
        return "profiling is disabled on the Ray head (RAY_DASHBOARD_ENABLE_PROFILING=1 enables it)"
    if error.kind == "forbidden":
        return "permission denied (get services/proxy)"
    if "py-spy is not installed" in message:
        return "py-spy is not installed on the driver's node"
    return f"ray dashboard: {error.describe()}" + (f": {message}" if message else "")


async def driver_stack(reader: KubeReader, objs: RunObjects, *, logs_allowed: bool | ReadError | None = None
                       ) -> tuple[list[str], str | None]:
    """(top frames, None) or ([], why not): the driver's stack of a RayJob with a submitted job.
    ``logs_allowed``: the status's own `get pods/log` review, when it already asked it."""
    status = (objs.run or {}).get("status") or {}
    cluster, job_id, ns = status.get("rayClusterName"), status.get("jobId"), objs.namespace or ""
    if objs.kind != "RayJob" or not cluster or not job_id:
        return [], "no Ray job submitted"
    service = f"{cluster}-head-svc"
    async def known(answer: bool | ReadError) -> bool | ReadError:
        return answer

    proxy, logs = await asyncio.gather(
        reader.access_review("get", "services", "", namespace=ns, subresource="proxy", name=service),
        known(logs_allowed) if logs_allowed is not None
        else reader.access_review("get", "pods", "", namespace=ns, subresource="log"))
    for answer, what in ((proxy, "get services/proxy"), (logs, "get pods/log")):
        if isinstance(answer, ReadError):
            return [], f"access review: {answer.describe()}"
        if answer is not True:
            return [], f"permission denied ({what})"
    details = await reader.text(proxy_path("services", ns, service, "dashboard", f"api/jobs/{job_id}"),
                                max_bytes=DETAILS_MAX_BYTES)
    if isinstance(details, ReadError):
        return [], _ray_why(details)
    try:
        info = json.loads(details).get("driver_info") or {}
        pid, ip = str(info.get("pid") or ""), str(info.get("node_ip_address") or "")
    except (ValueError, AttributeError):
        return [], "ray dashboard: malformed job details"
    if not pid.isdigit() or not ip:
        return [], "the driver has no process yet (no driver_info)"
    dump = await reader.text(proxy_path("services", ns, service, "dashboard", "worker/traceback"),
                             {"pid": pid, "ip": ip, "native": "0"}, max_bytes=STACK_MAX_BYTES)
    if isinstance(dump, ReadError):
        return [], _ray_why(dump)
    frames = top_frames(dump)
    return (frames, None) if frames else ([], "py-spy printed no frames")


__all__ = ["TOP_FRAMES", "driver_stack", "top_frames"]
