"""A run's durable experiment record from an MLflow tracking server (SPEC §10, §11), over its REST API.

MLflow's REST API 2.0 through aiohttp (not the mlflow package: a client
library of hundreds of MB for three GETs and POSTs). The record is the MLflow
run tagged `taugrid.io/run=<run>`: the experiment is looked up by name when the
descriptor names one (`experiments/get-by-name`), else experiments are listed
page by page (`experiments/search`, `next_page_token`, bounded — MLflow returns
the most recently updated first, so a long-lived team experiment is on a later
page of a busy server); the newest live tagged run is found (`runs/search`,
deleted runs excluded by MLflow's default view), and its metrics' step and time
read from `runs/get`.

The step is the highest step among the training metrics and the time the newest
of theirs: MLflow's `system/…` metrics (CPU, GPU, memory heartbeat, step 0 with
fresh timestamps) are not progress and would keep a hung run looking fresh.

Read with the bot's own credentials — a bearer token, or HTTP Basic as MLflow's
own auth app expects — so only after the caller's access review (`get` the run
object as the user) allowed it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import aiohttp

from workers.diagnosis.models import ExperimentEvidence
from workers.outside.text import outside

if TYPE_CHECKING:
    from workers.config.settings import Settings

RUN_TAG = "taugrid.io/run"
SYSTEM_METRICS = "system/"
PAGE_SIZE = 1000
MAX_EXPERIMENT_PAGES = 10  # 10,000 experiments; past that the descriptor must name the experiment


@dataclass(frozen=True)
class MlflowAuth:
    """The bot's credentials for the tracking server: a bearer token, or a username and password."""

    token: str | None = None
    username: str | None = None
    password: str | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> MlflowAuth:
        """TAUBOT_MLFLOW_TOKEN, else TAUBOT_MLFLOW_USERNAME and TAUBOT_MLFLOW_PASSWORD (each also as
        `_FILE`, like every setting)."""
        token, password = settings.mlflow_token, settings.mlflow_password
        return cls(token=token.get_secret_value() if token else None, username=settings.mlflow_username,
                   password=password.get_secret_value() if password else None)

    def headers(self) -> dict[str, str]:
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.username is not None:
            return {"Authorization": aiohttp.encode_basic_auth(self.username, self.password or "")}
        return {}


class MlflowError(RuntimeError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.code = status, code


async def _call(session: aiohttp.ClientSession, method: str, url: str, body: dict | None,
                params: dict | None) -> dict[str, Any]:
    async with session.request(method, url, json=body, params=params) as response:
        text = await response.text()
        if response.status >= 400:
            code = ""
            try:
                parsed = json.loads(text)
                message, code = parsed.get("message") or text, parsed.get("error_code") or ""
            except ValueError:
                message = text  # the auth app's 401 is an HTML sentence
            # An error body is never quoted raw (SPEC §11): one line, stripped and redacted (the
            # auth app's 401 page can echo the request's Authorization header).
            raise MlflowError(response.status, code, outside(" ".join(str(message).split()), 160))
        return json.loads(text) if text else {}


async def _experiment_pages(session: aiohttp.ClientSession, base: str):  # noqa: ANN202 - async generator
    """Experiment ids, one page at a time, at most MAX_EXPERIMENT_PAGES pages."""
    token: str | None = None
    for _ in range(MAX_EXPERIMENT_PAGES):
        body: dict[str, Any] = {"max_results": PAGE_SIZE}
        if token:
            body["page_token"] = token
        page = await _call(session, "POST", base + "experiments/search", body, None)
        yield [e["experiment_id"] for e in page.get("experiments") or [] if "experiment_id" in e]
        token = page.get("next_page_token")
        if not token:
            return
    raise MlflowError(0, "TOO_MANY_EXPERIMENTS",
                      f"more than {MAX_EXPERIMENT_PAGES * PAGE_SIZE:,} experiments and none holds the run: "
                      "name the experiment (spec.experiments.mlflow.experiment)")


async def _newest_run(session: aiohttp.ClientSession, base: str, ids: list[str], run: str) -> dict | None:
    if not ids:
        return None
    found = await _call(session, "POST", base + "runs/search", {
        "experiment_ids": ids, "filter": f"tags.`{RUN_TAG}` = '{_quoted(run)}'", "max_results": 1,
        "order_by": ["attributes.start_time DESC"]}, None)
    runs = found.get("runs") or []
    return runs[0] if runs else None


async def experiment_record(uri: str, run: str, *, timeout: float, token: str | None = None,
                            auth: MlflowAuth | None = None, experiment: str | None = None
                            ) -> ExperimentEvidence:
    """The run's record, or `unavailable` with why (never "no record" when the read failed)."""
    auth = auth or MlflowAuth(token=token)
    base = uri.rstrip("/") + "/api/2.0/mlflow/"
    try:
        async with aiohttp.ClientSession(headers=auth.headers(),
                                         timeout=aiohttp.ClientTimeout(total=timeout)) as s:
            hit: dict | None = None
            if experiment:
                try:
                    named = await _call(s, "GET", base + "experiments/get-by-name", None,
                                        {"experiment_name": experiment})
                except MlflowError as exc:
                    if exc.code != "RESOURCE_DOES_NOT_EXIST":
                        raise
                    return ExperimentEvidence(unavailable="experiment store: no experiment named "
                                              f"{experiment!r} (spec.experiments.mlflow.experiment)")
                hit = await _newest_run(s, base, [named["experiment"]["experiment_id"]], run)
            else:
                async for ids in _experiment_pages(s, base):
                    hit = await _newest_run(s, base, ids, run)
                    if hit is not None:
                        break
            if hit is None:
                return ExperimentEvidence(found=False)
            run_id = hit["info"]["run_id"]
            got = await _call(s, "GET", base + "runs/get", None, {"run_id": run_id})
    except (TimeoutError, aiohttp.ClientError, MlflowError, KeyError, ValueError) as exc:
        return ExperimentEvidence(unavailable=f"experiment store: {type(exc).__name__}: {str(exc)[:160]}")
    metrics = ((got.get("run") or {}).get("data") or {}).get("metrics") or []
    return record_of(run_id, metrics)


def record_of(run_id: str, metrics: list[dict[str, Any]]) -> ExperimentEvidence:
    """Step: the highest among training metrics; time: the newest of theirs (not `system/…`)."""
    training = [m for m in metrics if not str(m.get("key") or "").startswith(SYSTEM_METRICS)]
    if not training:
        return ExperimentEvidence(found=True, run_id=run_id)
    step = max(int(m.get("step") or 0) for m in training)
    newest = max(int(m.get("timestamp") or 0) for m in training)
    return ExperimentEvidence(found=True, run_id=run_id, last_step=float(step),
                              last_metric_at=datetime.fromtimestamp(newest / 1000, tz=UTC))


def _quoted(value: str) -> str:
    """Run names are DNS-1123 labels; refuse anything that could leave the filter's quotes."""
    if "'" in value or "\\" in value:
        raise ValueError("run name cannot be quoted in an MLflow filter")
    return value


__all__ = ["RUN_TAG", "MlflowAuth", "experiment_record", "record_of"]
