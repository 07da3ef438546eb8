"""Subcommands register themselves here; `workers.cli.main` builds the parser from the list.

Each subcommand module decorates its `add(subparsers)` with `@subcommand`, so
adding a command is one module and one line in `workers.cli.MODULES`, and no
subcommand imports another (or the package that lists them).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn

from .errors import UsageError

Adder = Callable[[Any], None]
REGISTERED: list[Adder] = []


def subcommand(add: Adder) -> Adder:
    REGISTERED.append(add)
    return add


class Parser(argparse.ArgumentParser):
    """argparse that raises `UsageError` instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


__all__ = ["REGISTERED", "Parser", "subcommand"]
