"""Reading a run snapshot: whatever `kubectl get -o json|yaml` printed.

A snapshot is a kubectl `List`, a single object, a typed list (`PodList`), or
several `kubectl get -o json` outputs pasted one after another; YAML works
too, including multi-document streams. The result is always a flat list of
plain object dicts — never typed client models, which reject partial objects.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from workers.diagnosis.models import Diagnosis
from workers.diagnosis.registry import ADMISSION
from workers.diagnosis.snapshot import SnapshotError, flatten_into

# Large YAML dumps: rapidyaml (C++, `ryml`) parses the text into a compact tree and emits it as
# JSON, which `json.loads` turns into objects sharing their key strings — a 50 MB `kubectl get -o
# yaml` dump took 37 s and 1.9 GB through PyYAML's CSafeLoader (its constructor is Python), and
# 1.5 s and ~0.5 GB this way. ryml's JSON does not resolve what kubectl never writes (anchors,
# aliases, merge keys, tags, `~`), so a dump using any of them, or one ryml refuses, goes
# through PyYAML, which also gives error positions. Only dumps from 1 MiB take the fast path:
# below that PyYAML takes milliseconds anyway.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NOT_PLAIN_JSON = re.compile(r"(?:^|[\s\[{,])(?:[&*!][^\s,\]}]|<<\s*:)|[:\-\[{,]\s*~\s*(?:$|[,\]}])",
                             re.MULTILINE)
FAST_YAML_FROM_BYTES = 1024 * 1024
try:
    import ryml as _ryml
except ImportError:  # pragma: no cover - a platform without its wheel
    _ryml = None


def _yaml_documents(text: str, fast_from: int = FAST_YAML_FROM_BYTES) -> list[Any]:
    """Every document of a YAML dump; `yaml.YAMLError` (with its position) when it does not parse."""
    if (_ryml is not None and len(text) >= fast_from and "\n---" not in text
            and not _NOT_PLAIN_JSON.search(text)):
        try:
            tree = _parse_quietly(text.encode("utf-8"))
            return [json.loads(_ryml.emit_json_malloc(tree, tree.root_id()))]
        except Exception:  # noqa: BLE001 - any refusal: PyYAML decides, and says where
            pass
    return list(yaml.load_all(text, Loader=_YAML_LOADER))


# What ryml 0.15's error handler writes: `line=2 col=1 (9B): ERROR: [parse] parse error`, then
# `/project/cpp/src/c4/yml/parse_engine.def.hpp:1000: (detected here)`.
_RYML_LINE = re.compile(rb"^(?:line=\d+ col=\d+ \(\d+B\): ERROR: \[\w+\]|\S+:\d+: \(detected here\)\s*$)")


def _parse_quietly(data: bytes) -> Any:
    """`ryml.parse_in_arena`, without the two lines its C++ error handler writes straight to file
    descriptor 2 before it raises (the user then read a C++ source path above taubot's own
    one-line error). Whatever else reached descriptor 2 meanwhile — another thread's log line —
    is written out afterwards: delayed by the parse, never lost."""
    assert _ryml is not None
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no descriptor 2 (a closed stderr): nothing to keep quiet
        return _ryml.parse_in_arena(data)
    error: Exception | None = None
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            tree = _ryml.parse_in_arena(data)
        except Exception as exc:  # noqa: BLE001 - raised again below, after descriptor 2 is back
            error = exc
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        captured = capture.read()
    if error is not None:  # its exception has no text: the lines are known by their shape
        captured = b"".join(line for line in captured.splitlines(keepends=True) if not _RYML_LINE.match(line))
    if captured:
        os.write(2, captured)
    if error is not None:
        raise error
    return tree


def _json_documents(text: str) -> list[Any]:
    """Decode one or more concatenated JSON values (several `kubectl get -o json` outputs)."""
    decoder = json.JSONDecoder()
    docs: list[Any] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return docs
        doc, pos = decoder.raw_decode(text, pos)
        docs.append(doc)


_NOTHING_FOUND = re.compile(r"^No resources found\b")
_DUMP_HINT = "kubectl get rayjobs,jobs,workloads,pods,events -n <namespace> -o json"


_TABLE_HEAD = re.compile(r"^(NAMESPACE\s+)?NAME\s+(READY|STATUS|COMPLETIONS|AGE|ADMITTED|JOB STATUS)\b")
_DESCRIBE_HEAD = re.compile(r"^Name:\s+\S+\s*$", re.MULTILINE)


def _kubectl_text(stripped: str) -> str | None:
    """What kind of kubectl *text* this is, when a person pasted a table or `describe`."""
    first = stripped[:4096].split("\n", 1)[0] if stripped else ""  # not splitlines(): a 50 MB dump
    if _TABLE_HEAD.match(first):
        return "kubectl's table output"
    if _DESCRIBE_HEAD.match(first) and re.search(r"^(Namespace|Labels|Status):", stripped, re.MULTILINE):
        return "kubectl describe output"
    return None


def parse_snapshot(text: str, source: str = "snapshot") -> list[dict]:
    """Parse dump text into a flat list of objects; raises SnapshotError on bad input."""
    text = text.lstrip("\ufeff")
    stripped = text.lstrip()
    if not stripped:
        raise SnapshotError(f"{source} is empty")
    if _NOTHING_FOUND.match(stripped):
        raise SnapshotError(f"{source} is kubectl's \"No resources found\" message, not objects: nothing "
                            f"matched there; check the namespace, then dump the run's: {_DUMP_HINT}")
    pasted = _kubectl_text(stripped)
    if pasted is not None:
        raise SnapshotError(f"{source} is {pasted}, not objects: run the same command with -o json "
                            "(e.g. kubectl get rayjobs,jobs,workloads,pods,events -n <ns> -o json)")
    docs: list[Any]
    if stripped[0] in "{[":
        try:
            docs = _json_documents(text)
        except json.JSONDecodeError as exc:
            raise SnapshotError(
                f"{source} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
    else:
        try:
            docs = _yaml_documents(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            problem = getattr(exc, "problem", None) or "cannot be parsed"
            raise SnapshotError(f"{source} is not valid YAML{at}: {problem}") from None
    null_items = _empty_null_items(docs)
    objects: list[dict] = []
    flatten_into(docs, objects, source)
    if not objects:
        why = "a List whose items are null" if null_items else "no objects at all"
        raise SnapshotError(f"{source} holds {why}: kubectl matched nothing; check the namespace, then "
                            f"dump the run's: {_DUMP_HINT}")
    for number, obj in enumerate(objects, 1):
        _check_shape(obj, number, source)
    return objects


def _empty_null_items(docs: list[Any]) -> bool:
    """A `List` whose `items` is null (Go's nil slice, as some tools write an empty result) is an
    empty list; said so, rather than "an object without kind and metadata". True when one was seen."""
    seen = False
    for doc in docs:
        if isinstance(doc, dict) and str(doc.get("kind") or "").endswith("List") and "items" in doc \
                and doc["items"] is None:
            doc["items"] = []
            seen = True
    return seen


_MAPPINGS = ("spec", "status")
_META_STRINGS = ("name", "namespace", "uid")  # times: YAML reads an unquoted one as a datetime
_META_MAPPINGS = ("labels", "annotations")


def _check_shape(obj: dict, number: int, source: str) -> None:
    """The fields every phase reads have the types Kubernetes gives them; a hand-edited dump with
    `metadata: "…"` or `spec: 5` is one line naming the object and field, not a traceback later."""
    meta = obj.get("metadata")
    where = f"{source}: object {number} ({obj.get('kind')}"

    def bad(field: str, want: str, got: Any) -> SnapshotError:
        name = meta.get("name") if isinstance(meta, dict) and isinstance(meta.get("name"), str) else None
        return SnapshotError(f"{where}{' ' + name if name else ''}): {field} should be {want}, found "
                             f"{type(got).__name__}: dump it again with -o json")

    if not isinstance(meta, dict):
        raise bad("metadata", "a mapping", meta)
    for field in _META_STRINGS:
        if field in meta and meta[field] is not None and not isinstance(meta[field], str):
            raise bad(f"metadata.{field}", "a string", meta[field])
    for field in _META_MAPPINGS:
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise bad(f"metadata.{field}", "a mapping", value)
        for key, item in value.items():
            if isinstance(item, dict | list):  # a scalar is read as its text (YAML's `gpu: 8`)
                raise bad(f"metadata.{field}[{key!r}]", "a string", item)
    owners = meta.get("ownerReferences")
    if owners is not None and not (isinstance(owners, list) and all(isinstance(o, dict) for o in owners)):
        raise bad("metadata.ownerReferences", "a list of mappings", owners)
    for field in _MAPPINGS:
        if obj.get(field) is not None and not isinstance(obj[field], dict):
            raise bad(field, "a mapping", obj[field])


def decode_dump(data: bytes) -> str:
    """UTF-8, or UTF-16 with its BOM (PowerShell's `>` writes that)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16")
    return data.decode("utf-8")


def load_snapshot_file(path: str | Path) -> list[dict]:
    """Read and parse a dump file (`-` is standard input); unreadable files become a
    SnapshotError, not a traceback."""
    if str(path) == "-":
        try:
            return parse_snapshot(decode_dump(sys.stdin.buffer.read()), source="standard input")
        except UnicodeDecodeError as exc:
            raise SnapshotError(f"standard input is not UTF-8 or UTF-16 text: {exc.reason}") from None
    p = Path(path)
    try:
        text = decode_dump(p.read_bytes())
    except FileNotFoundError:
        raise SnapshotError(f"cannot read {p}: no such file") from None
    except IsADirectoryError:
        raise SnapshotError(f"cannot read {p}: it is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"cannot read {p}: {exc}") from None
    return parse_snapshot(text, source=str(p))


def with_queue_position(d: Diagnosis) -> Diagnosis:
    """Offline (SPEC §5b): a waiting run's place, start estimate and never-fits from the dump itself,
    when it holds the run's ClusterQueue (its Workloads and Nodes make the answer whole). The
    admission phase computed them from the snapshot (`start_estimate.snapshot_position`); this puts
    them where a live status puts its reads, `queue_position`. A dump without the ClusterQueue keeps
    `queue_position` null: nothing could be said with a basis."""
    if d.queue_position is not None or d.first_incomplete != ADMISSION.name:
        return d
    forecast = d.phase(ADMISSION.name).forecast
    return d if forecast is None else d.model_copy(update={"queue_position": forecast})
