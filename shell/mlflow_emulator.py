"""A local MLflow tracking server speaking the REST API 2.0 JSON shapes taubot reads.

Serves the demo's experiment records (`taubot shell --demo`) and the tests'
(`tests/fakes/mlflow_api.py` re-exports it), as the Kubernetes API emulator does.

Shapes from MLflow's REST API documentation (mlflow.org/docs/latest/rest-api.html):
`POST experiments/search` → `{"experiments": [{"experiment_id", "name", …}]}`;
`POST runs/search` with `experiment_ids`, `filter` (`tags.\\`k\\` = 'v'`),
`max_results`, `order_by` → `{"runs": [{"info": {"run_id", …}, "data": {…}}]}`;
`GET runs/get?run_id=` → `{"run": {"info": …, "data": {"metrics": [{"key",
"value", "timestamp" (ms), "step"}], "tags": [{"key", "value"}]}}}`. Errors are
`{"error_code": "…", "message": "…"}` with a 4xx status. Every request is
recorded with its headers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

from shell.threaded_http import serving_in_thread

_TAG_FILTER = re.compile(r"^tags\.`(?P<key>[^`]+)` = '(?P<value>[^']*)'$")


class MlflowEmulator:
    def __init__(self) -> None:
        self.experiments = [{"experiment_id": "17", "name": "vision/pretrain", "lifecycle_stage": "active"}]
        self.runs: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.base_url = ""

    def add_run(self, run_id: str, tags: dict[str, str], metrics: list[dict[str, Any]]) -> None:
        self.runs.append({"info": {"run_id": run_id, "experiment_id": "17", "status": "RUNNING"},
                          "data": {"metrics": metrics,
                                   "tags": [{"key": k, "value": v} for k, v in tags.items()]}})

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        self.requests.append((request.method, method, dict(request.headers)))
        if method == "experiments/search":
            return web.json_response({"experiments": self.experiments})
        if method == "runs/search":
            body = await request.json()
            if not body.get("experiment_ids"):
                return web.json_response({"error_code": "INVALID_PARAMETER_VALUE",
                                          "message": "experiment_ids must be specified"}, status=400)
            match = _TAG_FILTER.match(body.get("filter") or "")
            found = [r for r in self.runs if match is None or {"key": match["key"], "value": match["value"]}
                     in r["data"]["tags"]]
            return web.json_response({"runs": found[: int(body.get("max_results") or 1000)]})
        if method == "runs/get":
            run_id = request.query.get("run_id")
            run = next((r for r in self.runs if r["info"]["run_id"] == run_id), None)
            if run is None:
                return web.json_response({"error_code": "RESOURCE_DOES_NOT_EXIST",
                                          "message": f"Run '{run_id}' not found"}, status=404)
            return web.json_response({"run": run})
        return web.json_response({"error_code": "ENDPOINT_NOT_FOUND", "message": method}, status=404)


@contextmanager
def running_mlflow() -> Iterator[MlflowEmulator]:
    fake = MlflowEmulator()
    app = web.Application()
    app.router.add_route("*", "/api/2.0/mlflow/{method:.+}", fake._handle)
    with serving_in_thread(app, name="mlflow-emulator") as url:
        fake.base_url = url
        yield fake


__all__ = ["MlflowEmulator", "running_mlflow"]
