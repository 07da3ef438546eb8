"""An aiohttp application served on a free loopback port from a daemon thread.

The emulators taubot's shell and tests stand up beside a synchronous caller
(MLflow's REST API, a Kusto query endpoint) need their own event loop: the
caller blocks on a real HTTP client (azure-kusto-data, urllib) in its thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web


@contextmanager
def serving_in_thread(app: web.Application, *, name: str) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 (a free port) until the block ends; yields its base URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name=name, daemon=True)
    thread.start()
    runner = web.AppRunner(app, access_log=None)

    async def start() -> str:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    try:
        yield asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


__all__ = ["serving_in_thread"]
