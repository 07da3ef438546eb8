"""What a live status sends ahead: a log's dependent reads in the round of the log itself (issue 36.2).

A status's rounds: 1 the run; 2 its objects, with the `pods/log` review; 3 the nodes and the
run's log. Some reads depend on that log; sent after it, each is a round more. Each, when it is
needed, and when it goes with the log in round 3 instead:

* The driver log from the dashboard, beside the submitter's mirror — needed when the mirror is
  empty, or quiet past the stall threshold (a stopped mirror is never taken for a hung driver:
  ray-project/ray#51601). Sent with the log when a submitter pod exists and the last read does
  not prove its mirror non-empty and fresh (the same container instance's newest line younger
  than the threshold). A wrong guess costs one bounded read.
* Every rank's tail of a distributed Job (SPEC §5c) — needed when the run's log shows a hang,
  crash or stall. Sent with the log when the last read found the run waiting, or the Job failed,
  once the user's `pods/log` review (then sent with round 2) allowed them. A wrong guess costs up
  to 64 bounded reads, once (the next read knows).
* The driver's job details (its pid), and its stack — needed when the log shows a live driver
  hung or stalled. Sent with the log when the last read found the driver waiting (its proxy
  review then goes with round 2); with the process that read found (on one of the run's pods'
  IPs), the stack itself, kept only when this read's details name the same process and this
  read's log still shows the wait. A wrong guess costs two or three reads and one `py-spy dump`
  of a driver that was waiting at the last read.

What is never sent ahead: every rank's tail on a healthy run's first status (a 32-rank Job would
read 32 logs on every status: a request storm), and a driver's stack before any read found it
waiting (`py-spy dump` stops the process while it samples; and its pid comes only from Ray's job
details, readable only after the `pods/log` review of round 2, so a stack cannot come before
round 4 on a first sighting). Those cases take one round more (the ranks), or two (the stack:
details with the proxy review, then the dump) — said in tests/live/test_rounds_every_case.py.

Every early read is the user's own, after the same reviews as when sent late; the answer is
decided on this read's own data, so a wrong guess costs requests, never a wrong answer. What this
read found is kept for the next (`memory.keep`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from ipaddress import ip_address

from workers.diagnosis.linkage import RunObjects, meta
from workers.diagnosis.phases.common import RunContext
from workers.diagnosis.podfacts import containers, pod_name
from workers.diagnosis.timeutil import parse_time
from workers.kube.reader import KubeReader, ReadError

from .memory import DriverProcess, LastRead, keep, recall
from .ranks import distributed
from .seen import SeenStore
from .stack import driver_process, dump, head_service, proxy_review, refused


@dataclass
class EarlyStack:
    """The stack reads sent with the log: the job's details, and the remembered process's dump."""

    process: DriverProcess | str  # this read's details (or why none)
    dumped: tuple[list[str], str | None] | None = None  # the dump of `dumped_for`, when sent
    dumped_for: DriverProcess | None = None


@dataclass
class ReadAhead:
    """One status's early reads: decided from what the last read of the run found (`recall`, after
    round 1) and round 2's objects; and what this read finds, kept for the next (`keep`)."""

    reader: KubeReader
    store: SeenStore | None
    now: datetime
    stall_seconds: int
    memory: LastRead | None = None
    mirror: tuple[str, datetime] | None = None  # found: the submitter pod and its newest timed line
    waiting: bool = False  # found: the run's log calls for its stack or its ranks
    driver: DriverProcess | None = None  # found: the driver's process (this read's details)
    _proxy: asyncio.Future[bool | ReadError] | None = field(default=None, repr=False)
    _stack: asyncio.Future[EarlyStack] | None = field(default=None, repr=False)

    def recall(self, objs: RunObjects, *, driver_log: bool) -> None:
        """After round 1: what the last read of this run found. A RayJob whose driver log this
        status reads (``driver_log``), and whose driver that read found waiting, gets its
        `services/proxy` review sent with round 2 (its stack may then follow in round 3)."""
        self.memory = recall(self.store, meta(objs.run or {}).get("uid"), self.now)
        if driver_log and self.memory is not None and self.memory.waiting and head_service(objs) is not None:
            self._proxy = asyncio.ensure_future(proxy_review(self.reader, objs))

    async def proxy_answer(self, objs: RunObjects) -> bool | ReadError:
        """The `services/proxy` review: the one sent early, or asked now."""
        if self._proxy is None:
            self._proxy = asyncio.ensure_future(proxy_review(self.reader, objs))
        return await self._proxy

    def dashboard_with_mirror(self, submitter: tuple[dict, str] | None) -> bool:
        """Send the driver log's read with the submitter's: unless the last read proves the mirror
        of this same container instance non-empty and its newest line younger than the threshold
        (then it is neither empty nor quiet now: the instance's log only grows)."""
        if submitter is None:
            return False  # no mirror: the dashboard is the read itself
        pod, container = submitter
        last = self.memory
        if last is None or last.mirror_pod != pod_name(pod) or last.mirror_newest is None:
            return True
        view = next((c for c in containers(pod, init=False) if c.name == container), None)
        state = (view.running or view.terminated) if view is not None else None
        started = parse_time((state or {}).get("startedAt"))
        if started is None or last.mirror_newest < started:
            return True  # another instance since: its log starts empty
        return (self.now - last.mirror_newest).total_seconds() > self.stall_seconds

    def review_with_round_2(self, objs: RunObjects) -> bool:
        """After round 1 (the run alone): whether the ranks may go with the log (`ranks_with_log`),
        so the user's `get pods/log` review must go with round 2 — they are sent only once it
        allowed (a user who may not read logs sends no rank read on anyone's record). A Job run
        in parallel that the last read found waiting, or that failed."""
        spec = (objs.run or {}).get("spec") or {}
        try:
            parallel = int(spec.get("parallelism") or 1) >= 2
        except (TypeError, ValueError):
            parallel = False
        if objs.kind != "Job" or not parallel:
            return False
        failed = RunContext(objs=objs, now=self.now).terminal() == "failed"
        return failed or (self.memory is not None and self.memory.waiting)

    def ranks_with_log(self, objs: RunObjects) -> bool:
        """Every rank's tail with the run's log: a distributed Job the last read found waiting, or
        one that failed (its log then always calls for the culprit)."""
        if not distributed(objs):
            return False
        failed = RunContext(objs=objs, now=self.now).terminal() == "failed"
        return failed or (self.memory is not None and self.memory.waiting)

    def remembered_driver(self, objs: RunObjects) -> DriverProcess | None:
        """The process the last read found, when it may be dumped before this read's details: the
        same job, on one of this run's pods' IPs (a record is untrusted)."""
        last, head = self.memory, head_service(objs)
        if last is None or last.driver is None or head is None or last.driver.job != head[2]:
            return None
        ips = set()
        for pod in objs.pods:
            try:
                ips.add(ip_address(str((pod.get("status") or {}).get("podIP") or "")))
            except ValueError:
                continue
        return last.driver if last.driver.ip in ips else None

    def start_stack(self, objs: RunObjects, logs_allowed: Callable[[], Awaitable[bool | ReadError]]) -> None:
        """With round 3: the stack reads of a live RayJob whose driver the last read found waiting.
        ``logs_allowed``: the status's `pods/log` review (`LogAccess.answer`), sent with round 2."""
        alive = RunContext(objs=objs, now=self.now).terminal() is None
        if not alive or head_service(objs) is None or self.memory is None or not self.memory.waiting:
            return
        self._stack = asyncio.ensure_future(self._early_stack(objs, logs_allowed))

    async def _early_stack(self, objs: RunObjects, logs_allowed: Callable[[], Awaitable[bool | ReadError]]
                           ) -> EarlyStack:
        allowed = await logs_allowed()  # answered with round 2
        if allowed is not True:
            return EarlyStack(process=refused(True, allowed) or "not allowed")
        remembered = self.remembered_driver(objs)

        async def dumped() -> tuple[list[str], str | None] | None:
            if remembered is None or refused(await self.proxy_answer(objs), allowed) is not None:
                return None
            return await dump(self.reader, objs, remembered)

        process, stack = await asyncio.gather(driver_process(self.reader, objs), dumped())
        return EarlyStack(process=process, dumped=stack, dumped_for=remembered if stack is not None else None)

    async def early_stack(self) -> EarlyStack | None:
        """The stack reads sent with the log, once answered (None when none were sent)."""
        return await self._stack if self._stack is not None else None

    async def settle(self) -> None:
        """Wait for what was sent early, so nothing outlives the client it went on."""
        pending = [f for f in (self._proxy, self._stack) if f is not None]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def keep(self, objs: RunObjects) -> None:
        """What this read found, for the run's next read."""
        mirror_pod, mirror_newest = self.mirror if self.mirror is not None else (None, None)
        keep(self.store, meta(objs.run or {}).get("uid"),
             LastRead(at=self.now, mirror_pod=mirror_pod, mirror_newest=mirror_newest, waiting=self.waiting,
                      driver=self.driver))


__all__ = ["EarlyStack", "ReadAhead"]
