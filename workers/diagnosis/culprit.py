"""Which rank of a distributed run is the culprit of its hang or crash (SPEC §5c) — pure.

Why: when a collective hangs, every rank but one prints the same NCCL watchdog
line; the one that matters is the rank that never entered (or never completed)
the collective the others wait in, or the first to fail. Reading 32 logs to find
it is the researcher's chore this module takes over. The rules are SPEC §5c's,
exactly, and each one gives a culprit only when the evidence singles one rank
out — otherwise None, never a guess:

1. PyTorch's desync-debug report names the lagging rank (`[47] joined but
   didn't finish collective #41207`, `ranks [47] are the lagging ranks`);
2. a lagging sequence number: the others wait in SeqNum S, one rank waits in an
   earlier one or never enqueued S (`last enqueued NCCL work` below S);
3. one rank's own failure (an OOM, a segfault, an exception) while the others
   fail on it (peer closed, watchdog, SIGTERM from the launcher), or a failure
   that precedes every other by more than 10 s;
4. torchrun's `Root Cause (first observed failure)` rank, when its exit code
   differs from the others' or its time precedes theirs by more than 10 s — all
   ranks aborting (-6) together after a watchdog timeout is no culprit;
5. the one silent rank: its log was read, it printed no watchdog line while
   every other rank waits on the same sequence number;
6. evidence naming a worker IP but no rank (Ray's "A worker died … Worker IP
   address") gives `rank` None and the node of the pod with that IP.

The culprit is then joined to its pod, node and the node's layer-6 facts
(`nodes.node_faults`: NotReady, GPU problem conditions with their XIDs,
withdrawn GPUs), which is how one sentence can say "gpu-a3 logged Xid 79".
The formats and their sources: docs/reference/training-logs-ranks.md.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from .linkage import labels, meta
from .models import Culprit, PodLog
from .nodes import APPLICATION_XIDS, node_faults, xids_in
from .podfacts import condition
from .progress import LAUNCHERS, Found, display, parse_progress, strip_ansi
from .timeutil import parse_time

# A rank's own prefix on every line torchrun relays (`[rank3]: …`, `[default0]: …`).
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:")
# A Ray worker's or actor's line as the driver relays it: `(RayTrainWorker pid=81, ip=10.0.0.5) …`.
_RAY_WORKER = re.compile(r"^\((?P<name>[\w.:<>-]+) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[\w.:-]+))?\)\s?")
# The rank in ProcessGroupNCCL's log prefix: `[Rank 2]`, `[PG 0 Rank 2]`, `[PG 1 Rank 0]`,
# `[PG ID 1 PG GUID 1 Rank 2]`, `[PG 0 (default_pg) Rank 1]` (pytorch c10d ProcessGroupNCCL.cpp logPrefix).
_PG_RANK = re.compile(r"\[(?:PG\b[^\]]*?\s)?Rank (\d+)\]")
# `Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, …`
_WATCHDOG = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)")
# The follow-ups: `Exception (either an error or timeout) detected by watchdog at work: 1580, last
# enqueued NCCL work: 1582, last completed NCCL work: 1579.`, `Timeout at NCCL work: …, last …`,
# `NCCL error is detected by watchdog at work: …`, and the flight recorder's dump-signal line
# `Received a dump signal … Last enqueued NCCL work: 1155873, last completed NCCL work: 1155873.`
_AT_WORK = re.compile(r"(?:detected by watchdog at work|Timeout at NCCL work): (\d+)")
_LAST_WORK = re.compile(r"last enqueued NCCL work: (-?\d+), last completed NCCL work: (-?\d+)", re.IGNORECASE)
# Desync debug (pytorch c10d TraceUtils.h retrieveDesyncReport).
_DESYNC = re.compile(
    r"\[(?P<ranks>[\d,\s.]+)\] (?:joined but didn't finish collective #(?P<started>\d+)"
    r"|finished collective #\d+, but didn't join collective #(?P<joined>\d+))"
    r"|ranks \[(?P<lagging>[\d,\s.]+)\] are the lagging ranks")
# torchrun's ChildFailedError summary (torch elastic errors/__init__.py): `Failures:` /
# `Root Cause (first observed failure):`, entries `[0]:` with `time : 2026-12-01_20:22:25`,
# `rank : 3 (local_rank: 3)`, `exitcode : 1 (pid: 27711)`.
_FIELD = re.compile(r"^\s*(time|host|rank|exitcode)\s*:\s*(\S+)")
# torch >= 2.2's failure line: `failed (exitcode: 1) local_rank: 3 (pid: 27711) of binary: …`
_LOCAL_FAILED = re.compile(r"\bfailed \(exitcode: (-?\d+)\) local_rank: (\d+)")
# Ray names a worker's IP, no rank: the raylet's `Worker IP address: 10.0.0.5`, ActorDiedError's
# `\tip: 10.80.8.181`, RayTaskError's `ray::X() (pid=7773, ip=172.17.0.2, …)`.
_WORKER_IP = re.compile(r"Worker IP address: ([\w.:-]+)|^\s*ip: ([\d.]+)\s*$|\(pid=\d+, ip=([\d.]+)")
# A rank's failure that is a consequence of another's (its peer died, the watchdog or the
# launcher stopped it): never the culprit on its own.
_FOLLOWER = re.compile(
    r"Connection closed by peer|Connection reset by peer|remote process exited|DistBackendError|"
    r"Watchdog caught|NCCL communicator was aborted|closing signal|SIGTERM|Signal 15|"
    r"ncclRemoteError|Broken pipe|timed out|Timeout|ProcessGroupNCCL|c10d|TCPStore",
    re.IGNORECASE)


def follower(line: str) -> bool:
    """A failure line that is a consequence of another rank's (peer closed, watchdog, SIGTERM)."""
    return _FOLLOWER.search(line) is not None


LEAD_SECONDS = 10  # a failure this much earlier than every other one is the first to fail
ABORT = -6  # SIGABRT: how every rank ends after the NCCL watchdog took it down
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
KUBEFLOW_INDEX = "training.kubeflow.org/replica-index"
KUBEFLOW_TYPE = "training.kubeflow.org/replica-type"


@dataclass
class _Failure:
    rank: int | None
    exitcode: int | None
    at: datetime | None
    line: str


@dataclass
class RankFacts:
    """What one rank's log says, for the rules above."""

    rank: int | None
    pod: str | None = None
    node: str | None = None
    read: bool = True
    waits_seq: int | None = None  # the collective its watchdog timed out in
    op: str | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    watchdog: str | None = None  # the line, as displayed
    watchdog_at: datetime | None = None
    crash: Found | None = None  # its own last crash (parse_progress), not a launcher's summary
    lines: int = 0

    @property
    def waits(self) -> bool:
        return self.waits_seq is not None or self.last_enqueued is not None

    def name(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pod {self.pod}"


@dataclass
class RankReport:
    """Every rank's facts plus what a launcher's summary or Ray's messages say about them."""

    ranks: list[RankFacts] = field(default_factory=list)
    desync: list[tuple[tuple[int, ...], int | None, str]] = field(default_factory=list)
    root: _Failure | None = None
    failures: list[_Failure] = field(default_factory=list)
    worker_ips: list[tuple[str, str]] = field(default_factory=list)  # (ip, line)
    sampled: str | None = None
    unread: list[str] = field(default_factory=list)


def pod_rank(pod: dict) -> int | None:
    """A pod's rank by how its controller numbers it: an Indexed Job's completion index
    (annotation and label `batch.kubernetes.io/job-completion-index`); a Kubeflow PyTorchJob's
    `training.kubeflow.org/replica-index` (the Master is rank 0, Worker i is rank i + 1)."""
    notes = meta(pod).get("annotations") or {}
    lb = labels(pod)
    index = notes.get(INDEX_ANNOTATION) or lb.get(INDEX_ANNOTATION)
    if index is not None and str(index).isdigit():
        return int(index)
    replica = lb.get(KUBEFLOW_INDEX)
    if replica is not None and str(replica).isdigit():
        kind = (lb.get(KUBEFLOW_TYPE) or "").lower()
        return int(replica) + (1 if kind == "worker" else 0)
    return None


def _ranks_in(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def _torch_time(value: str) -> datetime | None:
    """`2026-12-01_20:22:25` as torchrun's summary writes it (local time of the agent; UTC in pods)."""
    try:
        return datetime.strptime(value, "%Y-%m-%d_%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def _summary_block(lines: list[str], report: RankReport) -> None:
    """torchrun's `Failures:` / `Root Cause (first observed failure):` entries."""
    section: str | None = None
    entry: dict[str, str] | None = None

    def close() -> None:
        if entry is None or section is None:
            return
        rank = int(entry["rank"]) if entry.get("rank", "").isdigit() else None
        code = entry.get("exitcode")
        failure = _Failure(rank, int(code) if code and re.fullmatch(r"-?\d+", code) else None,
                           _torch_time(entry.get("time", "")), "")
        failure.line = f"torchrun {'root cause' if section == 'root' else 'failure'}: rank {rank}, " \
                       f"exitcode {failure.exitcode}, time {entry.get('time', '?')}"
        if section == "root":
            report.root = failure
        else:
            report.failures.append(failure)

    for text in lines:
        if text.startswith("Failures:"):
            close()
            section, entry = "failures", None
        elif text.startswith("Root Cause"):
            close()
            section, entry = "root", None
        elif section is not None and re.match(r"^\[\d+\]:\s*$", text):
            close()
            entry = {}
        elif section is not None and entry is not None and (m := _FIELD.match(text)):
            entry.setdefault(m[1], m[2])
        elif section is not None and (text.startswith("=====") or text.startswith("-----")):
            close()
            entry = None
            if text.startswith("====="):
                section = None
    close()


def read_ranks(logs: list[PodLog], pods: list[dict], sampled: str | None = None) -> RankReport:
    """Every rank's facts from the pods' log tails (pods of the run give rank and node). A Ray
    driver log carries its workers' lines behind `(Name pid=N, ip=A)`: each worker is a rank of
    its own, on the pod with that IP (its node)."""
    by_name = {meta(p).get("name"): p for p in pods}
    by_ip = {ip: p for p in pods for ip in _pod_ips(p)}
    report = RankReport(sampled=sampled)
    facts: dict[tuple[str, int | None, str | None], RankFacts] = {}
    for log in logs:
        pod = by_name.get(log.pod) or {}
        node = (pod.get("spec") or {}).get("nodeName")
        default_rank = pod_rank(pod)
        if log.unavailable is not None:
            report.unread.append(f"{log.pod}: {log.unavailable}")
            facts[(log.pod, default_rank, None)] = RankFacts(default_rank, log.pod, node, read=False)
            continue
        # (pod, node, rank, worker pid) → the lines of that rank
        groups: dict[tuple[str, str | None, int | None, str | None], list[tuple[str | None, str]]] = {}
        plain: list[str] = []
        for stamp, raw in log.lines:
            text = strip_ansi(raw)
            where, at_node, worker = log.pod, node, None
            if (ray := _RAY_WORKER.match(text)) is not None:
                text = text[ray.end():]
                worker = ray["pid"]
                host = by_ip.get(ray["ip"] or "")
                if host is not None:
                    where = meta(host).get("name") or log.pod
                    at_node = (host.get("spec") or {}).get("nodeName")
            prefixed = _RANK_PREFIX.match(text)
            body = text[prefixed.end():].lstrip() if prefixed else text
            rank = int(prefixed[1]) if prefixed else None
            if rank is None and (pg := _PG_RANK.search(body)):
                rank = int(pg[1])
            if rank is None and worker is None:
                rank = default_rank
            groups.setdefault((where, at_node, rank, None if rank is not None else worker), []).append(
                (stamp, raw))
            plain.append(body)
            for m in _DESYNC.finditer(body):
                named = _ranks_in(m["ranks"] or m["lagging"] or "")
                seq = m["started"] or m["joined"]
                report.desync.append((named, int(seq) if seq else None, display(body)[:300]))
            if (ip := _WORKER_IP.search(body)) is not None:
                report.worker_ips.append((next(g for g in ip.groups() if g), display(body)[:300]))
        _summary_block(plain, report)
        if not groups:
            groups = {(log.pod, node, default_rank, None): []}
        several = len(groups) > 1
        for (where, at_node, rank, worker), lines in groups.items():
            if several and rank is None and worker is None and default_rank is None:
                continue  # a launcher's or driver's own lines beside its ranks' prefixed ones
            f = facts.setdefault((where, rank, worker), RankFacts(rank, where, at_node))
            _scan(f, lines)
    report.ranks = list(facts.values())
    return report


def _pod_ips(pod: dict) -> list[str]:
    status = pod.get("status") or {}
    return [ip for ip in [status.get("podIP"), *(a.get("ip") for a in status.get("podIPs") or [])] if ip]


def ranks_in_one_log(lines: list[tuple[str | None, str]], name: str) -> list[PodLog]:
    """One log that holds several ranks' lines (torchrun's `[rankN]:` in one pod, a Ray driver's
    `(Name pid=N, ip=A)` workers) as the ranks' logs; [] when it holds one rank or none."""
    seen: set[str] = set()
    for _stamp, raw in lines:
        text = strip_ansi(raw)
        if (ray := _RAY_WORKER.match(text)) is not None:
            seen.add(f"ray:{ray['pid']}")
            text = text[ray.end():]
        if (rank := _RANK_PREFIX.match(text)) is not None:
            seen.add(f"rank:{rank[1]}")
        if len(seen) >= 2:
            return [PodLog(pod=name, lines=lines)]
    return []


def _scan(f: RankFacts, lines: list[tuple[str | None, str]]) -> None:
    f.lines += len(lines)
    for stamp, raw in lines:
        text = strip_ansi(raw)
        if (w := _WATCHDOG.search(text)) is not None:
            f.waits_seq, f.op = int(w[1]), w[2]
            f.watchdog, f.watchdog_at = display(text)[:300], parse_time(stamp) if stamp else None
        elif (a := _AT_WORK.search(text)) is not None and f.waits_seq is None:
            f.waits_seq = int(a[1])
            f.watchdog = f.watchdog or display(text)[:300]
        if (last := _LAST_WORK.search(text)) is not None:
            f.last_enqueued, f.last_completed = int(last[1]), int(last[2])
            f.watchdog = f.watchdog or display(text)[:300]
    found = parse_progress(lines).found
    if found is not None and found.kind == "crash" and found.signature not in LAUNCHERS:
        f.crash = found


# ---------------------------------------------------------------------------------------------
# The rules


def _desync(report: RankReport) -> tuple[int, int | None, str] | None:
    singles = {(named[0], seq, line) for named, seq, line in report.desync if len(named) == 1}
    ranks = {r for r, _s, _l in singles}
    if len(ranks) != 1:
        return None
    rank, seq, line = sorted(singles, key=lambda x: x[1] or 0)[0]
    return rank, seq, line


def _lagging(report: RankReport) -> tuple[RankFacts, str, int, int] | None:
    """(rank, operation text, seq, others waiting) when exactly one rank lags the collective
    the others wait in."""
    waiting = [f for f in report.ranks if f.waits]
    timed = [f for f in waiting if f.waits_seq is not None]
    if len(waiting) < 2 or not timed:
        return None
    target = max(f.waits_seq for f in timed if f.waits_seq is not None)
    op = Counter(f.op for f in timed if f.waits_seq == target and f.op).most_common(1)
    op_name = op[0][0] if op else "collective"
    lag = [f for f in waiting
           if (f.waits_seq is not None and f.waits_seq < target)
           or (f.waits_seq is None and f.last_enqueued is not None and f.last_enqueued < target)]
    if len(lag) != 1:
        return None
    culprit = lag[0]
    others = len(waiting) - 1
    if culprit.waits_seq is not None:
        return culprit, f"never completed {culprit.op or op_name} SeqNum {culprit.waits_seq}", \
            culprit.waits_seq, others
    return culprit, f"never entered {op_name} SeqNum {target}", target, others


def _first_failure(report: RankReport) -> tuple[RankFacts, str] | None:
    """One rank's own failure while the others fail on it, or fail more than 10 s later."""
    crashed = [f for f in report.ranks if f.crash is not None]
    own = [f for f in crashed if f.crash is not None and not _FOLLOWER.search(f.crash.line)]
    if len(own) == 1 and (len(crashed) > 1 or any(f.waits for f in report.ranks)):
        return own[0], "failed first"
    timed = sorted((f for f in crashed if f.crash is not None and f.crash.at is not None),
                   key=lambda f: f.crash.at)  # type: ignore[union-attr]
    if len(timed) >= 2 and len(timed) == len(crashed):
        first, second = timed[0].crash.at, timed[1].crash.at  # type: ignore[union-attr]
        if first is not None and second is not None and (second - first).total_seconds() > LEAD_SECONDS:
            return timed[0], f"failed first, {(second - first).total_seconds():.0f} s before the others"
    return None


def _root_cause(report: RankReport) -> tuple[_Failure, str] | None:
    root = report.root
    if root is None or root.rank is None:
        return None
    others = [f for f in report.failures if f.rank != root.rank]
    if not others:
        return (root, "failed first (torchrun's root cause)") if root.exitcode not in (None, ABORT) else None
    codes = {f.exitcode for f in others}
    if root.exitcode is not None and root.exitcode not in codes and root.exitcode != ABORT:
        return root, f"failed first (torchrun's root cause, exit code {root.exitcode}; the others " \
                     f"{', '.join(str(c) for c in sorted(c for c in codes if c is not None))})"
    times = [f.at for f in others if f.at is not None]
    if root.at is not None and times and (min(times) - root.at).total_seconds() > LEAD_SECONDS:
        return root, "failed first (torchrun's root cause, more than 10 s before the others)"
    return None


def _silent(report: RankReport) -> tuple[RankFacts, int, str, int] | None:
    if report.sampled or report.unread:
        return None  # "every other rank waits" needs every rank read
    waiting = [f for f in report.ranks if f.waits_seq is not None]
    seqs = {f.waits_seq for f in waiting}
    silent = [f for f in report.ranks if f.read and not f.waits and f.crash is None]
    if len(waiting) < 2 or len(seqs) != 1 or len(silent) != 1:
        return None
    op = next((f.op for f in waiting if f.op), None) or "collective"
    seq = next(iter(seqs))
    return silent[0], seq, op, len(waiting)


def _by_ip(report: RankReport, pods: list[dict]) -> tuple[str, str | None, str | None, str] | None:
    """(ip, pod, node, line) when every IP-only piece of evidence names one worker that maps to a pod."""
    ips = {ip for ip, _line in report.worker_ips if ip not in ("127.0.0.1", "localhost")}
    if len(ips) != 1:
        return None
    ip = next(iter(ips))
    line = next(text for addr, text in report.worker_ips if addr == ip)
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("podIP") == ip or ip in [a.get("ip") for a in status.get("podIPs") or []]:
            return ip, meta(pod).get("name"), (pod.get("spec") or {}).get("nodeName"), line
    for pod in pods:
        if (pod.get("status") or {}).get("hostIP") == ip:
            return ip, None, (pod.get("spec") or {}).get("nodeName"), line
    return None


def _node_fact(name: str | None, nodes: dict[str, dict], pods: list[dict], pod: str | None) -> str | None:
    """The culprit node's layer-6 fault in a few words ("gpu-a3 logged Xid 79 at 10:02")."""
    if not name:
        return None
    node = nodes.get(name)
    if node is not None:
        for cond in (node.get("status") or {}).get("conditions") or []:
            if cond.get("status") != "True" or "XID" not in (cond.get("type") or "").upper():
                continue
            hardware = sorted(xids_in(cond.get("message") or "") - APPLICATION_XIDS)
            if hardware:
                at = parse_time(cond.get("lastTransitionTime") or cond.get("lastHeartbeatTime"))
                when = f" at {at.astimezone(UTC):%H:%M}" if at else ""
                return f"{name} logged Xid {', '.join(map(str, hardware))}{when}"
        faults, _notes, _app = node_faults(node)
        if faults:
            ready = condition(node, "Ready")
            ready_fault = faults[0].startswith("Ready")
            at = parse_time((ready or {}).get("lastTransitionTime")) if ready_fault else None
            when = f" since {at.astimezone(UTC):%H:%M}" if at else ""
            return f"{name}: {faults[0]}{when}"
    for p in pods:  # the pod's own device health (KEP-4680) needs no node read
        if meta(p).get("name") != pod:
            continue
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            for entry in cs.get("allocatedResourcesStatus") or []:
                for res in entry.get("resources") or []:
                    if res.get("health") == "Unhealthy":
                        return f"{name}: {entry.get('name')} {res.get('resourceID')} Unhealthy"
    return None


def _who(rank: int | None, pod: str | None, node: str | None) -> str:
    where = " ".join(x for x in (f"pod {pod}" if pod else "", f"on node {node}" if node else "") if x)
    head = f"rank {rank}" if rank is not None else (f"the worker on node {node}" if node else "a worker")
    if rank is None and node:
        where = f"pod {pod}" if pod else ""
    return f"{head} ({where})" if where else head


def _pod_of(report: RankReport, rank: int) -> RankFacts | None:
    return next((f for f in report.ranks if f.rank == rank), None)


def find_culprit(report: RankReport, pods: list[dict], nodes: dict[str, dict]) -> Culprit | None:
    """The culprit by the rules of SPEC §5c, joined to its pod, node and the node's faults."""
    if not report.ranks:
        return None
    total = len({(f.pod, f.rank) for f in report.ranks})
    rank: int | None = None
    pod = node = operation = None
    seq: int | None = None
    evidence: list[str] = []
    tail = ""
    if (d := _desync(report)) is not None:
        rank, seq, line = d
        facts = _pod_of(report, rank)
        pod, node = (facts.pod, facts.node) if facts else (None, None)
        operation = f"didn't join collective #{seq}" if seq else "lagging (desync report)"
        evidence.append(f"desync report: {line}")
    elif (lag := _lagging(report)) is not None:
        facts, operation, seq, others = lag
        rank, pod, node = facts.rank, facts.pod, facts.node
        tail = f"; the {others} other{'s' if others != 1 else ''} wait on it"
        evidence.append(f"{facts.name()}: {facts.watchdog or 'no watchdog line'}")
        evidence += [f"{f.name()}: {f.watchdog}" for f in report.ranks if f is not facts and f.watchdog][:2]
    elif (first := _first_failure(report)) is not None:
        facts, how = first
        rank, pod, node = facts.rank, facts.pod, facts.node
        crash = facts.crash
        assert crash is not None
        operation = f"{how}: {crash.summary}"
        evidence.append(f"{facts.name()}: {crash.line}")
        evidence += [f"{f.name()}: {f.crash.line}" for f in report.ranks
                     if f is not facts and f.crash is not None][:2]
    elif (root := _root_cause(report)) is not None:
        failure, how = root
        rank = failure.rank
        facts = _pod_of(report, rank) if rank is not None else None
        pod, node = (facts.pod, facts.node) if facts else (None, None)
        operation = how
        evidence.append(failure.line)
        evidence += [f.line for f in report.failures[:2]]
    elif (quiet := _silent(report)) is not None:
        facts, seq, op, others = quiet
        rank, pod, node = facts.rank, facts.pod, facts.node
        operation = f"never entered {op} SeqNum {seq}"
        tail = f"; the {others} other{'s' if others != 1 else ''} wait on it"
        evidence.append(f"{facts.name()}: its log ({facts.lines} lines) has no watchdog line")
        evidence += [f"{f.name()}: {f.watchdog}" for f in report.ranks if f.watchdog][:2]
    elif (by_ip := _by_ip(report, pods)) is not None:
        ip, pod, node, line = by_ip
        operation = f"its worker ({ip}) died"
        evidence.append(line)
    else:
        return None
    fault = _node_fact(node, nodes, pods, pod)
    sentence = f"{_who(rank, pod, node)} {operation}{tail}"
    if fault:
        sentence += f"; {fault}"
    if report.sampled:
        evidence.append(f"sampled: {report.sampled}")
        sentence += f" ({report.sampled})"
    del total
    return Culprit(rank=rank, pod=pod, node=node, operation=operation, seq=seq, evidence=evidence,
                   summary=sentence, node_fault=fault)


def why_no_culprit(report: RankReport) -> str:
    """What the ranks show when no rule singles one out — said, never guessed."""
    waiting = [f for f in report.ranks if f.waits_seq is not None]
    crashed = [f for f in report.ranks if f.crash is not None]
    seqs = sorted({f.waits_seq for f in waiting if f.waits_seq is not None})
    read = sum(1 for f in report.ranks if f.read)
    parts = [f"{read} rank log(s) read"]
    if waiting:
        parts.append(f"{len(waiting)} wait in SeqNum {', '.join(map(str, seqs[:3]))}")
    if crashed:
        parts.append(f"{len(crashed)} failed")
    if report.sampled:
        parts.append(report.sampled)
    if report.unread:
        parts.append(f"{len(report.unread)} unread")
    return "no culprit: the evidence singles out no rank (" + "; ".join(parts) + ")"


__all__ = ["LEAD_SECONDS", "RankFacts", "RankReport", "find_culprit", "pod_rank", "ranks_in_one_log",
           "read_ranks", "why_no_culprit"]
