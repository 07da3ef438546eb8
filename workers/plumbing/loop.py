"""One event loop per worker process, for its whole life: where every job's async work runs.

rq calls a job as a plain function, and each job used to start its own loop
(`asyncio.run`). aiohttp's connections belong to the loop that opened them, so
every status paid for new TCP (and, over TLS, handshake) round trips to the
API server, one per concurrent request (issue 28). Here a job hands its
coroutine to a loop that a daemon thread runs for the life of the process and
waits for the answer, so what that loop holds — the connection pool of each
cluster (`workers/kube/client.py` `WarmKubeClients`) — is still there for the
next job.

Why a thread and not a loop kept in the job's own thread: rq's job timeout is
a signal raised in the main thread, which must be able to interrupt the wait
(the coroutine is then cancelled on its loop), and a loop that only runs
while a job waits would not close idle connections or run anything between
jobs.

A forked child (rq's forking work horse, a WorkerPool member) does not inherit
the thread, so the loop is started again, lazily, in each process that uses it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class ProcessLoop:
    """A lazily started event loop in a daemon thread of this process."""

    def __init__(self, name: str = "taubot-loop") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop of this process, started on first use."""
        with self._lock:
            alive = self._thread is not None and self._thread.is_alive() and self._pid == os.getpid()
            if self._loop is None or not alive:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=serve, name=self.name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop

    def owns_running_loop(self) -> bool:
        """Whether the caller is a coroutine on this process's loop."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return running is self._loop and self._pid == os.getpid()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the process loop and wait for its result (its exception, re-raised).

        An exception raised into the waiting thread (rq's job timeout) cancels the coroutine."""
        loop = self.loop
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("ProcessLoop.run called from its own loop: await the coroutine instead")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise


PROCESS_LOOP = ProcessLoop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` for a job: on this process's long-lived loop (see the module docstring)."""
    return PROCESS_LOOP.run(coro)


__all__ = ["PROCESS_LOOP", "ProcessLoop", "run"]
