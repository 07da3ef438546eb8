"""Free quota in a ClusterQueue for the flavour a waiting run needs (pure; issue 29).

Shapes: kueue apis/kueue/v1beta2/clusterqueue_types.go (spec.resourceGroups[].flavors[].resources[]
.nominalQuota, status.flavorsReservation / flavorsUsage [{name, resources[{name, total, borrowed}]}]);
the message is Kueue's flavorassigner "insufficient unused quota for %s in flavor %s, %s more needed".
"""

from __future__ import annotations

import pytest

from tests.fixtures import k8s
from workers.diagnosis.queue_position import cohort_of, free_quota, quantity


def waiting(flavor: str = "h100", gpus: int = 8) -> dict:
    job = k8s.job("train", suspend=True, gpus=gpus)
    return k8s.workload(job, state="waiting_for_quota", flavor=flavor)


def two_flavors(reservation: bool = True) -> dict:
    cq = k8s.cluster_queue("h100-shared", gpu_quota=64, gpu_used=56, flavor="h100")
    cq["spec"]["resourceGroups"][0]["flavors"].append(
        {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "32"}]})
    cq["status"]["flavorsReservation"].append(
        {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "total": "40", "borrowed": "8"}]})
    if not reservation:  # an older ClusterQueue status without flavorsReservation
        cq["status"]["flavorsUsage"] = cq["status"].pop("flavorsReservation")
    return cq


@pytest.mark.parametrize(("workload", "cq", "expected"), [
    (waiting("h100"), two_flavors(), [("h100", 64, 56, 8)]),            # the flavour Kueue named
    (waiting("a100"), two_flavors(), [("a100", 32, 40, 0)]),            # borrowing past nominal: 0 free
    (waiting("h100"), two_flavors(reservation=False), [("h100", 64, 56, 8)]),
])
def test_free_quota_in_the_named_flavour(workload: dict, cq: dict, expected: list) -> None:
    quota, why = free_quota(cq, [workload])
    assert why is None
    assert [(q.flavor, q.nominal, q.reserved, q.free) for q in quota] == expected


def test_without_a_flavour_in_the_message_every_gpu_flavour_counts() -> None:
    wl = waiting()
    wl["status"]["conditions"][0]["message"] = "couldn't assign flavors to pod set main: Workload is pending"
    quota, _ = free_quota(two_flavors(), [wl])
    assert [q.flavor for q in quota] == ["h100", "a100"]


def test_a_resource_the_queue_does_not_cover_says_so() -> None:
    cq = k8s.cluster_queue("cpu-only", flavor="default-flavor")
    cq["spec"]["resourceGroups"][0]["coveredResources"] = ["cpu"]
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] = [{"name": "cpu", "nominalQuota": "64"}]
    assert free_quota(cq, [waiting("default-flavor")]) == ([], "the ClusterQueue has no quota for nvidia.com/gpu")


def test_quantities_and_cohorts() -> None:
    assert [quantity(v) for v in ("64", 8, "500m", "2Ki", "x")] == [64.0, 8.0, 0.5, 2048.0, None]
    assert cohort_of({"spec": {"cohortName": "gpus"}}) == "gpus"          # v1beta2
    assert cohort_of({"spec": {"cohort": "gpus"}}) == "gpus"              # v1beta1
    assert cohort_of({"spec": {}}) is None
