"""What a cold `taubot diagnose` imports of kubernetes_asyncio: the client it uses, never the
~800 generated API and model modules its package `__init__` would (issue 36: 0.14 s of 0.6 s);
the generated classes are still all there for code that asks for them (workers/kube/sdk.py).
Each probe is a fresh interpreter, as a user's command is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          check=True).stdout


def test_the_live_status_path_imports_no_generated_kubernetes_class() -> None:
    loaded = run("import sys, workers.cli.live\n"
                 "print(' '.join(m for m in sys.modules if m.startswith('kubernetes_asyncio')))").split()
    generated = [m for m in loaded if m.startswith(("kubernetes_asyncio.client.models.",
                                                    "kubernetes_asyncio.client.api.",
                                                    "kubernetes_asyncio.dynamic", "kubernetes_asyncio.stream"))]
    assert generated == []
    assert "kubernetes_asyncio.client.api_client" in loaded  # the client itself is there: not vacuous


def test_code_that_asks_for_the_generated_classes_finds_every_one() -> None:
    """After the lean import, `from kubernetes_asyncio import client, watch` and the models behave
    as if the package had been imported whole (the manifest checks and the tests use them)."""
    out = run("import workers.kube.client\n"
              "import kubernetes_asyncio\n"
              "from kubernetes_asyncio import client, watch\n"
              "from kubernetes_asyncio.client import V1Job\n"
              "print(client.V1Pod.__name__, V1Job.__name__, client.CoreV1Api.__name__, watch.Watch.__name__,\n"
              "      client.models.V1Pod is client.V1Pod, kubernetes_asyncio.__version__ == client.__version__)")
    assert out.split() == ["V1Pod", "V1Job", "CoreV1Api", "Watch", "True", "True"]
