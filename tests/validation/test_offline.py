"""`validate --offline`: the local checks on real manifests, one defect each, and bad input.

Manifests: Kueue's sample Job and RayJob (tests/fixtures/manifests.py cites them).
Every case runs through `validate_text`, the function the CLI and the Slack
job share, with a descriptor registry as the only context: nothing live.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.manifests import dump, sample
from tests.live.conftest import write_descriptor
from workers.config.workspaces import load_descriptors
from workers.validation.live import validate_text
from workers.validation.manifest import MAX_MANIFEST_BYTES, ManifestError, decode
from workers.validation.report import ValidationReport


@pytest.fixture
def registry(tmp_path: Path) -> Any:
    write_descriptor(tmp_path, "https://127.0.0.1:9")  # never dialled: offline
    return load_descriptors(tmp_path)


def offline(registry: Any, text: str) -> ValidationReport:
    return asyncio.run(validate_text(registry, text, workspace="vision", identity=None, offline=True))


def check(report: ValidationReport, name: str) -> Any:
    [found] = [c for c in report.checks if c.name == name]
    return found


def containers(doc: dict, kind: str) -> list[dict]:
    if kind == "Job":
        return doc["spec"]["template"]["spec"]["containers"]
    return doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"]


def test_the_upstream_samples_pass_offline(registry: Any) -> None:
    for kind in ("Job", "RayJob"):
        report = offline(registry, dump(sample(kind)))
        assert report.ok, report.summary
        assert report.offline and report.dry_run == "not sent"
        assert "nothing live was checked" in report.summary
        assert {c.state for c in report.checks} == {"ok"}


def _set(path: list[Any], value: Any) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


def _container(kind: str, key: str, value: Any) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        containers(doc, kind)[0][key] = value
    return edit


def _drop_label(doc: dict) -> None:
    del doc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]


# (kind, edit, failing check, words the user must see) — each one defect on a real sample.
CASES = [
    ("Job", _set(["metadata", "namespace"], "default"), "namespace", "workspace's namespace is 'team-vision'"),
    ("Job", _drop_label, "queue label", "no kueue.x-k8s.io/queue-name label"),
    ("Job", _set(["metadata", "labels", "kueue.x-k8s.io/queue-name"], "user-queue"), "queue label",
     "the workspace's LocalQueue is 'team-a'"),
    ("Job", _container("Job", "resources", {"requests": {"nvidia.com/gpu": 1}}), "GPU limits",
     "nvidia.com/gpu is requested but not in limits"),
    ("Job", _container("Job", "resources", {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 1}}),
     "GPU limits", "must be equal to nvidia.com/gpu limit of 1"),
    ("Job", _container("Job", "image", "Registry.k8s.io/e2e-test-images/Agnhost:2.53"), "images",
     "repository name must be lowercase (InvalidImageName)"),
    ("Job", _container("Job", "image", "agnhost:2.53:latest"), "images", "invalid reference format"),
    ("Job", _container("Job", "image", ""), "images", "no image"),
    ("Job", _set(["spec", "template", "spec", "restartPolicy"], "Always"), "pod template",
     "restartPolicy is 'Always'"),
    ("Job", _container("Job", "imagePullPolicyy", "IfNotPresent"), "fields",
     "spec.template.spec.containers[0].imagePullPolicyy"),
    ("Job", _set(["metadata", "name"], "Sample_Job"), "name", "is not a lowercase DNS-1123 name"),
    ("RayJob", _set(["spec", "shutdownAfterJobFinishes"], False), "RayJob under Kueue",
     "a kueue managed job should delete the cluster after finishing"),
    ("RayJob", _set(["spec", "clusterSelector"], {"ray.io/cluster": "shared"}), "RayJob under Kueue",
     "a kueue managed job should not use an existing cluster"),
    ("RayJob", _container("RayJob", "resources", {"requests": {"nvidia.com/gpu": 1}}), "GPU limits",
     "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources"),
    ("RayJob", _set(["spec", "rayClusterSpec", "headGroupSpec", "rayStartParam"], {}), "fields",
     "spec.rayClusterSpec.headGroupSpec.rayStartParam"),
    ("RayJob", _set(["spec", "entrypoint"], ""), "RayJob under Kueue", "spec.entrypoint is empty"),
]


@pytest.mark.parametrize(("kind", "edit", "failing", "words"), CASES,
                         ids=[f"{k}-{f}-{i}" for i, (k, _, f, _) in enumerate(CASES)])
def test_one_defect_fails_its_check_as_the_researchers(registry: Any, kind: str, edit: Callable[[dict], None],
                                                       failing: str, words: str) -> None:
    doc = sample(kind)
    edit(doc)
    report = offline(registry, dump(doc))
    assert not report.ok
    assert report.layer == 3 and report.owner == "researcher" and report.transient is False
    found = check(report, failing)
    assert found.state == "failed" and words in found.detail, found.detail
    assert [c.name for c in report.checks if c.state == "failed"] == [failing]  # one defect, one failure
    assert report.summary.startswith(f"{failing}: ") and report.next_action


def test_suspend_false_is_a_warning_not_a_failure(registry: Any) -> None:
    doc = sample("Job")
    doc["spec"]["suspend"] = False
    report = offline(registry, dump(doc))
    assert report.ok
    assert check(report, "suspend").state == "warning"
    assert "Kueue starts the run itself" in check(report, "suspend").detail


def test_json_is_accepted_as_well(registry: Any) -> None:
    assert offline(registry, json.dumps(sample("RayJob"))).ok


def test_an_unknown_workspace_is_layer_1_and_the_manifest_is_still_checked(registry: Any) -> None:
    report = asyncio.run(validate_text(registry, dump(sample("Job")), workspace="nope", identity=None,
                                       offline=True))
    assert not report.ok and report.layer == 1 and report.owner == "researcher"
    assert check(report, "workspace").state == "failed" and "nope" in check(report, "workspace").detail
    assert check(report, "images").state == "ok"


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(8))

BAD_INPUT = [
    (dump(sample("Job")) + "---\n" + dump(sample("RayJob")), "the file holds 2 documents"),
    ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n", "'apps/v1 Deployment' is not a training run"),
    ("apiVersion: batch/v1\nkind: Job\nspec: [unclosed\n", "does not parse (line 4, column 1)"),
    ("- apiVersion: batch/v1\n- kind: Job\n", "is a YAML list, not an object"),
    ("kind: Job\n", "has no apiVersion and kind"),
    ("   \n", "the manifest is empty"),
    ("apiVersion: batch/v1\nkind: Job\n" + ALIAS_BOMB, "expands to more than 200,000 values"),
    ("x" * (10 * 1024 * 1024), "the manifest is 10.0 MiB"),
]


@pytest.mark.parametrize(("text", "line"), BAD_INPUT, ids=[f"bad-{i}" for i in range(len(BAD_INPUT))])
def test_bad_input_gets_one_clear_line(registry: Any, text: str, line: str) -> None:
    report = offline(registry, text)
    assert not report.ok and report.layer == 3 and report.owner == "researcher"
    [only] = report.checks
    assert only.name == "manifest" and line in only.detail and "\n" not in only.detail
    assert report.manifest == "(no manifest)"


@pytest.mark.parametrize(("data", "line"), [
    (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), "binary data"),
    (b"apiVersion: batch/v1\nkind: Job\nmetadata: {name: caf\xe9}\n", "not UTF-8"),
    (b"a" * (MAX_MANIFEST_BYTES + 1), "at most 256 KiB"),
])
def test_bytes_that_are_not_a_manifest_are_refused_before_parsing(data: bytes, line: str) -> None:
    with pytest.raises(ManifestError, match=line):
        decode(data)
