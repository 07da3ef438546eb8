"""What the last layer-7 read of a run found, kept so the next read sends its dependent reads at once.

Why (issue 36.2): a live status reads the run's log in its third round, and some reads depend on
that log — the Ray driver's log from the dashboard when the KubeRay submitter's mirror turns out
quiet or empty, the driver's stack when the log shows a stall, every rank's tail when a
distributed Job's log shows a hang. Sent after the log, each costs a round of its own. What the
last read of the same run found says, before the log is read, which of them this read will likely
need, so they go out beside it (`ahead.ReadAhead`):

* ``mirror_pod``/``mirror_newest`` — the submitter pod whose log gave timed lines, and its newest
  line's time. The same container instance's log only grows, so a newest line younger than the
  stall threshold proves the mirror neither empty nor quiet now: the dashboard need not be read.
* ``waiting`` — the engine found the run waiting (a hang or stall of a live driver, a stalled
  distributed Job): its stack, or its ranks, are read with the log.
* ``driver_*`` — the driver's process as Ray's job details named it: its stack is dumped with the
  log, and kept only when this read's details name the same process.

Per run (its uid), in Redis, shared by statuses and watches. The record only chooses which reads go
out early, all of them as the user; what the answer says is decided on this read's own data, so a
lost, stale or forged record costs a request or a round, never a wrong answer. It is read back as
untrusted input (SPEC §11): one that does not validate, or is dated after ``now``, is ignored and
counted (``taubot_untrusted_state_dropped_total{kind="log_seen"}``, the first-sighting store's kind).
"""

from __future__ import annotations

import logging
from datetime import datetime
from ipaddress import IPv4Address, IPv6Address

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from workers.plumbing.metrics import UNTRUSTED_DROPPED
from workers.records import keys

from .seen import SeenStore

log = logging.getLogger(__name__)

TTL_SECONDS = 2 * 24 * 3600
_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"  # a Kubernetes object name (RFC 1123 subdomain)


class DriverProcess(BaseModel):
    """A Ray job's driver process (`GET /api/jobs/<submission_id>` → `driver_info`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job: str = Field(min_length=1, max_length=253)  # the submission id (RayJob `status.jobId`)
    pid: int = Field(gt=0, le=4_194_304)  # Linux `pid_max` at most 2^22
    ip: IPv4Address | IPv6Address


class LastRead(BaseModel):
    """What one layer-7 read of a run found (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    at: AwareDatetime
    mirror_pod: str | None = Field(default=None, pattern=_NAME)
    mirror_newest: AwareDatetime | None = None
    waiting: bool = False
    driver: DriverProcess | None = None


def recall(store: SeenStore | None, run_uid: str | None, now: datetime) -> LastRead | None:
    """The record of the run's last read, if there is a valid one dated no later than ``now``."""
    if store is None or not run_uid:
        return None
    try:
        raw = store.get(keys.last_read_key(run_uid))
    except Exception as exc:  # noqa: BLE001 - Redis down: nothing is sent early
        log.warning("last-read record for %s unavailable: %s", run_uid, type(exc).__name__)
        return None
    if not raw:
        return None
    try:
        read = LastRead.model_validate_json(raw)
        if read.at > now or (read.mirror_newest is not None and read.mirror_newest > now):
            raise ValueError("dated after now")
    except (ValidationError, ValueError) as exc:
        log.warning("ignored a malformed last-read record (%s)", type(exc).__name__)
        UNTRUSTED_DROPPED.labels("log_seen").inc()
        return None
    return read


def keep(store: SeenStore | None, run_uid: str | None, read: LastRead) -> None:
    """Record ``read`` for the run's next read; a store that fails only costs that read a round."""
    if store is None or not run_uid:
        return
    try:
        store.set(keys.last_read_key(run_uid), read.model_dump_json(), ex=TTL_SECONDS)
    except Exception as exc:  # noqa: BLE001 - Redis down: the next read sends nothing early
        log.warning("last-read record for %s not kept: %s", run_uid, type(exc).__name__)


__all__ = ["DriverProcess", "LastRead", "keep", "recall"]
