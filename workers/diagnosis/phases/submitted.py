"""Submitted (layer 3): does the run exist, and did its controller accept the spec?"""

from __future__ import annotations

import difflib

from .. import registry
from ..models import Finding, PhaseResult, PhaseState
from ..timeutil import parse_time, stamp
from .common import RunContext, clip, result

NAME = registry.SUBMITTED.name
LAYER = registry.SUBMITTED.layer

# Controller events that mean the submitted spec cannot be run as written
# (Kueue jobframework events.go; KubeRay utils/constant.go).
INVALID_SPEC_EVENTS = ("ErrWorkloadCompose", "InvalidRayJobSpec", "InvalidRayClusterSpec")

NOT_FOUND = Finding(
    reason="run.not_found",
    owner="researcher",
    transient=False,
    next_action="Check the run name and namespace (`/tau runs` lists yours), or submit it again; "
    "validate the config first with `tau run validate --config tau/train.yaml`.",
)
INVALID = Finding(
    reason="run.invalid_spec",
    owner="researcher",
    transient=False,
    next_action="The controller rejected the run's spec: fix the run config "
    "(`tau run validate --config tau/train.yaml`) and resubmit.",
)
OK = Finding(reason="run.ok", owner="researcher", transient=False, next_action="Nothing to do at submission.")


def evaluate(ctx: RunContext, earlier: dict[str, PhaseResult]) -> PhaseResult:
    objs = ctx.objs
    if objs.run is None:
        where = f"namespace {objs.namespace}" if objs.namespace else "the snapshot"
        close = difflib.get_close_matches(objs.name, ctx.known_runs, n=3, cutoff=0.75)
        if not close:
            return result(NAME, LAYER, PhaseState.WARNING,
                          f"run {objs.name} not found: no RayJob or Job of that name in {where}", NOT_FOUND)
        names = " or ".join(close)
        action = f"Did you mean {names}? {NOT_FOUND.next_action}"
        finding = NOT_FOUND.model_copy(update={"next_action": action})
        return result(NAME, LAYER, PhaseState.WARNING,
                      f"run {objs.name} not found in {where}; did you mean {names}?", finding,
                      [f"runs with a close name: {', '.join(close)}"])
    if ctx.status.get("jobDeploymentStatus") == "ValidationFailed":
        msg = ctx.status.get("message") or ctx.status.get("reason") or "ValidationFailed"
        return result(NAME, LAYER, PhaseState.WARNING,
                      f"RayJob spec failed validation: {clip(msg, 160)}", INVALID,
                      [f"RayJob status.jobDeploymentStatus=ValidationFailed: {clip(msg)}"])
    bad = [e for e in objs.events_for(objs.kind or "", objs.name) if e.reason in INVALID_SPEC_EVENTS]
    if objs.raycluster_name:
        bad += [e for e in objs.events_for("RayCluster", objs.raycluster_name)
                if e.reason in INVALID_SPEC_EVENTS]
    if bad:
        ev = bad[-1]
        return result(NAME, LAYER, PhaseState.WARNING, f"{ev.reason}: {clip(ev.message, 160)}",
                      INVALID, [f"event {ev.reason} on {ev.kind}/{ev.name}: {clip(ev.message)}"])
    created = parse_time((objs.run.get("metadata") or {}).get("creationTimestamp"))
    age = f" at {stamp(created)}" if created else ""
    return result(NAME, LAYER, PhaseState.DONE,
                  f"{objs.kind} {objs.namespace}/{objs.name} created{age}", OK)
