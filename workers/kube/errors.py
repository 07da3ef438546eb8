"""The error a kubeconfig raises when it cannot take taubot to a cluster, kept light.

It lives apart from `client.py` so the CLI's entry point can report it as one line without
importing kubernetes_asyncio (`taubot diagnose --from-file` never loads the client).
"""

from __future__ import annotations


class KubeconfigError(Exception):
    """No kubeconfig, no such context, or one the client refuses: the message is one line that
    names the file, what is wrong and the setting that fixes it (never the library's traceback)."""


__all__ = ["KubeconfigError"]
