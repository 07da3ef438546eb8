"""kubernetes_asyncio, the parts taubot uses — without the generated classes it never touches.

Why not `from kubernetes_asyncio import client, config`: kubernetes_asyncio's package
`__init__` imports its client, config, dynamic, stream, utils and watch, and the client's
`__init__` every generated API class and model (about 800 modules, and dateutil and urllib3 with
them): 0.14 s of the 0.6 s a cold `taubot diagnose` took (issue 36), and Python runs a package's
`__init__` before any module inside it can be imported. taubot reads raw JSON through
`ApiClient.call_api` (workers/kube/reader.py) and needs `Configuration`, `ApiClient`, `rest` and
the kubeconfig loader, nothing generated.

So the two package modules (and the models package `api_client` imports by name) are made here
without running their `__init__` — each gets its `__path__`, so the modules inside import as
usual — and each runs its `__init__` the first time something only that `__init__` defines is
asked of it (a module `__getattr__`): code that does use the generated classes (the manifest
checks' models, a test's `watch`) finds them all, as if the package had been imported whole.
When kubernetes_asyncio is already imported whole, this module takes its parts from it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_ROOT = "kubernetes_asyncio"
_LAZY = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.models")


def _package_without_init(name: str) -> ModuleType:
    """``name`` in `sys.modules`: the package as imported, or one whose `__init__` runs on first need."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not an installed package")
    module = importlib.util.module_from_spec(spec)
    lock = threading.RLock()
    state = {"ran": False}

    def __getattr__(attr: str) -> Any:  # noqa: N807 - the module-level hook (PEP 562)
        """A module inside the package is imported as `import` would; anything else is the
        `__init__`'s to define, which runs now (once: a name it does not define is an error)."""
        if importlib.util.find_spec(f"{name}.{attr}") is not None:
            return importlib.import_module(f"{name}.{attr}")
        with lock:
            if not state["ran"]:
                state["ran"] = True
                del module.__dict__["__getattr__"]
                spec.loader.exec_module(module)  # type: ignore[union-attr]
        try:
            return module.__dict__[attr]
        except KeyError:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

    module.__getattr__ = __getattr__  # type: ignore[attr-defined]
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


if _ROOT not in sys.modules:
    for _name in _LAZY:
        _package_without_init(_name)

from kubernetes_asyncio.client import api_client, configuration, exceptions, rest  # noqa: E402

ApiClient = api_client.ApiClient
Configuration = configuration.Configuration
ApiException = exceptions.ApiException
_client = sys.modules["kubernetes_asyncio.client"]
# What the kubeconfig loader imports by name from the client package (its `__init__` binds the same).
for _attr, _value in (("ApiClient", ApiClient), ("Configuration", Configuration)):
    if _attr not in _client.__dict__:
        setattr(_client, _attr, _value)

from kubernetes_asyncio import config  # noqa: E402
from kubernetes_asyncio.config import ConfigException  # noqa: E402

__all__ = ["ApiClient", "ApiException", "ConfigException", "Configuration", "config", "rest"]
