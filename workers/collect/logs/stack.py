"""Where a stalled RayJob's driver waits: its Python stack from the Ray dashboard (SPEC §5c).

Why: a driver that stops printing says nothing about where it is stuck; the Ray dashboard
runs `py-spy dump` on a process when asked (Ray 2.60 `dashboard/modules/reporter/
reporter_head.py`: `GET /worker/traceback?pid=…&ip=…`, answered as text), and the driver's
pid and node come from the job's details (`GET /api/jobs/<submission_id>` →
`driver_info{pid, node_ip_address}`). Both go through the API server's `services/proxy` of the
head service, impersonated: the details after the user's `pods/log` review (as the driver log
itself), the dump only after the user's access reviews for that proxy and for `pods/log` (a
stack is a process's inside, as much as its log is).

Ray answers 403 when profiling is off (`RAY_DASHBOARD_ENABLE_PROFILING`, off by default) and
500 "py-spy is not installed" when the node lacks it: each is said as Ray's own reason, never
as a permission of the user's. The frames are stripped of control characters and redacted here;
the engine keeps the main thread's top frames (docs/reference/training-logs-ranks.md §6.1).
"""

from __future__ import annotations

import asyncio
import json
import re

from pydantic import ValidationError

from workers.diagnosis.linkage import RunObjects
from workers.kube.reader import KubeReader, ReadError, proxy_path
from workers.outside.text import redact, strip_controls

from .memory import DriverProcess

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


def head_service(objs: RunObjects) -> tuple[str, str, str] | None:
    """(namespace, head service, submission id) of a RayJob with a submitted job, else None."""
    status = (objs.run or {}).get("status") or {}
    cluster, job_id = status.get("rayClusterName"), status.get("jobId")
    if objs.kind != "RayJob" or not cluster or not job_id:
        return None
    return objs.namespace or "", f"{cluster}-head-svc", str(job_id)


async def proxy_review(reader: KubeReader, objs: RunObjects) -> bool | ReadError:
    """The caller's `get services/proxy` review of the run's head service (SPEC §5c)."""
    head = head_service(objs)
    if head is None:
        return False
    ns, service, _ = head
    return await reader.access_review("get", "services", "", namespace=ns, subresource="proxy", name=service)


def refused(proxy: bool | ReadError, logs: bool | ReadError) -> str | None:
    """Why the stack may not be dumped for this caller, or None when both reviews allowed it."""
    for answer, what in ((proxy, "get services/proxy"), (logs, "get pods/log")):
        if isinstance(answer, ReadError):
            return f"access review: {answer.describe()}"
        if answer is not True:
            return f"permission denied ({what})"
    return None


async def driver_process(reader: KubeReader, objs: RunObjects) -> DriverProcess | str:
    """The driver's process from the job's details (`driver_info`), or why there is none. Read
    through the head's `services/proxy` as the caller, so the API server's own check of that
    permission guards it; the caller must have passed the `pods/log` review first."""
    head = head_service(objs)
    if head is None:
        return "no Ray job submitted"
    ns, service, job_id = head
    details = await reader.text(proxy_path("services", ns, service, "dashboard", f"api/jobs/{job_id}"),
                                max_bytes=DETAILS_MAX_BYTES)
    if isinstance(details, ReadError):
        return _ray_why(details)
    try:
        info = json.loads(details).get("driver_info") or {}
        pid, ip = str(info.get("pid") or ""), str(info.get("node_ip_address") or "")
    except (ValueError, AttributeError):
        return "ray dashboard: malformed job details"
    if not pid.isdigit() or not ip:
        return "the driver has no process yet (no driver_info)"
    try:
        return DriverProcess(job=job_id, pid=int(pid), ip=ip)  # type: ignore[arg-type]
    except ValidationError:
        return "ray dashboard: malformed job details"


async def dump(reader: KubeReader, objs: RunObjects, process: DriverProcess) -> tuple[list[str], str | None]:
    """(top frames, None) or ([], why not): `py-spy dump` of ``process`` through the dashboard. Only
    after both reviews allowed it (`refused`)."""
    head = head_service(objs)
    if head is None:
        return [], "no Ray job submitted"
    ns, service, _ = head
    text = await reader.text(proxy_path("services", ns, service, "dashboard", "worker/traceback"),
                             {"pid": str(process.pid), "ip": str(process.ip), "native": "0"},
                             max_bytes=STACK_MAX_BYTES)
    if isinstance(text, ReadError):
        return [], _ray_why(text)
    frames = top_frames(text)
    return (frames, None) if frames else ([], "py-spy printed no frames")


async def driver_stack(reader: KubeReader, objs: RunObjects, *, logs_allowed: bool | ReadError,
                       proxy_allowed: bool | ReadError | None = None
                       ) -> tuple[list[str], str | None, DriverProcess | None]:
    """(top frames, None, the process) or ([], why not, the process if found): the driver's stack
    of a RayJob with a submitted job, after the log showed it waiting. ``logs_allowed``: the
    status's `get pods/log` review; ``proxy_allowed``: its `services/proxy` review when it was
    sent early. The job's details go with the proxy review (their own read is checked by the API
    server), so the stack costs two rounds after the log, not three."""
    if head_service(objs) is None:
        return [], "no Ray job submitted", None
    if isinstance(logs_allowed, ReadError) or logs_allowed is not True:
        return [], refused(True, logs_allowed), None

    async def known(answer: bool | ReadError) -> bool | ReadError:
        return answer

    proxy, process = await asyncio.gather(
        known(proxy_allowed) if proxy_allowed is not None else proxy_review(reader, objs),
        driver_process(reader, objs))
    why = refused(proxy, logs_allowed)
    if why is not None:
        return [], why, process if isinstance(process, DriverProcess) else None
    if isinstance(process, str):
        return [], process, None
    frames, why = await dump(reader, objs, process)
    return frames, why, process


__all__ = ["TOP_FRAMES", "DriverProcess", "driver_process", "driver_stack", "dump", "head_service",
           "proxy_review", "refused", "top_frames"]
