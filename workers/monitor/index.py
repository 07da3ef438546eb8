"""One pass over a namespace's cached objects, grouping them by the run they belong to.

Why: `evaluate()` links a run's objects itself, but handing it the whole
namespace for each of 5,000 runs is quadratic. This index uses the same real
linkages (SPEC §2 — the job-name label, `ray.io/cluster`, Kueue's job-uid
label, ownerReferences, event `involvedObject`) to give each run a small
superset of its objects, and `evaluate()` then links exactly as it always
does. Shared objects (LocalQueues) go to every run.
"""

from __future__ import annotations

from collections import defaultdict

from workers.diagnosis.linkage import labels, meta


def group_by_run(objects: list[dict]) -> dict[str, list[dict]]:
    rayjobs = [o for o in objects if o.get("kind") == "RayJob"]
    ray_names = {meta(o).get("name") for o in rayjobs}
    jobs = [o for o in objects if o.get("kind") == "Job" and meta(o).get("name") not in ray_names]
    runs = {meta(o).get("name"): o for o in [*rayjobs, *jobs]}
    out: dict[str, list[dict]] = defaultdict(list)
    by_uid: dict[str, str] = {}
    by_cluster: dict[str, str] = {}
    for name, run in runs.items():
        out[name].append(run)
        if meta(run).get("uid"):
            by_uid[meta(run)["uid"]] = name
        cluster = (run.get("status") or {}).get("rayClusterName")
        if cluster:
            by_cluster[cluster] = name
    shared = [o for o in objects if o.get("kind") == "LocalQueue"]
    owner_of: dict[str, str] = {}  # object name → run, for events and claims
    pending: list[dict] = []
    for obj in objects:
        kind = obj.get("kind")
        is_run = kind == "Job" and runs.get(meta(obj).get("name") or "") is obj
        if kind in ("RayJob", "LocalQueue", "Event", "ResourceClaim") or is_run:
            if kind in ("Event", "ResourceClaim"):
                pending.append(obj)
            continue
        lb = labels(obj)
        named = [lb.get(k) for k in ("taugrid.io/run", "batch.kubernetes.io/job-name", "job-name")]
        run = by_cluster.get(lb.get("ray.io/cluster") or "") \
            or next((n for n in named if n in runs), None) \
            or by_uid.get(lb.get("kueue.x-k8s.io/job-uid") or "")
        if run is None and kind == "RayCluster":
            run = by_cluster.get(meta(obj).get("name") or "")
        if run is None and kind == "Job" and meta(obj).get("name") in ray_names:
            run = meta(obj).get("name")  # KubeRay's submitter Job shares the RayJob's name
        if run is None:
            for ref in meta(obj).get("ownerReferences") or []:
                run = by_uid.get(ref.get("uid") or "") or by_cluster.get(ref.get("name") or "")
                if run:
                    break
        if run is None:
            continue
        out[run].append(obj)
        owner_of[f"{kind}/{meta(obj).get('name')}"] = run
        if meta(obj).get("uid"):
            by_uid.setdefault(meta(obj)["uid"], run)
    for obj in pending:
        if obj.get("kind") == "Event":
            ref = obj.get("involvedObject") or obj.get("regarding") or {}
            run = owner_of.get(f"{ref.get('kind')}/{ref.get('name')}") or (
                ref.get("name") if ref.get("name") in runs else None)
        else:
            run = next((by_uid.get(r.get("uid") or "") for r in meta(obj).get("ownerReferences") or []
                        if by_uid.get(r.get("uid") or "")), None)
        if run is not None:
            out[run].append(obj)
    for name in runs:
        out[name].extend(shared)
    return dict(out)


__all__ = ["group_by_run"]
