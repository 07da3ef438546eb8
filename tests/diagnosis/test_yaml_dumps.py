"""YAML dumps read through rapidyaml's JSON emitter give exactly what PyYAML gives.

Dumps: every bundled example (workers/examples, kubectl List shapes from the
fixtures) written as `kubectl get -o yaml` writes YAML (block style, strings
quoted where YAML would read them as something else), and hand-written
dumps with the YAML features kubectl never writes, which must take PyYAML's
path and keep PyYAML's meaning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from workers.collect import dumps as snapshot
from workers.collect.dumps import parse_snapshot
from workers.diagnosis.snapshot import SnapshotError


def fast(text: str) -> list[dict]:
    """What the dump path gives, with the size floor of the fast path at 0 (the examples are small)."""
    out: list[dict] = []
    snapshot.flatten_into(snapshot._yaml_documents(text, fast_from=0), out, "test")
    return out

EXAMPLES = sorted((Path(snapshot.__file__).resolve().parents[1] / "examples").glob("*.json"))


def pyyaml_objects(text: str) -> list[dict]:
    docs = list(yaml.safe_load_all(text))
    out: list[dict] = []
    snapshot.flatten_into(docs, out, "test")
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_reads_the_same_through_either_parser(path: Path) -> None:
    text = yaml.safe_dump(json.loads(path.read_text()), sort_keys=False)
    assert not snapshot._NOT_PLAIN_JSON.search(text)  # the fast path is the one taken
    assert fast(text) == pyyaml_objects(text) == parse_snapshot(text)


@pytest.mark.parametrize("text", [
    "kind: List\nitems:\n- &pod {kind: Pod, metadata: {name: a}}\n- *pod\n",           # anchor and alias
    "kind: List\nitems:\n- kind: Pod\n  metadata: {name: a, labels: ~}\n",              # ~ is null
    "kind: Pod\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: b}\n",           # two documents
    "kind: Pod\nmetadata: !!map {name: a}\n",                                          # a tag
])
def test_yaml_features_kubectl_does_not_write_keep_pyyamls_meaning(text: str) -> None:
    assert fast(text) == pyyaml_objects(text)


def test_a_broken_large_dump_still_says_where() -> None:
    text = "kind: List\nitems:\n" + "- {kind: Pod, metadata: {name: a}}\n" * 40_000 + "- {kind: Pod\n"
    assert len(text) > snapshot.FAST_YAML_FROM_BYTES
    with pytest.raises(SnapshotError, match=r"not valid YAML \(line 40004, column \d+\)"):
        parse_snapshot(text)


def test_a_broken_large_dump_is_one_line_of_taubot_on_stderr(tmp_path: Path) -> None:
    """rapidyaml's C++ error handler writes two lines of its own (a C++ source path) straight to
    descriptor 2 before it raises; the user reads only taubot's line, with PyYAML's position."""
    import subprocess
    import sys

    text = "kind: List\nitems:\n" + "- {kind: Pod, metadata: {name: a}}\n" * 40_000 + "- {kind: Pod\n"
    dump = tmp_path / "dump.yaml"
    dump.write_text(text)
    result = subprocess.run([sys.executable, "-m", "workers.cli", "diagnose", "--from-file", str(dump), "x"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"taubot: error: {dump} is not valid YAML (line 40004, column 1): did not find expected ',' or '}}'"]
