"""A manifest as given — a file, stdin, a Slack paste or a shared file — into one document or one clear line.

Why so strict about the input: the answer must be about *the* Job or RayJob
the researcher will submit. A multi-document file would leave us guessing
which one they meant; a Deployment is not a training run; a binary or a huge
paste is a mistake (or an attack on the worker's memory), refused before any
parsing. YAML is read with libyaml's `CSafeLoader` when present (safe types
only, ~10× the pure-Python loader), JSON is YAML too.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_MANIFEST_BYTES = 256 * 1024
SUPPORTED = {("batch/v1", "Job"): "Job", ("ray.io/v1", "RayJob"): "RayJob"}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ManifestError(ValueError):
    """Input that is not one Job or RayJob manifest; `str()` is the one line the user sees."""


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.0f} KiB"


def too_large(size: int) -> ManifestError:
    return ManifestError(f"the manifest is {_size(size)}; taubot validates one Job or RayJob of at most "
                         f"{MAX_MANIFEST_BYTES // 1024} KiB")


def decode(data: bytes) -> str:
    """Bytes to text, refusing binary and oversized input before anything parses it."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise too_large(len(data))
    if b"\x00" in data:
        raise ManifestError("the manifest is binary data, not YAML or JSON")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ManifestError("the manifest is not UTF-8 text (binary data?)") from None


def load(text: str) -> tuple[dict[str, Any], str]:
    """One Job or RayJob document and its kind ("Job"/"RayJob"), else `ManifestError`."""
    if (size := len(text.encode("utf-8", errors="replace"))) > MAX_MANIFEST_BYTES:
        raise too_large(size)
    if not text.strip():
        raise ManifestError("the manifest is empty")
    try:
        documents = [d for d in yaml.load_all(text, Loader=_LOADER) if d is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or "not valid YAML or JSON"
        raise ManifestError(f"the manifest does not parse{where}: {problem}") from None
    if not documents:
        raise ManifestError("the manifest is empty")
    if len(documents) > 1:
        raise ManifestError(f"the file holds {len(documents)} documents; give exactly one Job or RayJob")
    doc = documents[0]
    if not isinstance(doc, dict):
        raise ManifestError(f"the manifest is a YAML {type(doc).__name__}, not an object with apiVersion "
                            "and kind")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise ManifestError("the manifest has no apiVersion and kind; a run is a batch/v1 Job or a "
                            "ray.io/v1 RayJob")
    check_expansion(doc)
    found = SUPPORTED.get((api_version, kind))
    if found is None:
        shown = f"{api_version} {kind}"[:80]
        raise ManifestError(f"{shown!r} is not a training run: taubot validates a batch/v1 Job or a "
                            "ray.io/v1 RayJob")
    return doc, found




MAX_NODES = 200_000  # values in one document, aliases counted each time they are used


def check_expansion(document: Any, budget: int = MAX_NODES) -> None:
    """Refuse a YAML alias bomb: PyYAML shares aliased nodes, so the document is small in
    memory, but every walk over it (our checks, the JSON body of the dry run) visits each
    use of an alias again — a few KiB of anchors can mean billions of values."""
    stack, seen = [document], 0
    while stack:
        value = stack.pop()
        seen += 1
        if seen > budget:
            raise ManifestError("the manifest expands to more than "
                                f"{budget:,} values (YAML anchors and aliases); write it out plainly")
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


__all__ = ["MAX_MANIFEST_BYTES", "ManifestError", "check_expansion", "decode", "load", "too_large"]
