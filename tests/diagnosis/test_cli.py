"""`taubot diagnose` as a user runs it: the bundled examples, the JSON contract, bad input.

Runs the installed console script in a subprocess, so exit codes, stdout and
stderr are exactly what a terminal or a script sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.make_examples import EXAMPLES, NOW
from tests.fixtures import k8s

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "workers" / "examples"
TAUBOT = [sys.executable, "-m", "workers.cli"]
CONTRACT_KEYS = {"run", "phases", "first_incomplete", "layer", "owner", "transient", "next_action",
                 "checks", "recovery", "queue_position", "eta", "charts"}  # SPEC §5 and §5a; issue 29
PHASES = ["Submitted", "Kueue admission", "RayCluster", "Pod scheduling", "DRA allocation",
          "Image pull", "Init containers", "Container start", "Ready", "RayJob status"]


def taubot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TAUBOT, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("example", [ex for ex, _ in EXAMPLES], ids=[ex.file for ex, _ in EXAMPLES])
def test_bundled_example_json(example) -> None:
    out = taubot("diagnose", example.run, "--from-file", str(EXAMPLES_DIR / example.file),
                 "--now", NOW, "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == CONTRACT_KEYS
    assert [p["name"] for p in doc["phases"]] == PHASES
    # reason: issue 23; the admission phase also carries Kueue's token and preemption (issue 35, SPEC §5b)
    assert all(set(p) == {"name", "state", "summary", "reason"} | (
        {"kueue_reason", "preemption"} if p["name"] == "Kueue admission" else set()) for p in doc["phases"])
    assert doc["run"] == {"name": example.run, "namespace": doc["run"]["namespace"], "kind": example.kind}
    assert doc["first_incomplete"] == example.first_incomplete
    assert doc["layer"] == example.layer
    assert doc["owner"] == example.owner
    assert doc["transient"] is example.transient
    if example.first_incomplete:
        phase = next(p for p in doc["phases"] if p["name"] == example.first_incomplete)
        assert phase["state"] == example.state
    assert doc["next_action"]


def test_text_output_marks_first_incomplete_with_handoff() -> None:
    out = taubot("diagnose", "--example", "l4-job-waiting-for-quota")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "○ Kueue admission" in text and "◀ first incomplete" in text
    assert "owner: queue-owner" in text and "transient" in text
    assert "does not prove:" in text and "pods" in text
    assert "command: tau run status llama-ft-7b" in text


def test_default_example_runs() -> None:
    out = taubot("diagnose", "--example")
    assert out.returncode == 0 and "RayCluster" in out.stdout and "owner: researcher" in out.stdout


def test_yaml_and_concatenated_json_dumps(tmp_path: Path) -> None:
    j = k8s.job("train")
    objs = [j, k8s.workload(j, state="exceeds_max")]
    concatenated = tmp_path / "multi.json"
    concatenated.write_text("\n".join(json.dumps(o, indent=1) for o in objs))
    import yaml

    as_yaml = tmp_path / "dump.yaml"
    as_yaml.write_text(yaml.safe_dump(k8s.kube_list(*objs)))
    single = tmp_path / "one.json"
    single.write_text(json.dumps(j))
    for path, first in ((concatenated, "Kueue admission"), (as_yaml, "Kueue admission"),
                        (single, "Kueue admission")):
        doc = json.loads(taubot("diagnose", "train", "--from-file", str(path), "--format", "json").stdout)
        assert doc["first_incomplete"] == first, path
    doc = json.loads(taubot("diagnose", "train", "--from-file", str(concatenated), "--format", "json").stdout)
    assert doc["owner"] == "queue-owner" and doc["transient"] is False


BAD = [
    ("invalid-run-name", ["diagnose", "Bad_Name", "--from-file", "x.json"], "invalid run name"),
    ("too-long-name", ["diagnose", "a" * 64, "--from-file", "x.json"], "invalid run name"),
    ("missing-file", ["diagnose", "train", "--from-file", "/nonexistent/dump.json"], "no such file"),
    ("unknown-flag", ["diagnose", "train", "--bogus"], "unrecognized arguments"),
    ("bad-now", ["diagnose", "train", "--from-file", "{dump}", "--now", "yesterday"], "invalid --now"),
    ("no-source", ["diagnose", "train"], "--from-file"),
]


@pytest.mark.parametrize(("name", "args", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, name: str, args: list[str], message: str) -> None:
    dump = tmp_path / "d.json"
    dump.write_text(json.dumps(k8s.kube_list(k8s.job("train"))))
    out = taubot(*[a.replace("{dump}", str(dump)) for a in args])
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(("content", "message"), [
    ('{"apiVersion": "v1", "kind": "List", "items": [', "not valid JSON"),
    ("items:\n  - kind: Pod\n   bad: [", "not valid YAML"),
    ("", "is empty"),
    ('[1, 2, 3]', "expected Kubernetes objects"),
    ('{"foo": "bar"}', "not a Kubernetes object"),
], ids=["truncated-json", "bad-yaml", "empty", "not-objects", "no-kind"])
def test_malformed_dump(tmp_path: Path, content: str, message: str) -> None:
    dump = tmp_path / "bad.json"
    dump.write_text(content)
    out = taubot("diagnose", "train", "--from-file", str(dump))
    assert out.returncode == 2
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_run_not_found_contract(tmp_path: Path) -> None:
    dump = tmp_path / "d.json"
    dump.write_text(json.dumps(k8s.kube_list(k8s.job("other"))))
    doc = json.loads(taubot("diagnose", "train", "--from-file", str(dump), "--format", "json").stdout)
    assert doc["run"]["kind"] is None
    assert doc["phases"][0] == {**doc["phases"][0], "name": "Submitted", "state": "warning"}
    assert (doc["first_incomplete"], doc["layer"], doc["owner"]) == ("Submitted", 3, "researcher")


def test_dump_from_stdin_and_utf16_with_bom(tmp_path: Path) -> None:
    """`--from-file -` reads standard input; PowerShell's `>` writes UTF-16 with a BOM."""
    dump = (EXAMPLES_DIR / "l4-job-waiting-for-quota.json").read_text()
    done = subprocess.run([*TAUBOT, "diagnose", "llama-ft-7b", "--from-file", "-", "--now", NOW, "--format",
                           "json"], input=dump, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout)["first_incomplete"] == "Kueue admission"
    utf16 = tmp_path / "dump-ps.json"
    utf16.write_bytes(dump.encode("utf-16"))  # starts with the BOM
    out = taubot("diagnose", "llama-ft-7b", "--from-file", str(utf16), "--now", NOW, "--format", "json")
    assert out.returncode == 0 and json.loads(out.stdout)["first_incomplete"] == "Kueue admission"


@pytest.mark.parametrize(("text", "what"), [
    # `kubectl get pods -n team-vision` and `kubectl describe pod` as people paste them
    ("NAME                READY   STATUS             RESTARTS   AGE\nllama-ft-7b-x7k2p   0/1     ImagePullBackOff   0          5m\n",
     "kubectl's table output"),
    ("Name:             llama-ft-7b-x7k2p\nNamespace:        team-vision\nStatus:           Pending\n", "kubectl describe output"),
])
def test_pasted_kubectl_text_says_use_json(tmp_path: Path, text: str, what: str) -> None:
    dump = tmp_path / "pasted.txt"
    dump.write_text(text)
    out = taubot("diagnose", "llama-ft-7b", "--from-file", str(dump))
    assert out.returncode == 2 and what in out.stderr and "-o json" in out.stderr
    assert "Traceback" not in out.stderr


def test_two_runs_of_one_name_ask_for_the_namespace(tmp_path: Path) -> None:
    from tests.fixtures import k8s

    dump = tmp_path / "two.json"
    dump.write_text(json.dumps(k8s.kube_list(k8s.job("train"), k8s.job("train", ns="team-audio"))))
    out = taubot("diagnose", "train", "--from-file", str(dump))
    assert out.returncode == 2 and "pass --namespace" in out.stderr and "team-audio" in out.stderr
    ok = taubot("diagnose", "train", "--from-file", str(dump), "--namespace", "team-audio", "--format", "json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["run"]["namespace"] == "team-audio"



def test_output_to_a_reader_that_left_is_a_quiet_exit_0() -> None:
    """`taubot diagnose … --format json | head -1` (issue 15.14): the reader is gone before the
    first write — here a pipe whose read end is closed, so every write meets EPIPE, every time."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([*TAUBOT, "diagnose", "--example", "l4-job-waiting-for-quota", "--format", "json"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == 0
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
