"""What the monitor's log read found, kept as the record of the run's last read (issue 36.2).

Why: a `/tau status` reads the run's log in its third round, and the reads that depend on that
log — every rank's tail of a hung distributed Job, a stalled Ray driver's stack — cost it a
fourth and fifth round unless the record of the run's last read (`workers/collect/logs/memory.py`)
says the run was found waiting, when they go with the log (`workers/collect/logs/ahead.py`). The
monitor reads the logs of up to 20 running runs a sweep, and its auto-post of a stall is exactly
when someone types `/tau status`: so when its read finds a run waiting it leaves that record too,
and the status right after the post takes three rounds, not four or five.

What it records is what a status's read would: ``waiting`` by the same judgements a status makes
of its log (`ranks.needs_ranks` for a Job, `sources.driver_waits` for a RayJob), and, for a Ray
driver found waiting, its process from the job's details (one `GET /api/jobs/<id>` through the
head's `services/proxy`, as the monitor — which the chart grants it — once per Ray job: a record
naming the same job's driver is kept). A run found no longer waiting has its record say so,
so no status sends rank or stack reads for a run that recovered. The submitter mirror's
fields are carried over from the record as they were: the monitor does not learn them.

Security (SPEC §1, §11): the record chooses only WHEN a status sends a read, never what the user
may read. Every early read is the user's own, impersonated: the rank logs are refused by the API
server for a user who may not read pods/log; the job's details and the dump wait for the user's
own `pods/log` and `services/proxy` reviews; a remembered driver is dumped only on one of the
run's pods' IPs and shown only when the user's own read of the details names the same process.
The monitor's own reading of the details reaches no user: only its pid and IP are kept, and they
only decide which dump a status may ask for.
"""

from __future__ import annotations

from datetime import datetime

from workers.collect.logs.memory import DriverProcess, LastRead, keep, recall
from workers.collect.logs.ranks import needs_ranks
from workers.collect.logs.seen import SeenStore
from workers.collect.logs.sources import driver_waits
from workers.collect.logs.stack import driver_process, head_service
from workers.diagnosis.linkage import RunObjects, meta
from workers.diagnosis.models import LogEvidence
from workers.kube.reader import KubeReader


def found_waiting(objs: RunObjects, logs: LogEvidence, now: datetime, stall_seconds: int) -> bool:
    """Whether a status would find this log calling for its dependent reads: a distributed Job's
    log showing a hang, crash or stall (its ranks), a live Ray driver hung or stalled (its stack).
    A log that could not be read says nothing."""
    if logs.unavailable is not None:
        return False
    if objs.kind == "RayJob":
        return driver_waits(objs, logs, now, stall_seconds)
    return needs_ranks(objs, logs, now, stall_seconds)


async def keep_last_read(store: SeenStore | None, reader: KubeReader, objs: RunObjects, logs: LogEvidence,
                         now: datetime, stall_seconds: int) -> int:
    """Record what the monitor's read of the run's log found, when a status would act on it: the
    run found waiting, or no longer waiting where the record said it was. The requests made (the
    driver's job details: 0 or 1)."""
    uid = meta(objs.run or {}).get("uid")
    if store is None or not uid:
        return 0
    last = recall(store, uid, now)
    waiting = found_waiting(objs, logs, now, stall_seconds)
    if not waiting and (last is None or not last.waiting):
        return 0  # nothing a status would send differently
    driver, requests = None, 0
    head = head_service(objs)
    if waiting and head is not None:
        if last is not None and last.driver is not None and last.driver.job == head[2]:
            driver = last.driver  # one Ray job's driver is one process: read its details once
        else:
            found = await driver_process(reader, objs)
            requests = 1
            driver = found if isinstance(found, DriverProcess) else None
    keep(store, uid, LastRead(at=now, waiting=waiting, driver=driver,
                              mirror_pod=last.mirror_pod if last else None,
                              mirror_newest=last.mirror_newest if last else None))
    return requests


__all__ = ["found_waiting", "keep_last_read"]
