"""The real servers the suite starts listen on loopback only (HELPERS: servers bind 127.0.0.1).

Ray 2.60 binds and advertises the host's address unless told otherwise
(reference training-logs.md §2.6); a process of theirs listening on any other
address fails this test. Read with psutil from the process trees we started.
"""

from __future__ import annotations

import ipaddress
import subprocess

import psutil

from .conftest import MlflowServer, RayHead


def listening(proc: subprocess.Popen) -> list[tuple[str, str, int]]:
    root = psutil.Process(proc.pid)
    found = []
    for p in [root, *root.children(recursive=True)]:
        try:
            for conn in p.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((p.name(), conn.laddr.ip, conn.laddr.port))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def test_ray_and_mlflow_listen_on_loopback_only(ray_head: RayHead, ray_jobs: dict[str, dict],
                                                mlflow_servers: tuple[MlflowServer, MlflowServer]) -> None:
    sockets = listening(ray_head.proc) + [s for m in mlflow_servers for s in listening(m.proc)]
    names = {name for name, _, _ in sockets}
    assert len(sockets) >= 6 and {"gcs_server", "raylet"} <= names, sockets  # the trees were read
    assert [s for s in sockets if not loopback(s[1])] == []
