"""Shared pieces of the phase case tables: a clock, a runner and a case type."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from tests.fixtures import k8s
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.models import Diagnosis

NOW = k8s.T0 + timedelta(minutes=30)
REMOVE = object()  # `with_field`'s value that deletes the field


def paths(obj: object, prefix: tuple = (), *, every_item: bool = False, depth: int = 5) -> Iterator[tuple]:
    """Every field path of ``obj`` down to ``depth`` levels; of a list, its first item only
    unless ``every_item``."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield (*prefix, k)
            if len(prefix) < depth:
                yield from paths(v, (*prefix, k), every_item=every_item, depth=depth)
    elif isinstance(obj, list):
        for i, v in enumerate(obj if every_item else obj[:1]):
            yield (*prefix, i)
            if len(prefix) < depth:
                yield from paths(v, (*prefix, i), every_item=every_item, depth=depth)


def with_field(obj: dict, path: tuple, value: object) -> dict:
    """A deep copy of ``obj`` with the field at ``path`` set to ``value`` (`REMOVE`: deleted)."""
    mutated = copy.deepcopy(obj)
    target = mutated
    for part in path[:-1]:
        target = target[part]
    if value is REMOVE:
        del target[path[-1]]
    else:
        target[path[-1]] = copy.deepcopy(value)
    return mutated


def diagnose(objects: list[dict], run: str, now=NOW) -> Diagnosis:
    """Evaluate through the kubectl `List` shape, as a user's dump arrives."""
    return evaluate(k8s.kube_list(*objects), run, now)


@dataclass
class Case:
    """One row: a scenario, the phase it is about, and what must come out."""

    id: str
    build: Callable[[], list[dict]]
    phase: str
    state: str
    run: str = "train"
    summary: str | None = None
    first: str | None | bool = False  # False: do not check
    owner: str | None = None
    transient: bool | None | str = "unchecked"
    layer: int | None = None
    now: object = field(default=NOW)
    next_action: str | None = None  # a substring of the answer's next action
    not_in_next_action: str | None = None

    def check(self) -> Diagnosis:
        d = diagnose(self.build(), self.run, self.now)
        p = d.phase(self.phase)
        assert p.state.value == self.state, (p.state, p.summary, p.evidence)
        if self.summary is not None:
            assert self.summary in p.summary, p.summary
        if self.first is not False:
            assert d.first_incomplete == self.first, (d.first_incomplete, d.phases)
        if self.owner is not None:
            assert d.owner == self.owner, (d.owner, d.first_incomplete, d.next_action)
        if self.transient != "unchecked":
            assert d.transient is self.transient, d.transient
        if self.layer is not None:
            assert d.layer == self.layer
        if self.next_action is not None:
            assert self.next_action in d.next_action, d.next_action
        if self.not_in_next_action is not None:
            assert self.not_in_next_action not in d.next_action, d.next_action
        return d
