"""Where a run's log comes from, in the order of SPEC §7a, each failure saying why.

* RayJob: the Ray **driver** log through the Ray dashboard — the job's details
  (`/api/jobs/{status.jobId}`: the driver's node), then a bounded tail of the
  driver's log from Ray's log API (`/api/v0/logs/file?…&lines=N`; the Jobs API's
  `/logs` answers the whole log, tens of MB, every time) — reached through the
  API server's `services/proxy` of `<raycluster>-head-svc` port `dashboard`,
  not the head container's stdout, which does not hold the driver output.
  Every read is bounded in bytes too. When the dashboard cannot be read (a head
  that crash-loops has none), the head pod's own container log, as kubectl reads
  it (`--previous`: the crashed instance's) — what explains the crash.
* Job: `pods/log` of the run's main container, the most recently failed pod
  first, one request per pod, at most two pods.
* When that source is gone (KubeRay deleted the head after the job; the pods
  were garbage-collected): Azure Data Explorer, after the caller passed an
  access review for `get pods/log` — the bot reads ADX with its own identity.
  Only for a run that exists, and only its own pods (`run_pods`): the pods
  read by name, else the names its controllers give, never a name prefix.

The dashboard too is read only after that `pods/log` review: the driver log
is a pod's log, and `services/proxy` is a different permission (SPEC §11).

Every Kubernetes read goes through the caller's (impersonating) reader. The
request budget is fixed whatever the run's size: two GETs for the run, one
LIST of pods or two proxy GETs, one LIST of the head pod, at most two log reads,
one access review.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timedelta

from workers.config.workspaces import KustoLogs, Registry, ResolutionFailure
from workers.contracts.identity import Identity
from workers.diagnosis.linkage import RunObjects, labels, meta
from workers.diagnosis.models import LogEvidence, PhaseState, PodLog
from workers.diagnosis.phases.common import RunContext
from workers.diagnosis.podfacts import containers, pod_name
from workers.diagnosis.progress import strip_ansi
from workers.diagnosis.progress_checks import DEFAULT_STALL_SECONDS, runtime_progress
from workers.diagnosis.timeutil import parse_time
from workers.kube.client import KubeClients
from workers.kube.reader import KubeReader, ReadError, proxy_path, resource_path
from workers.outside.text import redact, strip_controls

from .ahead import ReadAhead
from .kusto import KustoRefused, query_logs
from .memory import DriverProcess
from .model import DEFAULT_TAIL, LogLine, LogsResult, last_lines
from .ranks import needs_ranks, read_rank_logs, tail_of
from .stack import driver_stack, dump, refused

WAITING_REASONS = ("progress.stalled", "progress.hang")  # the driver lives and does not advance

POD_LOG_READS = 2
DASHBOARD_MAX_BYTES = 4 * 1024 * 1024  # a driver log read: its last `tail` lines, and never more than this
DETAILS_MAX_BYTES = 256 * 1024
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"
KUSTO_WINDOW_WITHOUT_RUN = timedelta(days=7)
KUSTO_MARGIN = timedelta(minutes=10)


def _why(error: ReadError, what: str) -> str:
    if error.kind == "forbidden":
        return f"permission denied ({error.verb} {error.resource})"
    if error.kind == "not_found":
        return f"{what} not found"
    return f"{what}: {error.describe()}"


def _main_container(pod: dict) -> str | None:
    annotated = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CONTAINER)
    names = [c.name for c in containers(pod, init=False)]
    if annotated in names:
        return annotated
    return names[0] if names else None


def _failure_time(pod: dict) -> datetime | None:
    """When the pod's main container last terminated with a failure (now or before a restart)."""
    main = _main_container(pod)
    for c in containers(pod, init=False):
        if c.name != main:
            continue
        for term in (c.terminated, c.last_terminated):
            if term and int(term.get("exitCode") or 0) != 0:
                return parse_time(term.get("finishedAt")) or parse_time(term.get("startedAt"))
    if (pod.get("status") or {}).get("phase") == "Failed":
        return parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
    return None


def _started(pod: dict) -> bool:
    """The pod's main container ran (now or before a restart): the kubelet has a log of it."""
    main = _main_container(pod)
    return any(c.running or c.terminated or c.last_terminated for c in containers(pod, init=False)
               if c.name == main)


def order_pods(pods: list[dict]) -> list[dict]:
    """The most recently failed pod first, then the most recently created that ran, then those that
    never ran (the kubelet refuses their log: "waiting to start"; read first, a pod just created
    beside a running one would cost a failed read and a round before the running one's)."""
    def key(pod: dict) -> tuple[int, float]:
        failed = _failure_time(pod)
        created = parse_time((pod.get("metadata") or {}).get("creationTimestamp"))
        moment = failed or created
        return (0 if failed else 1 if _started(pod) else 2, -(moment.timestamp() if moment else 0.0))
    return sorted(pods, key=key)


class LogAccess:
    """The caller's `get pods/log` access review in the run's namespace, asked at most once per
    read (the dashboard and ADX both need it).

    A live status asks it early (`start`, with the pods' round) so the log read that waits for it
    is not a round of its own; whoever asks, nothing is read before the answer is in."""

    def __init__(self, reader: KubeReader, namespace: str) -> None:
        self.reader, self.namespace = reader, namespace
        self._answer: bool | ReadError | None = None
        self._asked: asyncio.Future[bool | ReadError] | None = None
        self._told = False

    def start(self) -> None:
        """Send the review now; `allowed` then waits for this one instead of asking again."""
        if self._asked is None:
            self._asked = asyncio.ensure_future(self._review())

    async def _review(self) -> bool | ReadError:
        return await self.reader.access_review("get", "pods", "", namespace=self.namespace, subresource="log")

    async def settle(self) -> None:
        """Wait for a review `start` sent, so it never outlives the client it went on."""
        if self._asked is not None:
            await asyncio.gather(self._asked, return_exceptions=True)

    async def allowed(self, result: LogsResult, what: str) -> bool:
        """True when allowed; otherwise the reason is added to ``result`` (once) for ``what``."""
        if self._answer is None:
            self.start()
            assert self._asked is not None
            self._answer = await self._asked
        if not self._told and self._answer is not True:
            self._told = True
            if isinstance(self._answer, ReadError):
                result.unavailable.append(f"{what}: access review {self._answer.describe()}")
            else:
                result.unavailable.append("permission denied (get pods/log)")
        return self._answer is True

    async def answer(self) -> bool | ReadError:
        """The review's answer, asking it now if nobody has (another reader of the same
        permission — the driver's stack — reuses it instead of asking again)."""
        if self._answer is None:
            self.start()
            assert self._asked is not None
            self._answer = await self._asked
        return self._answer

    @property
    def denied(self) -> bool:
        """The review (or the API server itself) said no: a `pods/log` read as this caller would be
        refused too, so none is sent. A review that failed to answer denies nothing."""
        return self._answer is False

    def refused(self) -> None:
        """The API server refused this caller `get pods/log` itself: no review needs asking."""
        if self._answer is None:
            self._answer = False

    def granted(self) -> None:
        """This caller just read the run's driver output from its submitter pod's `pods/log`:
        reading the same output from the dashboard needs no review of its own."""
        if self._answer is None:
            self._answer = True


# Kubernetes' generateName suffix: five of apimachinery's `util/rand` alphabet.
_GENERATED = "[bcdfghjklmnpqrstvwxz2456789]{5}"
_MAX_GENERATED_BASE = 58  # names.SimpleNameGenerator cuts a longer base to 58 characters


def _literal(name: str) -> str:
    """A Kubernetes name (`[a-z0-9.-]`, validated by the API server) as an RE2 literal."""
    return re.sub(r"[^a-z0-9-]", lambda m: "\\" + m.group(0), name)


def _generated(base: str) -> str:
    return _literal(base[:_MAX_GENERATED_BASE]) + _GENERATED


def run_pods(run_obj: dict, kind: str | None, pods: list[dict]) -> tuple[list[str], str]:
    """The run's own pods for ADX: the names of the pods read, and an anchored pattern of the
    names its controllers give — a Job's `<job>-<5>` (`<job>-<index>-<5>` when Indexed), a
    RayJob's submitter Job `<rayjob>-<5>` and its cluster's head `<cluster>-head[-<5>]`
    (shared/reference/kuberay-status.md). Another run's pods (`llama-ft-7b-x7k2p` for a run
    `llama`) match neither."""
    name = str((run_obj.get("metadata") or {}).get("name") or "")
    names = sorted({pod_name(p) for p in pods if pod_name(p)})
    if kind == "RayJob":
        shapes = [_generated(f"{name}-")]
        cluster = (run_obj.get("status") or {}).get("rayClusterName")
        if cluster:
            shapes.append(f"{_literal(cluster)}-head(?:-{_GENERATED})?")
    else:
        indexed = (run_obj.get("spec") or {}).get("completionMode") == "Indexed"
        shapes = [f"{_literal(name)}-[0-9]+-{_GENERATED}" if indexed else _generated(f"{name}-")]
    return names, "^(?:" + "|".join(shapes) + ")$"


async def _from_dashboard(reader: KubeReader, result: LogsResult, rayjob: dict, tail: int,
                          access: LogAccess, head_ip: str | None = None) -> bool:
    """The driver log from the dashboard. With the head pod's IP (a live status read the pods), one
    read: Ray's log API finds the driver's node from `submission_id` itself and needs a node only
    to accept the query (`GetLogOptions`), so the head's IP stands in and the job's details are
    read only when that answer fails (Ray 2.60: `LogsManager.resolve_filename`)."""
    status = rayjob.get("status") or {}
    cluster, job_id = status.get("rayClusterName"), status.get("jobId")
    if not cluster or not job_id:
        deploy = status.get("jobDeploymentStatus") or ""
        finished = deploy in ("Complete", "Failed", "ValidationFailed")
        result.unavailable.append("head service gone (the job finished)" if finished
                                  else f"no Ray job submitted yet ({deploy or 'no status'})")
        return False
    if not await access.allowed(result, "ray dashboard"):
        return False
    ns, service = result.namespace or "", f"{cluster}-head-svc"
    if head_ip:
        path = proxy_path("services", ns, service, "dashboard", "api/v0/logs/file")
        got = await reader.text(path, {"node_ip": head_ip, "submission_id": job_id, "lines": tail + 1},
                                max_bytes=DASHBOARD_MAX_BYTES)
        if isinstance(got, str):
            return _dashboard_lines(result, got, tail, cluster)
        if got.kind == "forbidden" or (got.kind == "not_found" and not _RAY_NO_JOB.match(got.message)):
            result.unavailable.append(_dashboard_why(got, job_id))
            return False
        # Ray could not serve it this way (a driver with no node yet answers 500): the details say why
    details = await reader.text(proxy_path("services", ns, service, "dashboard", f"api/jobs/{job_id}"),
                                max_bytes=DETAILS_MAX_BYTES)
    if isinstance(details, ReadError):
        result.unavailable.append(_dashboard_why(details, job_id))
        return False
    try:
        node = json.loads(details).get("driver_node_id")
    except (ValueError, AttributeError):
        node = None
    # Ray's log API serves a bounded tail (`lines=N`) of the driver's log file, also where the
    # Jobs API's whole-log read fails (a byte that is not UTF-8 makes that one answer 500).
    if node:
        path = proxy_path("services", ns, service, "dashboard", "api/v0/logs/file")
        got = await reader.text(path, {"node_id": node, "submission_id": job_id, "lines": tail + 1},
                                max_bytes=DASHBOARD_MAX_BYTES)
        text = got if isinstance(got, str) else None
    else:  # a driver that has not started has no node yet: the Jobs API holds what there is
        got = await reader.text(proxy_path("services", ns, service, "dashboard", f"api/jobs/{job_id}/logs"),
                                max_bytes=DASHBOARD_MAX_BYTES)
        try:
            text = str(json.loads(got)["logs"]) if isinstance(got, str) else None
        except (ValueError, KeyError, TypeError):
            result.unavailable.append("ray dashboard: malformed answer (no `logs`)")
            return False
    if isinstance(got, ReadError) or text is None:
        result.unavailable.append(_dashboard_why(got, job_id) if isinstance(got, ReadError)
                                  else "ray dashboard: no log")
        return False
    return _dashboard_lines(result, text, tail, cluster, clipped=len(got.encode()) >= DASHBOARD_MAX_BYTES)


def _dashboard_lines(result: LogsResult, text: str, tail: int, cluster: str, *, clipped: bool | None = None
                     ) -> bool:
    """The driver log's last ``tail`` lines into ``result``."""
    if clipped is None:
        clipped = len(text.encode()) >= DASHBOARD_MAX_BYTES
    if clipped:  # the last line read may be cut: drop it
        text = text.rsplit("\n", 1)[0]
    lines, truncated = last_lines(text, tail, timestamps=False)
    for line in lines:  # Ray colours worker prefixes; escape codes never reach a card (SPEC §11)
        line.text = strip_ansi(line.text)
    result.source, result.pod, result.container = "ray-dashboard", f"{cluster}-head", "driver"
    result.lines, result.truncated = lines, truncated or clipped
    return True


_RAY_NO_JOB = re.compile(r"^Job \S+ does not exist")


def _dashboard_why(error: ReadError, job_id: str) -> str:
    """Ray's own 404 ("Job X does not exist", text) is not the API server's (a JSON Status: the
    head service or its endpoints are gone); a 5xx keeps the server's own reason."""
    if error.kind == "forbidden":
        return "permission denied (get services/proxy)"
    if error.kind == "not_found":
        if _RAY_NO_JOB.match(error.message):
            return f"Ray job {job_id} does not exist on the head (a re-created cluster?)"
        return "head service gone"
    reason = " ".join(error.message.split())[:200]
    own = f": {reason}" if reason and reason not in error.detail else ""
    return f"ray dashboard: {error.describe()}{own}"


async def _from_pods(reader: KubeReader, result: LogsResult, run: str, tail: int, previous: bool,
                     pods: list[dict] | None = None, seen: list[dict] | None = None) -> bool:
    """``pods``: already read by the caller (a live status), else listed here; the pods are
    added to ``seen`` (ADX reads their logs by name)."""
    ns = result.namespace or ""
    if pods is None:
        listed = await reader.list(resource_path("", "v1", "pods", ns),
                                   label_selector=f"batch.kubernetes.io/job-name={run}", limit=500)
        if isinstance(listed, ReadError):
            result.unavailable.append(_why(listed, "pods"))
            return False
        pods = listed
    if seen is not None:
        seen.extend(pods)
    if not pods:
        result.unavailable.append("no pods (garbage-collected, or not created yet)")
        return False
    for pod in order_pods(pods)[:POD_LOG_READS]:
        name, container = pod_name(pod), _main_container(pod)
        query: dict[str, str | int | bool] = {"tailLines": tail + 1, "timestamps": True}
        if container:
            query["container"] = container
        if previous:
            query["previous"] = True
        got = await reader.text(resource_path("", "v1", "pods", ns, name, "log"), query)
        if isinstance(got, ReadError):
            detail = got.message or got.describe()
            result.unavailable.append(_why(got, f"pod {name}") if got.kind != "unavailable" or not got.message
                                      else f"pod {name}: {detail}")
            continue
        lines, truncated = last_lines(got, tail, timestamps=True)
        result.source, result.pod, result.container = "pod", name, container
        result.lines, result.truncated = lines, truncated
        return True
    return False


HEAD_SELECTOR = "ray.io/cluster={cluster},ray.io/node-type=head"  # KubeRay's labels on the head pod
# Pods the head's LIST may return: KubeRay's one head (two while it replaces one); more carry the labels
# without being its (see `_owned_head`), and are not read.
HEAD_LIST_LIMIT = 50


def _owned_head(pod: dict, cluster: str) -> bool:
    """KubeRay's own head pod of ``cluster``: its controller ownerReference is the RayCluster
    (ray-operator sets it on every pod it creates). The labels alone are anyone's who may create a
    pod in the namespace: a pod labelled as the head, failed most recently, would otherwise be
    read — and shown as the head's log — before the head itself."""
    return any(ref.get("controller") is True and ref.get("kind") == "RayCluster"
               and ref.get("name") == cluster and str(ref.get("apiVersion") or "").startswith("ray.io/")
               for ref in meta(pod).get("ownerReferences") or [])


async def _from_head(reader: KubeReader, result: LogsResult, rayjob: dict, tail: int, previous: bool,
                     access: LogAccess, seen: list[dict]) -> bool:
    """The Ray head pod's own container log, as `kubectl logs <head> -c ray-head [--previous]` reads
    it, when the driver log cannot be read: a head that crash-loops has no dashboard, and its
    container's log (the crashed instance's, with ``previous``) is what says why. It is not the
    driver's output (SPEC §7a), so it comes only after the dashboard failed, and the answer names
    the pod and container. Only the RayCluster's own head pod (`_owned_head`). Read as the caller
    (`pods/log`, the API server's own check); not sent when the caller's `pods/log` review already
    said no."""
    cluster = (rayjob.get("status") or {}).get("rayClusterName")
    if not cluster or access.denied:
        return False
    listed = await reader.list(resource_path("", "v1", "pods", result.namespace or ""),
                               label_selector=HEAD_SELECTOR.format(cluster=cluster), limit=HEAD_LIST_LIMIT)
    if isinstance(listed, ReadError):
        result.unavailable.append(f"head {_why(listed, 'pod')}" if listed.kind != "forbidden"
                                  else _why(listed, "pods"))
        return False
    heads = [pod for pod in listed if _owned_head(pod, str(cluster))]
    if not heads:
        others = len(listed)
        labelled = f"{others} pod{'s' if others != 1 else ''} labelled as its head"
        result.unavailable.append(f"no head pod of {cluster} (deleted with its RayCluster?)" if not others
                                  else f"no head pod of {cluster}: {labelled} not owned by RayCluster "
                                  f"{cluster} (not read)")
        return False
    return await _from_pods(reader, result, str(cluster), tail, previous, pods=heads, seen=seen)


async def _from_kusto(result: LogsResult, kusto: KustoLogs | None, run_obj: dict | None, pods: list[dict],
                      access: LogAccess, tail: int, now: datetime, timeout: float) -> bool:
    """ADX, for a run that was read (a run that does not exist, or could not be read, has no
    pods taubot could name: no log store is asked)."""
    if run_obj is None:
        return False
    if kusto is None:
        result.unavailable.append("no kusto configured for this workspace")
        return False
    if not await access.allowed(result, "kusto"):
        return False
    created = parse_time((run_obj.get("metadata") or {}).get("creationTimestamp"))
    since = (created - KUSTO_MARGIN) if created else now - KUSTO_WINDOW_WITHOUT_RUN
    names, pattern = run_pods(run_obj, result.kind, pods)
    try:
        lines, truncated, pod, container = await query_logs(
            kusto, namespace=result.namespace or "", pods=names, pod_pattern=pattern, since=since,
            until=now + KUSTO_MARGIN, tail=tail, timeout=timeout)
    except KustoRefused as exc:
        result.unavailable.append(f"kusto: {exc}")
        return False
    except Exception as exc:  # noqa: BLE001 - azure-kusto-data raises many types; one line for the user
        why = " ".join(str(exc).split())[:200]
        result.unavailable.append(f"kusto: unavailable ({type(exc).__name__}: {why})")
        return False
    result.source, result.pod, result.container = "kusto", pod, container
    result.lines, result.truncated = lines, truncated
    return True


async def read_run_logs(reader: KubeReader, *, namespace: str, run: str, tail: int, previous: bool,
                        kusto: KustoLogs | None, now: datetime, timeout: float = 10.0) -> LogsResult:
    """The run's log from the first source that answers (SPEC §7a)."""
    start = reader.requests_made
    result = LogsResult(run=run, namespace=namespace)
    access, seen = LogAccess(reader, namespace), list[dict]()
    rayjob, job = await asyncio.gather(
        reader.get(resource_path("ray.io", "v1", "rayjobs", namespace, run)),
        reader.get(resource_path("batch", "v1", "jobs", namespace, run)),
    )
    run_obj: dict | None = None
    if isinstance(rayjob, dict):
        result.kind, run_obj = "RayJob", rayjob
        done = (await _from_dashboard(reader, result, rayjob, tail, access)
                or await _from_head(reader, result, rayjob, tail, previous, access, seen))
    elif isinstance(rayjob, ReadError) and rayjob.kind != "not_found":
        result.unavailable.append(_why(rayjob, "rayjobs"))  # never read as "there is no RayJob"
        done = False
    elif isinstance(job, dict):
        result.kind, run_obj = "Job", job
        done = await _from_pods(reader, result, run, tail, previous, seen=seen)
    else:
        result.unavailable.append(_why(job, "jobs") if job.kind != "not_found"
                                  else f"run {run} not found in {namespace} (deleted after it finished?)")
        done = False
    if not done:
        await _from_kusto(result, kusto, run_obj, seen, access, tail, now, timeout)
    result.requests = reader.requests_made - start
    return result


PROGRESS_TAIL = 2000  # lines a live status reads to judge progress: one bounded read
# KubeRay's default submitter container (ray-operator controllers/ray/common/job.go); a
# submitterPodTemplate may name its own, then the pod's main container is read.
SUBMITTER_CONTAINER = "ray-job-submitter"


def submitter_pod(objs: RunObjects) -> tuple[dict, str] | None:
    """The RayJob's newest K8sJobMode submitter pod whose container has started, and that container.

    The submitter runs `ray job submit --no-wait …; ray job logs --follow` (reference
    training-logs.md §2.1): its log mirrors the driver's, and the kubelet stamps each line as it
    arrives — the per-line time Ray's own APIs do not give."""
    job = objs.submitter_job
    if job is None:
        return None
    name, uid = meta(job).get("name"), meta(job).get("uid")
    found: list[tuple[float, dict, str]] = []
    for pod in objs.pods:
        lb = labels(pod)
        owned = any(ref.get("kind") == "Job" and ref.get("uid") == uid
                    for ref in meta(pod).get("ownerReferences") or [])
        if objs.is_ray_pod(pod) or not (owned or name in (lb.get("batch.kubernetes.io/job-name"),
                                                          lb.get("job-name"))):
            continue
        views = containers(pod, init=False)
        wanted = (SUBMITTER_CONTAINER if any(c.name == SUBMITTER_CONTAINER for c in views)
                  else _main_container(pod))
        view = next((c for c in views if c.name == wanted), None)
        if view is not None and (view.running or view.terminated or view.last_terminated):
            created = parse_time(meta(pod).get("creationTimestamp"))
            found.append((created.timestamp() if created else 0.0, pod, view.name))
    if not found:
        return None
    _, pod, container = max(found, key=lambda f: f[0])
    return pod, container


async def _from_submitter(reader: KubeReader, result: LogsResult, objs: RunObjects, tail: int,
                          access: LogAccess) -> bool:
    """The submitter pod's log with the kubelet's timestamps (`pods/log`, read as the user: the
    API server's own check of `get pods/log`, the permission the dashboard read is reviewed for —
    its answer, either way, stands for that review)."""
    found = submitter_pod(objs)
    if found is None:
        return False
    pod, container = found
    name, ns = pod_name(pod), result.namespace or ""
    got = await reader.text(resource_path("", "v1", "pods", ns, name, "log"),
                            {"container": container, "tailLines": tail + 1, "timestamps": True},
                            max_bytes=DASHBOARD_MAX_BYTES)
    if isinstance(got, ReadError):
        if got.kind == "forbidden":
            access.refused()
        result.unavailable.append(f"submitter {_why(got, f'pod {name}')}")
        return False
    if len(got.encode()) >= DASHBOARD_MAX_BYTES:  # the last line read may be cut: drop it
        got = got.rsplit("\n", 1)[0]
    lines, truncated = last_lines(got, tail, timestamps=True)
    if not any(line.time for line in lines):  # nothing mirrored yet: the dashboard holds what there is
        return False
    for line in lines:  # `ray job logs` prints Ray's colour codes as they are
        line.text = strip_ansi(line.text)
    access.granted()
    result.source, result.pod, result.container = "pod", name, container
    result.lines, result.truncated = lines, truncated
    return True


def _last_text(lines: list[LogLine]) -> str | None:
    return next((line.text.strip() for line in reversed(lines) if line.text.strip()), None)


def _newest(lines: list[LogLine]) -> datetime | None:
    """The newest line's time (a mirror older than the stall threshold may have stopped, not the
    driver)."""
    return next((t for line in reversed(lines) if line.time and (t := parse_time(line.time))), None)


def head_pod_ip(objs: RunObjects) -> str | None:
    """The Ray head pod's IP (KubeRay's `ray.io/node-type: head`), when the status read it."""
    for pod in objs.pods:
        if ((pod.get("metadata") or {}).get("labels") or {}).get("ray.io/node-type") == "head":
            ip = (pod.get("status") or {}).get("podIP")
            if isinstance(ip, str) and ip:
                return ip
    return None


async def log_evidence(reader: KubeReader, objs: RunObjects, *, kusto: KustoLogs | None, now: datetime,
                       timeout: float = 10.0, tail: int = PROGRESS_TAIL, access: LogAccess | None = None,
                       stall_seconds: int = DEFAULT_STALL_SECONDS, ranks: bool = False,
                       ahead: ReadAhead | None = None) -> LogEvidence:
    """The run's log (`_log_evidence`) and, with ``ranks``, every rank's tail of a distributed run
    (`ranks.read_rank_logs`, SPEC §5c) — only when the run's log calls for a culprit (a hang or
    crash signature, a failed run, no progress past the stall threshold): a healthy run's status
    costs what it did. The ranks are read after the log (one round more) unless ``ahead`` sends
    them with it (a status: `ReadAhead.ranks_with_log`); the pod whose log is the run's own is
    not read twice (`ranks.tail_of`). Without ``ahead`` (the monitor) nothing goes early."""
    main_pods = [p for p in objs.pods if not objs.is_ray_pod(p)] if objs.kind == "Job" else []
    expected = pod_name(order_pods(main_pods)[0]) if main_pods else None
    access = access or LogAccess(reader, objs.namespace or "")
    read = asyncio.ensure_future(_log_evidence(reader, objs, kusto=kusto, now=now, timeout=timeout, tail=tail,
                                               access=access, stall_seconds=stall_seconds, ahead=ahead))

    async def own_tail() -> PodLog | None:
        main, result = await read
        if result.pod is None or result.pod != expected or main.unavailable is not None:
            return None
        return tail_of(result.pod, main.lines, result.truncated)

    async def ranks_if_allowed() -> tuple[list[PodLog], str | None]:
        # Sent before the run's log proves the user may read logs: only after the user's own
        # `pods/log` review (sent with round 2, `ReadAhead.review_with_round_2`) allowed them.
        if await access.answer() is not True:
            return [], None
        return await read_rank_logs(reader, objs, have=expected, known=own_tail)

    early = None
    if ranks and ahead is not None and ahead.ranks_with_log(objs):
        early = asyncio.ensure_future(ranks_if_allowed())
    main, _result = await read
    wanted = ranks and needs_ranks(objs, main, now, stall_seconds)
    if ahead is not None and objs.kind == "Job":
        ahead.waiting = wanted
    if early is not None:
        per_pod, sampled = await early  # sent with the log: used only when the log calls for them
    elif wanted:
        per_pod, sampled = await read_rank_logs(reader, objs, have=expected, known=own_tail)
    else:
        per_pod, sampled = [], None
    if not wanted or not per_pod:
        return main
    return main.model_copy(update={"ranks": per_pod, "ranks_sampled": sampled})


def driver_waits(objs: RunObjects, logs: LogEvidence, now: datetime, stall_seconds: int) -> bool:
    """A driver that is alive and not progressing: the RayJob has not ended and its log's check is a
    hang or a stall. A crashed or finished driver has no stack to show (its process is gone), so
    none is asked for — a failed RayJob's card says what failed, not that a stack was unavailable."""
    ctx = RunContext(objs=objs, now=now)
    if ctx.terminal() is not None:
        return False
    check, _progress = runtime_progress(ctx, logs, stall_seconds)
    return check is not None and check.state is PhaseState.WARNING and check.reason in WAITING_REASONS


async def with_driver_stack(reader: KubeReader, objs: RunObjects, logs: LogEvidence, *, now: datetime,
                            stall_seconds: int = DEFAULT_STALL_SECONDS,
                            access: LogAccess | None = None, ahead: ReadAhead | None = None) -> LogEvidence:
    """A stalled RayJob's log with its driver's stack (`stack.driver_stack`, SPEC §5c): shown only
    when the engine's check of this log is a hang or stall — after the first-sighting record
    (`seen.remember`) is applied, since the dashboard's lines carry no time of their own. What
    ``ahead`` sent with the log is used when it still holds: the dump of the process the last read
    found, when this read's details name the same one; else the dump follows those details."""
    waits = (objs.kind == "RayJob" and logs.unavailable is None
             and driver_waits(objs, logs, now, stall_seconds))
    early = await ahead.early_stack() if ahead is not None else None
    if ahead is not None and objs.kind == "RayJob":
        ahead.waiting = waits
        found = early.process if early is not None else None
        ahead.driver = found if isinstance(found, DriverProcess) else None
    if not waits:
        return logs
    allowed = await access.answer() if access else await _review(reader, objs)
    if early is None:
        frames, why, process = await driver_stack(reader, objs, logs_allowed=allowed)
    elif isinstance(early.process, str):
        frames, why, process = [], early.process, None
    elif early.dumped is not None and early.dumped_for == early.process:
        (frames, why), process = early.dumped, early.process
    else:  # the details came with the log; the dump of the process they name follows
        process = early.process
        why = refused(await ahead.proxy_answer(objs) if ahead else False, allowed)
        frames, why = await dump(reader, objs, process) if why is None else ([], why)
    if ahead is not None:
        ahead.driver = process
    return logs.model_copy(update={"driver_stack": frames, "driver_stack_unavailable": why})


async def _review(reader: KubeReader, objs: RunObjects) -> bool | ReadError:
    return await reader.access_review("get", "pods", "", namespace=objs.namespace or "", subresource="log")


async def _log_evidence(reader: KubeReader, objs: RunObjects, *, kusto: KustoLogs | None, now: datetime,
                        timeout: float = 10.0, tail: int = PROGRESS_TAIL, access: LogAccess | None = None,
                        stall_seconds: int = DEFAULT_STALL_SECONDS, ahead: ReadAhead | None = None
                        ) -> tuple[LogEvidence, LogsResult]:
    """The run's log for the Runtime progress check of a live status, from what the status
    already read (the run, its pods): one dashboard or pod-log read, else ADX. ``access``: the
    status's `get pods/log` review, already under way.

    A RayJob's timed source is its submitter pod's log (SPEC §11); the dashboard is read when
    there is none, or when that log has been quiet for ``stall_seconds`` and the dashboard's
    driver log has moved past it (`ray job logs -f` sporadically stops following,
    ray-project/ray#51601): a stopped mirror is never taken for a hung driver. ``ahead`` sends
    the dashboard's read with the submitter's when the mirror may be quiet or empty
    (`ReadAhead.dashboard_with_mirror`), and learns the mirror's newest line."""
    result = LogsResult(run=objs.name, namespace=objs.namespace, kind=objs.kind)
    access, main_pods = access or LogAccess(reader, objs.namespace or ""), list[dict]()
    done = False
    if objs.kind == "RayJob" and objs.run is not None:
        result, done = await _driver_output(reader, objs, result, tail, access, now, stall_seconds, ahead)
    elif objs.kind == "Job":
        main_pods = [p for p in objs.pods if not objs.is_ray_pod(p)]
        done = await _from_pods(reader, result, objs.name, tail, False, pods=main_pods)
    if not done:
        done = await _from_kusto(result, kusto, objs.run, main_pods, access, tail, now, timeout)
    if not done:
        return LogEvidence(unavailable="; ".join(result.unavailable) or "no log source answered"), result
    # Secrets are redacted here, before the engine sees a line: a crash line it quotes as evidence
    # reaches cards, Details and handoffs. Controls go first (a colour code inside a token would
    # hide it from every rule); the `\r` redraws stay, since the parser splits on them.
    source = (f"submitter pod {result.pod}" if result.source == "pod" and objs.kind == "RayJob"
              else result.source)
    return LogEvidence(lines=[(line.time, _clean_kept_redraws(line.text)) for line in result.lines],
                       source=source), result


async def _driver_output(reader: KubeReader, objs: RunObjects, result: LogsResult, tail: int,
                         access: LogAccess, now: datetime, stall_seconds: int, ahead: ReadAhead | None
                         ) -> tuple[LogsResult, bool]:
    """A RayJob's driver output: the submitter's mirror, else (or past a quiet mirror) the dashboard."""
    rayjob = objs.run or {}
    head_ip, submitter = head_pod_ip(objs), submitter_pod(objs)
    driver = LogsResult(run=objs.name, namespace=objs.namespace, kind=objs.kind)

    def read_dashboard() -> asyncio.Future[bool]:
        return asyncio.ensure_future(_from_dashboard(reader, driver, rayjob, tail, access, head_ip=head_ip))

    dashboard = read_dashboard() if ahead is not None and ahead.dashboard_with_mirror(submitter) else None
    done = await _from_submitter(reader, result, objs, tail, access)
    newest = _newest(result.lines) if done else None
    if ahead is not None and done and result.pod and newest is not None:
        ahead.mirror = (result.pod, newest)
    quiet = newest is not None and (now - newest).total_seconds() > stall_seconds
    if dashboard is None and (quiet or not done):  # not sent ahead: read it now
        dashboard = read_dashboard()
    answered = await dashboard if dashboard is not None else False
    if done:  # a quiet mirror gives way only to a driver log that moved past it
        moved = quiet and answered and _last_text(driver.lines) != _last_text(result.lines)
        return (driver, True) if moved else (result, True)
    driver.unavailable[:0] = result.unavailable  # the submitter's reasons first, as tried
    return driver, answered


def _clean_kept_redraws(text: str) -> str:
    """One log line stripped and redacted segment by segment, its `\r` redraws kept."""
    return "\r".join(redact(strip_controls(segment)) for segment in text.split("\r"))


async def logs_live(registry: Registry, *, run: str, identity: Identity, now: datetime,
                    workspace: str | None = None, channel: str | None = None, tail: int = DEFAULT_TAIL,
                    previous: bool = False, timeout: float = 10.0,
                    kube: KubeClients | None = None) -> LogsResult:
    """Resolve the workspace (layer 1), then read the log under ``identity``."""
    resolution = registry.resolve(workspace=workspace, channel=channel)
    if isinstance(resolution, ResolutionFailure):
        return LogsResult(run=run, unavailable=[f"workspace: {resolution.message}"])
    ws = resolution.descriptor
    kusto = ws.spec.logs.kusto if ws.spec.logs else None
    api = await (kube or KubeClients()).user(ws.cluster_target(), identity)
    async with api:
        return await read_run_logs(KubeReader(api, timeout), namespace=ws.spec.namespace, run=run,
                                   tail=tail, previous=previous, kusto=kusto, now=now, timeout=timeout)


__all__ = ["PROGRESS_TAIL", "SUBMITTER_CONTAINER", "LogAccess", "head_pod_ip", "log_evidence", "logs_live",
           "order_pods", "read_run_logs", "run_pods", "submitter_pod"]
