"""Azure Data Explorer (`ContainerLogV2`) as the log source of last resort, through azure-kusto-data.

Why the values travel only as query parameters: the namespace, run and pod
names are cluster text, and the cluster value comes from a descriptor; spliced
into KQL they could change the query. So the query text is a constant that
declares its parameters, and `ClientRequestProperties.set_parameter` carries
the values (SPEC §7a). The result is bounded twice: a time window around the
run and a `take`.

Why the bot's own Azure identity is acceptable here: ADX is read only after
the caller passed an access review for `get pods/log` in the run's namespace
(done by the caller of `query_logs`, impersonated). Authentication:
workload identity or managed identity through azure-identity in a pod; a
loopback `http://` endpoint (tests, local) is queried without
authentication; any other plain `http://` is refused before a request.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from workers.config.workspaces import KustoLogs

from .model import LogLine

QUERY = """declare query_parameters(ns:string, pods:dynamic, podPattern:string, cluster:string,
    since:datetime, until:datetime, n:long);
ContainerLogV2
| where TimeGenerated between (since .. until)
| where PodNamespace == ns
| where PodName in (pods) or PodName matches regex podPattern
| where _ResourceId has cluster
| project TimeGenerated, PodName, ContainerName, LogMessage = tostring(LogMessage)
| order by TimeGenerated desc
| take n"""
_LOOPBACK = re.compile(r"^http://(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?(/|$)")


class KustoRefused(ValueError):
    """The endpoint cannot be queried safely (plain http off this machine)."""


def _kql_datetime(moment: datetime) -> str:
    return f"datetime({moment.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')})"


def _client(endpoint: str) -> Any:
    from azure.kusto.data import KustoClient, KustoConnectionStringBuilder

    if _LOOPBACK.match(endpoint):
        return KustoClient(KustoConnectionStringBuilder.with_no_authentication(endpoint.rstrip("/")))
    if not endpoint.startswith("https://"):
        raise KustoRefused("the kusto endpoint must be https:// (plain http only to 127.0.0.1 or localhost)")
    from azure.identity import DefaultAzureCredential

    return KustoClient(KustoConnectionStringBuilder.with_azure_token_credential(
        endpoint, credential=DefaultAzureCredential()))


def _query(kusto: KustoLogs, params: dict[str, str], timeout: float) -> list[Any]:
    from azure.kusto.data import ClientRequestProperties

    properties = ClientRequestProperties()
    for name, value in params.items():
        properties.set_parameter(name, value)
    properties.set_option(ClientRequestProperties.request_timeout_option_name, timedelta(seconds=timeout))
    client = _client(kusto.endpoint)
    try:
        response = client.execute_query(kusto.database, QUERY, properties)
        return list(response.primary_results[0])
    finally:
        client.close()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _time(value: Any) -> str | None:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return str(value) if value else None


async def query_logs(kusto: KustoLogs, *, namespace: str, pods: list[str], pod_pattern: str,
                     since: datetime, until: datetime, tail: int,
                     timeout: float) -> tuple[list[LogLine], bool, str | None, str | None]:
    """The last ``tail`` lines (time order), whether older exist, and the newest line's pod/container.

    Only the run's own pods: ``pods`` by name, or a name ``pod_pattern`` (an anchored RE2
    expression: the names the run's controllers give), never a name prefix — `/tau logs llama`
    must not read `llama-ft-7b`'s pods."""
    params = {"ns": namespace, "pods": f"dynamic({json.dumps(sorted(pods))})", "podPattern": pod_pattern,
              "cluster": kusto.cluster,
              "since": _kql_datetime(since), "until": _kql_datetime(until), "n": str(tail + 1)}
    rows = await asyncio.wait_for(asyncio.to_thread(_query, kusto, params, timeout), timeout + 5)
    truncated = len(rows) > tail
    rows = list(reversed(rows[:tail]))
    lines = [LogLine(time=_time(r["TimeGenerated"]), text=_text(r["LogMessage"])) for r in rows]
    last = rows[-1] if rows else None
    pod = str(last["PodName"]) if last is not None else None
    container = str(last["ContainerName"]) if last is not None else None
    return lines, truncated, pod, container


__all__ = ["QUERY", "KustoRefused", "query_logs"]
