"""`/tau status <run> --watch`: the phase card edited in place until the run settles (SPEC §7).

Shape. The status job posts the parent and the card as usual, then saves a
`WatchState` in Redis and puts the first tick in the workers' due set (`plumbing/timed_jobs.py`). Each tick
re-collects under the requester's identity (the same bounded requests as a
status), re-renders, edits the card through the posted-card store (only
when it changed), and schedules the next tick. Nothing lives in a worker's
memory between ticks, so a worker that dies between ticks loses nothing.

Why a tick number: each tick carries the number it expects the state to be
at. A tick that finds another number (a retried tick whose successor already
ran, a watch stopped and started again) does nothing, so a watch never forks
into two chains of ticks. Why a per-watch lock: a Stop press and a tick can
run at the same time on two workers; both read-modify-write the state. A tick
of an unchanged run takes no lock: it writes only if the state is still the
bytes it read and nobody holds the lock (`run_tick`).

One watch per (channel, workspace, run): an owner key taken with SET NX. A
second `--watch` of the same run joins the running watch only after the same
access review as the Stop button (may the asker `get` the run?), so nobody
becomes a watcher of a run they may not read.

Escalate on a watched card: the state keeps the offer for the run's current
(layer, owner) and a new one is stored only when that pair changes (a fresh
offer per tick would change the button and re-send an unchanged card). Each
tick asks whether the pair was escalated and then shows the note instead of
the button; the escalation job edits the same stored card, so both agree.

The package, by what each part decides:

* `state` — the watch's record in Redis (state, keys, a paced tick's pending card);
* `card` — the card of one tick, its Escalate offer, the transition replies' text;
* `schedule` — when the next tick runs, written with the state;
* `tick` — one tick: probe or full read (`workers/collect/plan.py` decides which), edit, reply;
* `start` — starting or joining a watch; `stop` — *Stop watching*.
"""

from workers.contracts.ids import STOP_WATCHING_ACTION

from .schedule import TICK_FAILURE, TICK_JOB
from .start import join_watch, start_watch
from .state import WatchState, active_watches, load_state, lock_name, owner_key, pending_key, state_key
from .stop import run_stop
from .tick import end_after_failure, on_tick_failure_callback, run_tick

__all__ = ["STOP_WATCHING_ACTION", "TICK_FAILURE", "TICK_JOB", "WatchState", "active_watches",
           "end_after_failure", "join_watch", "load_state", "lock_name", "on_tick_failure_callback",
           "owner_key", "pending_key", "run_stop", "run_tick", "start_watch", "state_key"]
