"""Subcommands register themselves here; `workers.cli.main` builds the parser from the list.

Each subcommand module decorates its `add(subparsers)` with `@subcommand`, so
adding a command is one module and one line in `workers.cli.MODULES`, and no
subcommand imports another (or the package that lists them).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from .errors import UsageError

Adder = Callable[[Any], None]
REGISTERED: list[Adder] = []


def subcommand(add: Adder) -> Adder:
    REGISTERED.append(add)
    return add


_INVALID_CHOICE = re.compile(
    r"^argument (?P<arg>\S+): invalid choice: '(?P<got>[^']*)' \(choose from (?P<of>.*)\)$")
_UNRECOGNIZED = re.compile(r"^unrecognized arguments: (?P<args>.*)$")


def _close(word: str, candidates: Sequence[str]) -> str | None:
    """The one candidate `word` was most likely meant to be, as `/tau`'s grammar suggests; flags
    are compared without their dashes, which every one shares (`--bogus` is not `--logs`)."""
    bare = {c.lstrip("-"): c for c in candidates}
    found = difflib.get_close_matches(word.lstrip("-"), list(bare), n=1, cutoff=0.75)
    return bare[found[0]] if found else None


class Parser(argparse.ArgumentParser):
    """argparse that raises `UsageError` instead of printing usage and exiting, with a "did you
    mean" for a misspelt subcommand, choice or flag (difflib, as `/tau`'s grammar does)."""

    _argv: list[str] | None = None

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """Keep the words, so an unknown flag can be matched against the subcommand it was given to."""
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_args(self._argv, namespace)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self._did_you_mean(message)} (see `{self._used().prog} --help`)")

    def _used(self) -> argparse.ArgumentParser:
        """The innermost subcommand parser the words chose (`taubot workspace status` → its parser)."""
        parser: argparse.ArgumentParser = self
        for word in self._argv or []:
            if word.startswith("-"):
                continue
            sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
            if sub is None or word not in sub.choices:
                continue
            parser = sub.choices[word]
        return parser

    def _did_you_mean(self, message: str) -> str:
        choice = _INVALID_CHOICE.match(message)
        if choice:
            got, arg = choice["got"], choice["arg"]
            options = re.findall(r"'([^']*)'", choice["of"])
            near = _close(got, options)
            if arg.startswith("-"):
                return f"{message}: did you mean {arg} {near}?" if near else message
            command = any(isinstance(a, argparse._SubParsersAction) and a.dest == arg for a in self._actions)
            what = f"unknown command {got!r}" if command else f"invalid {arg} {got!r}"
            if near:
                return f"{what}: did you mean `{self.prog} {near}`?"
            return f"{what} (one of: {', '.join(options)})"
        unknown = _UNRECOGNIZED.match(message)
        if unknown:
            flags = [o for a in self._used()._actions for o in a.option_strings]
            words = [w.split("=", 1)[0] for w in unknown["args"].split() if w.startswith("--")]
            hints = [f"{w}: did you mean {near}?" for w in words if (near := _close(w, flags))]
            if hints:
                return f"{message} ({'; '.join(hints)})"
        return message


__all__ = ["REGISTERED", "Parser", "subcommand"]
