"""A run's durable experiment record from an MLflow tracking server (SPEC §10), over its REST API.

MLflow's REST API 2.0 through aiohttp (not the mlflow package: a client
library of hundreds of MB for three GETs and POSTs). The record is the MLflow
run tagged `taugrid.io/run=<run>`: experiments are listed
(`experiments/search`), the newest tagged run found (`runs/search`), and its
metrics' latest step and timestamp read from `runs/get`.

Read with the bot's own token, so only after the caller's access review
(`get` the run object as the user) allowed it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import aiohttp

from workers.diagnosis.models import ExperimentEvidence

RUN_TAG = "taugrid.io/run"


async def _call(session: aiohttp.ClientSession, method: str, url: str, body: dict | None,
                params: dict | None) -> dict[str, Any]:
    async with session.request(method, url, json=body, params=params) as response:
        text = await response.text()
        if response.status >= 400:
            try:
                message = json.loads(text).get("message") or text
            except ValueError:
                message = text
            raise RuntimeError(f"HTTP {response.status}: {' '.join(str(message).split())[:160]}")
        return json.loads(text) if text else {}


async def experiment_record(uri: str, run: str, *, token: str | None, timeout: float) -> ExperimentEvidence:
    """The run's record, or `unavailable` with why (never "no record" when the read failed)."""
    base = uri.rstrip("/") + "/api/2.0/mlflow/"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as s:
            experiments = await _call(s, "POST", base + "experiments/search", {"max_results": 1000}, None)
            ids = [e["experiment_id"] for e in experiments.get("experiments") or [] if "experiment_id" in e]
            if not ids:
                return ExperimentEvidence(found=False)
            found = await _call(s, "POST", base + "runs/search", {
                "experiment_ids": ids, "filter": f"tags.`{RUN_TAG}` = '{_quoted(run)}'", "max_results": 1,
                "order_by": ["attributes.start_time DESC"]}, None)
            runs = found.get("runs") or []
            if not runs:
                return ExperimentEvidence(found=False)
            run_id = runs[0]["info"]["run_id"]
            got = await _call(s, "GET", base + "runs/get", None, {"run_id": run_id})
    except (TimeoutError, aiohttp.ClientError, RuntimeError, KeyError, ValueError) as exc:
        return ExperimentEvidence(unavailable=f"experiment store: {type(exc).__name__}: {str(exc)[:160]}")
    metrics = ((got.get("run") or {}).get("data") or {}).get("metrics") or []
    latest = max(metrics, key=lambda m: int(m.get("timestamp") or 0), default=None)
    if latest is None:
        return ExperimentEvidence(found=True, run_id=run_id)
    return ExperimentEvidence(
        found=True, run_id=run_id, last_step=float(latest.get("step") or 0),
        last_metric_at=datetime.fromtimestamp(int(latest["timestamp"]) / 1000, tz=UTC))


def _quoted(value: str) -> str:
    """Run names are DNS-1123 labels; refuse anything that could leave the filter's quotes."""
    if "'" in value or "\\" in value:
        raise ValueError("run name cannot be quoted in an MLflow filter")
    return value


__all__ = ["RUN_TAG", "experiment_record"]
