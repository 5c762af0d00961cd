"""XIDs by NVIDIA's catalog: what each means for the GPU and its jobs."""

from __future__ import annotations

import pytest

from gpudock.gpus.xid import FaultClass, FaultKind, classify_xid, ecc_fault


@pytest.mark.parametrize(
    ("xid", "expected"),
    [
        (13, FaultClass.APPLICATION),
        (31, FaultClass.APPLICATION),
        (43, FaultClass.APPLICATION),
        (45, FaultClass.INFO),
        (48, FaultClass.GPU_RESET),
        (74, FaultClass.GPU_RESET),
        (79, FaultClass.NODE),
        (94, FaultClass.APPLICATION),
        (95, FaultClass.GPU_RESET),
        (119, FaultClass.GPU_RESET),
        (9999, FaultClass.APPLICATION),  # not in the catalog: the GPU stays in service
    ],
)
def test_catalog_classes(xid: int, expected: FaultClass) -> None:
    assert classify_xid(xid).fault_class is expected


def test_the_config_overrides_the_catalog_and_summaries_name_the_xid() -> None:
    fault = classify_xid(43, {43: FaultClass.GPU_RESET})
    assert fault.fault_class is FaultClass.GPU_RESET
    assert fault.summary == "XID 43 (GPU stopped processing)"
    assert classify_xid(9999).summary == "XID 9999"


def test_ecc_errors() -> None:
    assert ecc_fault(True).fault_class.quarantines
    assert ecc_fault(False).fault_class is FaultClass.INFO
    assert ecc_fault(True, "2 new").summary == "uncorrectable (double-bit) ECC error (2 new)"
    assert ecc_fault(False).kind is FaultKind.ECC_CORRECTED
