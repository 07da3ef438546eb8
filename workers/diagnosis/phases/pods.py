"""The pod-level phases' modules, in the registry's order (`registry.POD_PHASES`).

Apart from `phases/table.py` because RayCluster, itself a phase, judges its own pods with
these: it imports this table, and the package's table imports RayCluster.
"""

from __future__ import annotations

from types import ModuleType

from .. import registry
from . import container_start, dra, image_pull, init_containers, ready, scheduling

_BY_NAME: dict[str, ModuleType] = {m.NAME: m for m in (scheduling, dra, image_pull, init_containers,
                                                        container_start, ready)}
# A pod phase added to the registry without its module here fails at import, not at a user's status.
POD_PHASE_MODULES: tuple[ModuleType, ...] = tuple(_BY_NAME[name] for name in registry.POD_PHASES)

__all__ = ["POD_PHASE_MODULES"]
