"""The phases' table: one module per phase of the guide's tree (SPEC §3), keyed by the registry's names.

`EVALUATION_ORDER` and `POD_JUDGES` are derived from `workers/diagnosis/registry.py`: the registry
says which phases exist, in which order, which are judged pod by pod; this table says which
module judges each.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import registry
from . import admission, raycluster, rayjob_status, submitted
from .pods import POD_PHASE_MODULES

MODULES: dict[str, ModuleType] = {m.NAME: m for m in (submitted, admission, raycluster, *POD_PHASE_MODULES,
                                                       rayjob_status)}
EVALUATION_ORDER: tuple[tuple[str, Callable[..., Any]], ...] = tuple(
    (e.name, MODULES[e.name].evaluate) for e in registry.EVALUATION)
POD_JUDGES: dict[str, Callable[..., Any]] = {m.NAME: m.judge_pod for m in POD_PHASE_MODULES}

__all__ = ["EVALUATION_ORDER", "MODULES", "POD_JUDGES"]
