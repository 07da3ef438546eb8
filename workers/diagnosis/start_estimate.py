"""When will a waiting run start, and can it ever fit (SPEC §5b): pure, from evidence only.

Kueue says where a run waits, not when it will start (kubernetes-sigs/kueue#2833 asks; Slurm's
`squeue --start` answers it). What is known: the admitted Workloads holding the flavour the run
needs, and for each when its quota comes back —
* admission time + `maximumExecutionTimeSeconds` − `accumulatedPastExecutionTimeSeconds` (Kueue
  deactivates it then: `reconcileMaxExecutionTime`, workload_controller.go): an **upper bound**;
* taubot's own training ETA of that run, where the user could read its log: an **estimate**.
The run starts when, after the Workloads ahead of it (Kueue's order) have been admitted, enough
quota is free: the releases are walked in time order. `latest` comes only from upper bounds;
`earliest` walks every release it knows — an ETA where one was read, else the time limit, which it
has certainly reached by then — and is given only when the release that lets the run in is an ETA
or quota free now: with time limits alone `earliest` is None (a holder may end sooner), with ETAs
alone `latest` is None (an ETA bounds nothing). A holder with neither is an `unknown` line, and a
time the walk cannot reach without it is None: never a time without a basis.

A run that can never fit says so instead, with the numbers: more than the ClusterQueue's nominal
plus borrowing limit (the most it may ever use, clusterqueue_types.go), or more of a resource per
pod than the largest node of the flavour.

The inputs are plain Kubernetes objects (a dump, or what the user's reads returned); nothing
here reads a clock: `now` comes from the caller.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from .linkage import RunObjects, meta
from .queue_position import (
    CAVEAT,
    GPU,
    QueuePosition,
    StartEstimate,
    _wanted,
    cohort_of,
    free_quota,
    quantity,
)
from .timeutil import parse_time


@dataclass
class Holder:
    """An admitted Workload holding some of the flavour's quota, and when it releases it."""

    key: str  # namespace/name
    amount: float
    cluster_queue: str = ""
    run: str = ""  # the card's name for it: its job's name (namespace/name outside the run's namespace)
    deadline: datetime | None = None  # admission + time limit: an upper bound
    limit_seconds: float | None = None
    admitted_at: datetime | None = None
    eta: datetime | None = None  # taubot's training ETA: an estimate

    @property
    def estimate(self) -> datetime | None:
        """The earliest of its ETA and its deadline, when it has an ETA."""
        if self.eta is None:
            return None
        return min(self.eta, self.deadline) if self.deadline else self.eta

    @property
    def by_eta(self) -> bool:
        """Its best-known release is its ETA (one before its time limit, or without one)."""
        return self.eta is not None and (self.deadline is None or self.eta <= self.deadline)

    @property
    def name(self) -> str:
        return self.run or self.key


@dataclass
class Waiting:
    """A pending Workload ahead of the run (or the run itself), with what it asks for."""

    key: str
    amount: float | None  # None: its request could not be read
    limit_seconds: float | None = None
    cluster_queue: str = ""


@dataclass
class Pool:
    """What the run's ClusterQueue may use of one flavour and resource: at most ``queue_cap`` (nominal +
    borrowing limit; nominal alone without a cohort) of its own, and the cohort's ``pool_cap`` in all."""

    resource: str
    flavor: str
    cluster_queue: str
    nominal: float
    queue_cap: float  # math.inf: no borrowing limit in a cohort
    pool_cap: float
    cohort: str | None = None
    holders: list[Holder] = field(default_factory=list)
    unread_held: float = 0.0  # held by Workloads the user could not read (reservation minus those read)
    unread_held_own: float = 0.0
    strategy: str = "BestEffortFIFO"
    cohort_unread: bool = False  # in a cohort whose other ClusterQueues were not read


def _fmt(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _hhmm(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%H:%M")


def _amount(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.2f}"


@dataclass(frozen=True)
class Release:
    """Quota coming back at ``at``: ``estimate`` when from an ETA, else a time limit's upper bound."""

    at: datetime
    amount: float
    own_queue: bool
    why: str  # the basis line
    estimate: bool = False
    card: str = ""  # the card's words for it, for the release that lets the run in


@dataclass(frozen=True)
class Walked:
    """When the run gets in, if it does; the releases (and admissions ahead) used; and what let it in:
    `free` (quota free now), `estimate` (an ETA) or `limit` (a time limit)."""

    at: datetime | None
    used: list[str]
    by: str = ""
    card: str = ""


def _gpus(amount: float, resource: str) -> str:
    return f"{_amount(amount)} GPU{'s' if amount != 1 else ''}" if resource == GPU else \
        f"{_amount(amount)} {resource}"


def _releases(pool: Pool, now: datetime, *, mode: str) -> list[Release]:
    """The holders' releases a walk in ``mode`` knows: `latest` their time limits only; `estimate` the
    best known of each — its ETA, else its time limit (it has certainly released by then)."""
    out: list[Release] = []
    for h in pool.holders:
        by_eta = mode == "estimate" and h.by_eta
        at = h.estimate if by_eta else h.deadline
        if at is None:
            continue
        own, frees = h.cluster_queue == pool.cluster_queue, f"{_amount(h.amount)} {pool.resource}"
        if by_eta:
            out.append(Release(max(at, now), h.amount, own, f"{h.key}'s ETA frees {frees} at {_hhmm(at)}",
                               True, f"when {h.name}'s ETA frees {_gpus(h.amount, pool.resource)}"))
        else:
            out.append(Release(max(at, now), h.amount, own,
                               f"{h.key}'s time limit frees {frees} by {_hhmm(at)} (admitted "
                               f"{_hhmm(h.admitted_at) if h.admitted_at else '?'} + "
                               f"{_amount(h.limit_seconds or 0)} s)"))
    return sorted(out, key=lambda r: r.at)


def _walk(pool: Pool, need: float, ahead: list[Waiting], now: datetime, *, mode: str) -> Walked:
    """When the run is admitted if each holder releases at its ``mode`` time (`_releases`), and the
    releases used; ``at`` None when the known releases never free enough."""
    own = sum(h.amount for h in pool.holders if h.cluster_queue == pool.cluster_queue) + pool.unread_held_own
    total = sum(h.amount for h in pool.holders) + pool.unread_held
    events = _releases(pool, now, mode=mode)
    queue = [*ahead, Waiting("the run", need, cluster_queue=pool.cluster_queue)]
    used: list[str] = []
    t = now
    last: Release | None = None

    def fits(amount: float) -> bool:
        return own + amount <= pool.queue_cap + 1e-9 and total + amount <= pool.pool_cap + 1e-9

    while True:
        admitted_any = True
        while admitted_any:
            admitted_any = False
            for w in list(queue):
                amount = w.amount or 0.0
                if amount > min(pool.queue_cap, pool.pool_cap):
                    queue.remove(w)  # it can never fit: Kueue passes it by
                    continue
                if fits(amount):
                    if w.key == "the run":
                        if last is None:
                            return Walked(t, used, "free")
                        return Walked(t, used, "estimate" if last.estimate else "limit", last.card)
                    own += amount
                    total += amount
                    queue.remove(w)
                    admitted_any = True
                    if w.limit_seconds:  # it, too, ends by its limit
                        end = t + timedelta(seconds=w.limit_seconds)
                        events.append(Release(end, amount, True, f"{w.key} (ahead of you) is admitted at "
                                              f"{_hhmm(t)}; its time limit frees {_amount(amount)} by "
                                              f"{_hhmm(end)}"))
                        events.sort(key=lambda e: e.at)
                    used.append(f"{w.key} (ahead of you) takes {_amount(amount)} {pool.resource} "
                                f"at {_hhmm(t)}")
                    break
                if pool.strategy == "StrictFIFO":
                    break  # the head blocks everything behind it
        if not events:
            return Walked(None, used)
        last = events.pop(0)
        t = max(t, last.at)
        total -= last.amount
        if last.own_queue:
            own -= last.amount
        used.append(last.why)


def start_estimate(pool: Pool, need: float, ahead: list[Waiting], now: datetime) -> StartEstimate:
    """The run's start as Slurm's `--start` would put it, from ``pool``'s holders (see the module)."""
    silent = [h for h in pool.holders if h.deadline is None and h.eta is None]
    unknown = [f"{h.key} holds {_amount(h.amount)} {pool.resource}: no time limit and no readable ETA"
               for h in silent]
    if pool.unread_held > 0:
        unknown.append(f"{_amount(pool.unread_held)} reserved {pool.resource} in flavour {pool.flavor} are "
                       "held by no Workload you could read")
    if pool.cohort_unread:
        unknown.append(f"cohort {pool.cohort}'s other ClusterQueues were not read: borrowing could start it "
                       "sooner than this")
    unread_ahead = [w for w in ahead if w.amount is None]
    if unread_ahead:
        unknown.append(f"{len(unread_ahead)} ahead of you ask for what you may not read")
    early = _walk(pool, need, ahead, now, mode="estimate")
    late = _walk(pool, need, ahead, now, mode="latest")
    earliest = early.at if early.by in ("free", "estimate") else None
    latest, l_used = late.at, late.used
    if pool.unread_held > 0 or unread_ahead:
        latest, l_used = None, []  # what they hold or take could delay it past any bound
    if earliest is not None and latest is not None and earliest > latest:
        earliest = latest
    free_now = f"{_gpus(_free(pool), pool.resource)} free now"
    basis: list[str] = []
    e_why = l_why = None
    if earliest is not None:
        e_why = early.card or free_now
        basis += early.used or [f"{_amount(_free(pool))} {pool.resource} of flavour {pool.flavor} free now"]
    if latest is not None:
        l_why = "the holders' time limits" if l_used else free_now
        basis += [line for line in l_used if line not in basis]
    est = StartEstimate(earliest=_fmt(earliest) if earliest else None,
                        latest=_fmt(latest) if latest else None, basis=basis, unknown=unknown,
                        earliest_because=e_why, latest_because=l_why)
    unread = (f"{_gpus(pool.unread_held, pool.resource)} reserved by no Workload you could read"
              if pool.unread_held > 0 else None)
    return est.model_copy(update={"card": short_text(est, now, silent_holders=len(silent), unread=unread,
                                                     unread_ahead=len(unread_ahead))})


def _free(pool: Pool) -> float:
    own = sum(h.amount for h in pool.holders if h.cluster_queue == pool.cluster_queue) + pool.unread_held_own
    total = sum(h.amount for h in pool.holders) + pool.unread_held
    return max(min(pool.queue_cap - own, pool.pool_cap - total), 0.0)


def _when(iso: str, now: datetime) -> str:
    at = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return f"{at:%H:%M} UTC" if at.date() == now.astimezone(UTC).date() else f"{at:%Y-%m-%d %H:%M} UTC"


def _times(est: StartEstimate, now: datetime) -> list[str]:
    parts = []
    if est.earliest:
        parts.append(f"earliest ≈ {_when(est.earliest, now)} ({est.earliest_because})")
    if est.latest:
        parts.append(f"at the latest {_when(est.latest, now)} ({est.latest_because})")
    return parts


def short_text(est: StartEstimate, now: datetime, *, silent_holders: int, unread: str | None,
               unread_ahead: int = 0) -> str:
    """The card's one start line (SPEC §5b): `earliest ≈ 14:20 UTC (when llama-a's ETA frees 16
    GPUs), at the latest 18:00 UTC (the holders' time limits) — preemption, fair sharing and borrowing
    can change it`, or what is missing in counts (`unknown: 2 holders have no time limit and no
    readable ETA`); every holder and release is in *Details*."""
    missing = []
    if silent_holders:
        missing.append(f"{silent_holders} holder{'s have' if silent_holders != 1 else ' has'} no time limit "
                       "and no readable ETA")
    if unread:
        missing.append(unread)
    if unread_ahead:
        missing.append(f"{unread_ahead} ahead of you ask for what you may not read")
    parts = _times(est, now)
    if not parts:
        return "unknown: " + ("; ".join(missing) if missing else "the known releases do not free enough")
    if est.earliest and not est.latest and missing:
        parts.append(f"no latest ({missing[0]})")
    return ", ".join(parts) + f" — {est.caveat}"


UNKNOWN_LISTED = 5  # holders without a limit or an ETA named in the long text; the rest counted


def listed(lines: list[str], limit: int) -> list[str]:
    """``lines`` up to ``limit``, then `+N more` for the rest."""
    return lines if len(lines) <= limit else [*lines[:limit], f"+{len(lines) - limit} more"]


def estimate_text(est: StartEstimate, now: datetime) -> str:
    """The long form (the terminal tree, `start_time` in JSON): `earliest ≈ 14:20 UTC (when llama-a's
    ETA frees 16 GPUs), at the latest 18:00 UTC (the holders' time limits)`, or `unknown: …` — never a
    time without its basis; what is missing listed (at most `UNKNOWN_LISTED`, then counted); the caveat
    once."""
    parts = _times(est, now)
    missing = "; ".join(listed(est.unknown, UNKNOWN_LISTED))
    if not parts:
        return "unknown: " + (missing or "the releases known do not free enough quota for it")
    if not est.earliest:
        parts.append("no earlier estimate (no readable ETA frees enough; a holder may end sooner)")
    elif not est.latest:
        parts.append(f"no latest ({missing or 'an ETA bounds nothing'})")
    return ", ".join(parts) + f"; {est.caveat}"


# ------------------------------------------------------------------ from Kubernetes objects


def _requests(container: dict) -> dict[str, float]:
    res = container.get("resources") or {}
    out: dict[str, float] = {}
    for source in (res.get("limits") or {}, res.get("requests") or {}):  # requests win
        for name, qty in source.items():
            value = quantity(qty)
            if value is not None:
                out[name] = value
    return out


def per_pod(pod_set: dict) -> dict[str, float]:
    """One pod's requests of a pod set (its containers summed; an init container's larger request wins,
    as the scheduler counts it)."""
    spec = (pod_set.get("template") or {}).get("spec") or {}
    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in _requests(c).items():
            total[k] = total.get(k, 0.0) + v
    for c in spec.get("initContainers") or []:
        for k, v in _requests(c).items():
            total[k] = max(total.get(k, 0.0), v)
    return total


def workload_request(wl: dict, resource: str) -> float:
    """What a Workload asks for of ``resource`` in all (each pod set's count × per pod)."""
    return sum(per_pod(ps).get(resource, 0.0) * int(ps.get("count") or 1)
               for ps in (wl.get("spec") or {}).get("podSets") or [])


def _true(wl: dict, ctype: str) -> dict | None:
    for c in (wl.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype and c.get("status") == "True":
            return c
    return None


def limit_seconds(wl: dict) -> float | None:
    """Time left of a Workload's limit once admitted: `maximumExecutionTimeSeconds` less what earlier
    admissions used (`accumulatedPastExecutionTimeSeconds`; v1beta1 spells it `…Exexcution…`)."""
    limit = (wl.get("spec") or {}).get("maximumExecutionTimeSeconds")
    if not isinstance(limit, int | float) or isinstance(limit, bool) or limit <= 0:
        return None
    status = wl.get("status") or {}
    past = status.get("accumulatedPastExecutionTimeSeconds",
                      status.get("accumulatedPastExexcutionTimeSeconds"))
    used = float(past) if isinstance(past, int | float) and not isinstance(past, bool) else 0.0
    return float(limit) - used


def holding(wl: dict, flavor: str, resource: str) -> float:
    """How much of ``resource`` in ``flavor`` an admitted Workload's podSetAssignments hold."""
    total = 0.0
    for psa in ((wl.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        if (psa.get("flavors") or {}).get(resource) == flavor:
            total += quantity((psa.get("resourceUsage") or {}).get(resource, 0)) or 0.0
    return total


def _job_name(wl: dict) -> str:
    """The name of the job a Workload was made for (its controller owner), else ''."""
    refs = meta(wl).get("ownerReferences") or []
    owner = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return str((owner or {}).get("name") or "")


def holder_of(wl: dict, flavor: str, resource: str, etas: Mapping[str, datetime],
              home: str | None = None) -> Holder | None:
    """An admitted, unfinished Workload that holds some of the flavour, as a `Holder`; named for the
    card by its job (with its namespace unless that is ``home``, the run's)."""
    if _true(wl, "Finished") or not _true(wl, "QuotaReserved"):
        return None
    amount = holding(wl, flavor, resource)
    if amount <= 0:
        return None
    md = meta(wl)
    key = f"{md.get('namespace')}/{md.get('name')}"
    job = _job_name(wl)
    run = (job if md.get("namespace") == home else f"{md.get('namespace')}/{job}") if job else ""
    admitted = _true(wl, "Admitted") or _true(wl, "QuotaReserved")
    at = parse_time((admitted or {}).get("lastTransitionTime"))
    left = limit_seconds(wl)
    deadline = at + timedelta(seconds=left) if at is not None and left is not None else None
    return Holder(key=key, amount=amount, cluster_queue=((wl.get("status") or {}).get("admission") or {})
                  .get("clusterQueue") or "", run=run, deadline=deadline, limit_seconds=left, admitted_at=at,
                  eta=etas.get(key))


def _flavor_quota(cq: dict, flavor: str, resource: str) -> tuple[float, float | None] | None:
    """(nominalQuota, borrowingLimit or None) of ``flavor``/``resource`` in a ClusterQueue's spec."""
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fl in group.get("flavors") or []:
            if fl.get("name") != flavor:
                continue
            for res in fl.get("resources") or []:
                if res.get("name") == resource:
                    nominal = quantity(res.get("nominalQuota", 0)) or 0.0
                    limit = res.get("borrowingLimit")
                    return nominal, (quantity(limit) if limit is not None else None)
    return None


def _reserved(cq: dict, flavor: str, resource: str) -> float | None:
    status = cq.get("status") or {}
    for fl in status.get("flavorsReservation") or status.get("flavorsUsage") or []:
        if fl.get("name") == flavor:
            for res in fl.get("resources") or []:
                if res.get("name") == resource:
                    return quantity(res.get("total", 0)) or 0.0
    return None


def run_flavor(cq: dict, run_workloads: list[dict]) -> tuple[str, str] | None:
    """(flavour, resource) the run waits for: the one Kueue's message names, else the first flavour of
    the ClusterQueue covering the run's GPUs (or its first requested resource)."""
    resources, flavors = _wanted(run_workloads)
    wanted = sorted(resources) or [GPU]
    resource = GPU if GPU in wanted else wanted[0]
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for fl in group.get("flavors") or []:
            if flavors and fl.get("name") not in flavors:
                continue
            if any(r.get("name") == resource for r in fl.get("resources") or []):
                return fl.get("name") or "", resource
    return None


def build_pool(cq: dict, flavor: str, resource: str, *, cohort_queues: list[dict], admitted: list[dict],
               etas: Mapping[str, datetime], home: str | None = None) -> Pool | None:
    """The run's ClusterQueue (and its cohort's, as far as they were read) for one flavour; ``home``:
    the run's namespace (its holders are named without it)."""
    quota = _flavor_quota(cq, flavor, resource)
    if quota is None:
        return None
    nominal, borrowing = quota
    name = meta(cq).get("name") or ""
    cohort = cohort_of(cq)
    peers = [q for q in cohort_queues if cohort and cohort_of(q) == cohort and meta(q).get("name") != name]
    pool_cap = nominal + sum((_flavor_quota(q, flavor, resource) or (0.0, None))[0] for q in peers)
    queue_cap = nominal if not cohort else nominal + (borrowing if borrowing is not None else math.inf)
    members = {name, *(meta(q).get("name") for q in peers)}
    holders = [h for wl in admitted
               if ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") in members
               and (h := holder_of(wl, flavor, resource, etas, home)) is not None]
    unread_own = unread = 0.0
    for q in [cq, *peers]:
        qname = meta(q).get("name")
        reserved = _reserved(q, flavor, resource)
        seen = sum(h.amount for h in holders if h.cluster_queue == qname)
        if reserved is not None and reserved > seen + 1e-9:
            unread += reserved - seen
            if qname == name:
                unread_own += reserved - seen
    strategy = (cq.get("spec") or {}).get("queueingStrategy") or "BestEffortFIFO"
    return Pool(resource=resource, flavor=flavor, cluster_queue=name, nominal=nominal, queue_cap=queue_cap,
                pool_cap=min(pool_cap, queue_cap) if not peers else pool_cap, cohort=cohort, holders=holders,
                unread_held=unread, unread_held_own=unread_own, strategy=strategy,
                cohort_unread=bool(cohort) and not peers)


def _node_matches(node: dict, flavor_obj: dict | None) -> bool:
    wanted = ((flavor_obj or {}).get("spec") or {}).get("nodeLabels") or {}
    node_labels = meta(node).get("labels") or {}
    return all(node_labels.get(k) == v for k, v in wanted.items())


def never_fits(run_workloads: list[dict], pool: Pool | None, nodes: list[dict],
               flavor_obj: dict | None = None) -> tuple[str, str] | None:
    """(why, owner) when the run can never be admitted or placed; None when it could.

    The queue limit is the queue owner's; a pod larger than every node of the flavour (its
    ResourceFlavor's nodeLabels when known, else every node read) the researcher's."""
    if pool is not None:
        need = sum(workload_request(wl, pool.resource) for wl in run_workloads)
        cap = min(pool.queue_cap, pool.pool_cap)
        if need > cap + 1e-9:
            if not pool.cohort:
                how = f"its nominal quota {_amount(pool.nominal)}, no cohort to borrow from"
            elif math.isfinite(pool.queue_cap) and pool.queue_cap <= pool.pool_cap:
                how = (f"nominal {_amount(pool.nominal)} + borrowing limit "
                       f"{_amount(pool.queue_cap - pool.nominal)}")
            else:
                how = f"the whole cohort {pool.cohort}'s nominal quota as read"
            return (f"asks for {_amount(need)} {pool.resource}; ClusterQueue {pool.cluster_queue} can "
                    f"grant at most {_amount(cap)} in flavour {pool.flavor} ({how})", "queue-owner")
    candidates = [n for n in nodes if _node_matches(n, flavor_obj)]
    if not candidates:
        return None
    where = f"flavour {meta(flavor_obj).get('name')}" if flavor_obj else "the nodes read"
    for wl in run_workloads:
        for ps in (wl.get("spec") or {}).get("podSets") or []:
            for resource, amount in per_pod(ps).items():
                best, best_node = -1.0, ""
                for n in candidates:
                    allocatable = (n.get("status") or {}).get("allocatable") or {}
                    have = quantity(allocatable.get(resource, 0)) or 0.0
                    if have > best:
                        best, best_node = have, meta(n).get("name") or ""
                if amount > best + 1e-9 and best > 0:
                    return (f"each {ps.get('name') or 'main'} pod asks for {_amount(amount)} {resource}; the "
                            f"largest node of {where} has {_amount(best)} ({best_node})", "researcher")
    return None




# ------------------------------------------------------------------ a snapshot's whole answer


def _pending(wl: dict) -> bool:
    """A Workload Kueue still queues: no quota reserved, not finished, not deactivated."""
    return (not _true(wl, "QuotaReserved") and not _true(wl, "Finished")
            and (wl.get("spec") or {}).get("active") is not False)


def queue_order(wl: dict) -> tuple:
    """Kueue's order within a ClusterQueue: higher priority first, then older (its queueing
    timestamp: creation, or the last eviction's requeue), then by name for a stable answer."""
    priority = (wl.get("spec") or {}).get("priority")
    requeued = _true(wl, "Evicted") or {}
    at = requeued.get("lastTransitionTime") or meta(wl).get("creationTimestamp") or ""
    return (-(priority if isinstance(priority, int) and not isinstance(priority, bool) else 0), at,
            meta(wl).get("namespace") or "", meta(wl).get("name") or "")


def snapshot_position(objs: RunObjects, now: datetime, etas: Mapping[str, datetime] | None = None
                      ) -> QueuePosition | None:
    """A waiting run's place, start estimate and never-fits from what a snapshot holds: its
    ClusterQueue, the Workloads of the queue (and cohort) and the Nodes. None when the snapshot does
    not hold the run's ClusterQueue (then nothing here could be said with a basis)."""
    waiting = [w for w in objs.workloads if _pending(w)]
    cq = next((q for q in objs.queues if q.get("kind") == "ClusterQueue"), None)
    if objs.run is None or not waiting or cq is None:
        return None
    cq_name = meta(cq).get("name") or ""
    mine = waiting[0]
    local = (mine.get("spec") or {}).get("queueName") or ""
    ns = meta(mine).get("namespace") or ""
    feeds = {(meta(q).get("namespace") or "", meta(q).get("name") or ""):
             (q.get("spec") or {}).get("clusterQueue") for q in objs.of_kind("LocalQueue")}
    everyone = [*objs.workloads, *objs.peer_workloads]

    def in_cq(w: dict) -> bool:
        admitted_in = ((w.get("status") or {}).get("admission") or {}).get("clusterQueue")
        queued_in = feeds.get((meta(w).get("namespace") or "", (w.get("spec") or {}).get("queueName") or ""))
        return (admitted_in or queued_in) == cq_name or w is mine

    pending = sorted((w for w in everyone if _pending(w) and in_cq(w)), key=queue_order)
    index = next(i for i, w in enumerate(pending) if w is mine)
    ahead = pending[:index]
    local_pending = [w for w in pending if meta(w).get("namespace") == ns
                     and (w.get("spec") or {}).get("queueName") == local]
    local_index = next(i for i, w in enumerate(local_pending) if w is mine)
    local_ahead = local_pending[:local_index]
    quota, quota_why = free_quota(cq, waiting)
    qp = QueuePosition(
        local_queue=local, cluster_queue=cq_name, position_in_cluster_queue=index + 1,
        position_in_local_queue=local_index + 1, pending_in_local_queue=len(local_pending),
        ahead_in_local_queue=[meta(w).get("name") or "?" for w in local_ahead],
        gpus_ahead=sum(int(workload_request(w, GPU)) for w in local_ahead),
        ahead_elsewhere=len(ahead) - len(local_ahead), pending_in_cluster_queue=len(pending),
        gpus_ahead_in_cluster_queue=sum(int(workload_request(w, GPU)) for w in ahead),
        free_quota=quota, free_quota_unavailable=quota_why, cohort=cohort_of(cq))
    picked = run_flavor(cq, waiting)
    if picked is None:
        return qp.model_copy(update={"start_estimate": StartEstimate(
            unknown=["the ClusterQueue offers no flavour for what the run asks for"])})
    flavor, resource = picked
    pool = build_pool(cq, flavor, resource, cohort_queues=objs.of_kind("ClusterQueue"), admitted=everyone,
                      etas=etas or {}, home=ns)
    flavor_obj = next((f for f in objs.of_kind("ResourceFlavor") if meta(f).get("name") == flavor), None)
    cant = never_fits(waiting, pool, objs.of_kind("Node"), flavor_obj)
    if not any(_node_matches(n, flavor_obj) for n in objs.of_kind("Node")) and (cant is None or
                                                                             cant[1] != "queue-owner"):
        of = f" of flavour {flavor}" if flavor_obj else ""
        qp = qp.model_copy(update={"node_size": f"not checked (the dump holds no Node{of})"})
    if cant is not None:
        return qp.model_copy(update={"never_fits": cant[0], "never_fits_owner": cant[1],
                                     "start_time": f"never: it can never fit ({cant[0]})"})
    if pool is None:
        return qp
    need = sum(workload_request(w, resource) for w in waiting)
    queued = [Waiting(f"{meta(w).get('namespace')}/{meta(w).get('name')}", workload_request(w, resource),
                      limit_seconds(w), cq_name) for w in ahead]
    est = start_estimate(pool, need, queued, now)
    return qp.model_copy(update={"start_estimate": est, "start_time": estimate_text(est, now)})


# ------------------------------------------------------------------ a group's next start


GROUP_ESTIMATES = 8  # the first Workloads pending in a ClusterQueue (Kueue's order) whose start is estimated


def _key(wl: dict) -> str:
    md = meta(wl)
    return f"{md.get('namespace')}/{md.get('name')}"


def next_starts(cluster_queue: dict, *, workloads: list[dict], local_queues: list[dict],
                cluster_queues: list[dict], now: datetime, etas: Mapping[str, datetime] | None = None,
                limit: int = GROUP_ESTIMATES) -> dict[str, StartEstimate] | None:
    """When each of the first ``limit`` Workloads pending in ``cluster_queue`` (Kueue's order) may start
    (namespace/name → estimate), from what a reader that sees only some namespaces holds — the stall
    monitor's cache (SPEC §7b, issue 35): ``workloads`` (those namespaces', admitted or pending),
    ``local_queues`` (which ClusterQueue each feeds) and ``cluster_queues`` (for its cohort). Quota held
    by Workloads it cannot see is an unknown line (`build_pool`: reserved, held by none read), never
    guessed; and when the ClusterQueue counts more pending Workloads than it sees
    (`status.pendingWorkloads`), an unseen one could be ahead of any: then None — never a time without
    a basis. One pool per flavour, one walk per Workload: bounded by ``limit`` whatever the queue."""
    name = meta(cluster_queue).get("name") or ""
    feeds = {(meta(q).get("namespace") or "", meta(q).get("name") or ""):
             (q.get("spec") or {}).get("clusterQueue") for q in local_queues}

    def in_cq(w: dict) -> bool:
        admitted_in = ((w.get("status") or {}).get("admission") or {}).get("clusterQueue")
        queued_in = feeds.get((meta(w).get("namespace") or "", (w.get("spec") or {}).get("queueName") or ""))
        return (admitted_in or queued_in) == name

    pending = sorted((w for w in workloads if _pending(w) and in_cq(w)), key=queue_order)
    counted = (cluster_queue.get("status") or {}).get("pendingWorkloads")
    if isinstance(counted, int) and not isinstance(counted, bool) and counted > len(pending):
        return None
    pools: dict[tuple[str, str], Pool | None] = {}
    out: dict[str, StartEstimate] = {}
    for index, wl in enumerate(pending[:limit]):
        picked = run_flavor(cluster_queue, [wl])
        if picked is None:
            continue
        if picked not in pools:
            pools[picked] = build_pool(cluster_queue, *picked, cohort_queues=cluster_queues,
                                       admitted=workloads, etas=etas or {})
        pool = pools[picked]
        if pool is None or never_fits([wl], pool, []) is not None:
            continue
        resource = picked[1]
        ahead = [Waiting(_key(w), workload_request(w, resource), limit_seconds(w), name)
                 for w in pending[:index]]
        out[_key(wl)] = start_estimate(pool, workload_request(wl, resource), ahead, now)
    return out


def soonest(estimates: Iterable[StartEstimate | None]) -> StartEstimate | None:
    """The estimate with the soonest start (its `earliest`, else its `latest`); None when none has one."""
    timed = [(at, est) for est in estimates if est is not None and (at := est.earliest or est.latest)]
    return min(timed, key=lambda t: t[0])[1] if timed else None


__all__ = ["CAVEAT", "GROUP_ESTIMATES", "UNKNOWN_LISTED", "Holder", "Pool", "StartEstimate", "Waiting",
           "build_pool", "estimate_text", "holder_of", "limit_seconds", "listed", "never_fits", "next_starts",
           "per_pod", "queue_order", "run_flavor", "short_text", "snapshot_position", "soonest",
           "start_estimate", "workload_request"]
