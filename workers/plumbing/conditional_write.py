"""Writes that land only if a value is as it was read and nobody holds its lock: one script call.

A watch tick of an unchanged run (issue 28.4) reads its state, probes the run, and saves the next
tick. Taking the watch's lock for that costs two round trips of its own (acquire, release) around
the transaction, on every tick of every watch. Instead the tick reads without the lock and commits
with `commit_if_unchanged`: the writes are recorded (`Recorder`, which takes the `set`/`zadd` calls
the state and the queue make on a pipeline) and sent as one script that applies them only if the
value is still the bytes the tick read and the lock is free. Anyone who changes the state (a Stop
press, a second `--watch` joining) does so holding the lock and after reading it: if they hold it
now, or wrote since, the commit is refused and the tick redoes its work under the lock.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.commands.core import Script

# KEYS: the value, its lock. ARGV[1]: the bytes read; then each command as its length, then its words.
_COMMIT = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local i = 2
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
return 1
"""


class Recorder:
    """Stands in for a pipeline: records `set` and `zadd` calls instead of sending them."""

    def __init__(self) -> None:
        self.commands: list[list[Any]] = []

    def set(self, name: str, value: str | bytes, ex: int | None = None) -> None:
        self.commands.append(["SET", name, value, *(["EX", int(ex)] if ex is not None else [])])

    def zadd(self, name: str, mapping: dict[str, float]) -> None:
        pairs = [word for member, score in mapping.items() for word in (repr(float(score)), member)]
        self.commands.append(["ZADD", name, *pairs])


def commit_if_unchanged(conn: redis.Redis, key: str, read: bytes, lock: str, writes: Recorder) -> bool:
    """Apply ``writes`` if ``key`` still holds ``read`` and ``lock`` is not held; whether they were."""
    args: list[Any] = [read]
    for command in writes.commands:
        args += [len(command), *command]
    return bool(_SCRIPT(keys=[key, lock], args=args, client=conn))


# Run by its SHA on any client (loaded again where Redis does not know it); bytes, so no client's
# encoder is needed to hash it.
_SCRIPT = Script(None, _COMMIT.encode())  # type: ignore[arg-type]


__all__ = ["Recorder", "commit_if_unchanged"]
