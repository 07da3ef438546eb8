"""XID numbers in the kernel's own format (issue 25, SPEC §11 "Nodes").

node-problem-detector's `XIDErrors` condition quotes the kernel line, `NVRM: Xid (PCI:0003:00:00):
31, pid=…, name=…` (older drivers: `NVRM: Xid (0000:3b:00): 48, …`) — the number follows the PCI
address and a colon, so a reader that expects `Xid 79` misses it and an application XID (31, an
MMU fault of the program's own) blamed the node pool. Wordings from
shared/reference/node-health.md (NVIDIA's XID catalogue, docs.nvidia.com/deploy/xid-errors); the
node is a real AKS A100 node's shape (tests/diagnosis/test_node_health.py).
"""

from __future__ import annotations

import pytest

from tests.diagnosis.test_node_health import NODE, NOW, node, run_objects, set_condition
from workers.diagnosis.evaluate import evaluate
from workers.diagnosis.nodes import xids_in

KERNEL_APP = ("XID errors present in kernel logs: NVRM: Xid (PCI:0003:00:00): 31, pid=3541, name=python, "
              "Ch 0000000a, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_4c000000. "
              "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")
KERNEL_HARDWARE = ("XID errors present in kernel logs: NVRM: Xid (PCI:0000:3b:00): 79, pid=1932, name=python, "
                   "GPU has fallen off the bus.")
OLDER_DRIVER = "XID errors present in kernel logs: NVRM: Xid (0000:3b:00): 48, pid=1932, An uncorrectable double bit error"


@pytest.mark.parametrize(("message", "xids"), [
    (KERNEL_APP, {31}), (KERNEL_HARDWARE, {79}), (OLDER_DRIVER, {48}),
    ("XID errors present in kernel logs: Xid 13 (Graphics Engine Exception)", {13}),
    ('DCGM_FI_DEV_XID_ERRORS{gpu="0",err_code="94",err_msg="Contained ECC error"} 94', {94}),
    ("No XID errors present in kernel logs", set()),
])
def test_xid_numbers_are_read_from_every_quoted_format(message: str, xids: set[int]) -> None:
    assert xids_in(message) == xids


def test_an_application_xid_in_the_kernels_format_is_not_a_node_fault() -> None:
    app = set_condition(node(), "XIDErrors", "True", "XIDErrorsFound", KERNEL_APP)
    d = evaluate([*run_objects(), app], "llama-ft-7b", NOW)
    check = d.phase("GPU/node health")
    assert check.state.value == "done" and "1/1 nodes healthy" in check.summary, check
    assert d.owner != "node-pool-owner"


@pytest.mark.parametrize("message", [KERNEL_HARDWARE, OLDER_DRIVER], ids=["Xid 79", "Xid 48, older driver"])
def test_a_hardware_xid_in_the_kernels_format_is_a_node_fault(message: str) -> None:
    bad = set_condition(node(), "XIDErrors", "True", "XIDErrorsFound", message)
    d = evaluate([*run_objects(), bad], "llama-ft-7b", NOW)
    check = d.phase("GPU/node health")
    assert check.state.value == "warning" and NODE in check.summary and "XIDErrors=True" in check.summary
    assert d.first_incomplete == "GPU/node health" and d.owner == "node-pool-owner"
