"""A local Azure Data Explorer query endpoint: the v2 frames azure-kusto-data parses.

It serves `POST /v2/rest/query` as the reference describes
(shared/reference/azure-container-insights-logs.md: body `{db, csl,
properties}` with `properties` a JSON *string* of `{Options, Parameters}`;
an array of frames back — DataSetHeader, the PrimaryResult DataTable,
DataSetCompletion). It records every query with its parameters, and answers
the `ContainerLogV2` query taubot sends by applying the *parameters* (namespace,
window, the run's pod names and name pattern, cluster) to the rows a test seeded — so a query that spliced values into its text instead of
declaring them would find nothing.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from shell.threaded_http import serving_in_thread

_DATETIME = re.compile(r"^datetime\((.+)\)$")
_DYNAMIC = re.compile(r"^dynamic\((.*)\)$", re.DOTALL)


@dataclass
class KustoQuery:
    database: str
    csl: str
    parameters: dict[str, str]
    headers: dict[str, str]


def _when(value: str) -> datetime:
    match = _DATETIME.match(value.strip())
    text = (match.group(1) if match else value).replace("Z", "+00:00")
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class FakeKusto:
    """Seed ``rows`` (dicts with ContainerLogV2 columns); read ``queries`` afterwards."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.queries: list[KustoQuery] = []
        self.fail_with: tuple[int, dict[str, Any]] | None = None
        self.base_url = ""
        self._lock = threading.Lock()

    def add_row(self, *, time: str, pod: str, container: str, message: str, namespace: str,
                cluster_resource_id: str) -> None:
        with self._lock:
            self.rows.append({"TimeGenerated": time, "PodName": pod, "ContainerName": container,
                              "LogMessage": message, "PodNamespace": namespace,
                              "_ResourceId": cluster_resource_id})

    async def _query(self, request: web.Request) -> web.Response:
        body = await request.json()
        properties = body.get("properties") or {}
        if isinstance(properties, str):
            properties = json.loads(properties)
        params = {k: str(v) for k, v in (properties.get("Parameters") or {}).items()}
        with self._lock:
            self.queries.append(KustoQuery(str(body.get("db")), str(body.get("csl")), params,
                                           dict(request.headers)))
            failure = self.fail_with
            rows = list(self.rows)
        if failure is not None:
            return web.json_response(failure[1], status=failure[0])
        if "ContainerLogV2" not in str(body.get("csl")) or not params:
            return web.json_response({"error": {"code": "BadRequest", "message": "unexpected query",
                                                "@permanent": True}}, status=400)
        since, until = _when(params["since"]), _when(params["until"])
        n = int(params["n"])
        pods = set(json.loads(_DYNAMIC.match(params["pods"]).group(1)))  # type: ignore[union-attr]
        pattern = re.compile(params["podPattern"])  # KQL `matches regex` (RE2): these patterns read alike
        kept = [r for r in rows
                if since <= _when(r["TimeGenerated"]) <= until
                and r["PodNamespace"] == params["ns"]
                and (r["PodName"] in pods or pattern.search(r["PodName"]))
                and params["cluster"] in r["_ResourceId"].split("/")]
        kept.sort(key=lambda r: _when(r["TimeGenerated"]), reverse=True)
        kept = kept[:n]
        columns = [("TimeGenerated", "datetime"), ("PodName", "string"), ("ContainerName", "string"),
                   ("LogMessage", "string")]
        frames = [
            {"FrameType": "DataSetHeader", "IsProgressive": False, "Version": "v2.0"},
            {"FrameType": "DataTable", "TableId": 1, "TableKind": "PrimaryResult",
             "TableName": "PrimaryResult",
             "Columns": [{"ColumnName": c, "ColumnType": t} for c, t in columns],
             "Rows": [[r[c] for c, _ in columns] for r in kept]},
            {"FrameType": "DataSetCompletion", "HasErrors": False, "Cancelled": False},
        ]
        return web.json_response(frames)


@contextmanager
def running_fake_kusto() -> Iterator[FakeKusto]:
    """The fake on a free loopback port, served from a daemon thread."""
    fake = FakeKusto()
    app = web.Application()
    app.router.add_post("/v2/rest/query", fake._query)
    with serving_in_thread(app, name="fake-kusto") as url:
        fake.base_url = url
        yield fake
