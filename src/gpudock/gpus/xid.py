"""XID and ECC events: what each means for the GPU and its jobs.

NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/, "Analyzing
Xid Errors with the Xid Catalog", for Ampere and newer) gives every XID a
*resolution bucket*: the immediate action. gpudock maps the bucket to what it
does:

=====================  =================  ============================================
catalog bucket         ``FaultClass``     gpudock
=====================  =================  ============================================
RESTART_APP            ``application``    the GPU stays in service; a job that fails
                                          carries the XID in its reason
RESET_GPU              ``gpu_reset``      the GPU is quarantined; its jobs stop and
                                          are requeued (or fail: ``on_fault``)
RESTART_BM,            ``node``           every GPU of the node is quarantined
CHECK_MECHANICALS
IGNORE                 ``info``           an event and a metric, nothing else
=====================  =================  ============================================

An XID the table does not name is treated as ``application`` (the GPU stays
in service) and logged; ``health.xid_classes`` in the config overrides any
entry. ECC: a double-bit (uncorrectable) error needs a GPU reset; a
single-bit (corrected) one is ``info``. A GPU that NVML reports lost
(``GPU_IS_LOST``) needs a reset too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class FaultClass(StrEnum):
    APPLICATION = "application"
    GPU_RESET = "gpu_reset"
    NODE = "node"
    INFO = "info"

    @property
    def quarantines(self) -> bool:
        return self in (FaultClass.GPU_RESET, FaultClass.NODE)


_BUCKETS = {
    "RESTART_APP": FaultClass.APPLICATION,
    "RESET_GPU": FaultClass.GPU_RESET,
    "RESTART_BM": FaultClass.NODE,
    "CHECK_MECHANICALS": FaultClass.NODE,
    "IGNORE": FaultClass.INFO,
}

XID_CATALOG: dict[int, tuple[str, str]] = {
    8: ("RESTART_APP", "GPU stopped processing"),
    11: ("RESTART_APP", "invalid or corrupted push buffer stream"),
    13: ("RESTART_APP", "graphics engine exception"),
    31: ("RESTART_APP", "GPU memory page fault"),
    32: ("RESTART_APP", "invalid or corrupted push buffer stream"),
    38: ("RESTART_APP", "driver firmware error"),
    43: ("RESTART_APP", "GPU stopped processing"),
    45: ("IGNORE", "preemptive cleanup, due to previous errors"),
    48: ("RESET_GPU", "double bit ECC error"),
    61: ("RESET_GPU", "internal micro-controller breakpoint/warning"),
    62: ("RESET_GPU", "internal micro-controller halt"),
    63: ("IGNORE", "ECC page retirement or row remapping recording event"),
    64: ("RESET_GPU", "ECC page retirement or row remapper recording failure"),
    68: ("RESTART_APP", "NVDEC0 exception"),
    69: ("RESTART_APP", "graphics engine class error"),
    74: ("RESET_GPU", "NVLink error"),
    79: ("RESTART_BM", "GPU has fallen off the bus"),
    92: ("IGNORE", "high single-bit ECC error rate"),
    94: ("RESTART_APP", "contained ECC error"),
    95: ("RESET_GPU", "uncontained ECC error"),
    109: ("RESTART_APP", "context switch timeout error"),
    119: ("RESET_GPU", "GSP RPC timeout"),
    120: ("RESET_GPU", "GSP error"),
    121: ("IGNORE", "C2C link corrected error"),
    122: ("RESET_GPU", "SPI PMU RPC read failure"),
    123: ("RESET_GPU", "SPI PMU RPC write failure"),
    136: ("RESET_GPU", "GPU fabric health problem"),
    140: ("RESET_GPU", "unrecovered ECC error"),
    143: ("RESET_GPU", "GPU initialization failure"),
    144: ("RESET_GPU", "NVLink SAW error"),
    145: ("RESET_GPU", "NVLink RLW error"),
    146: ("RESET_GPU", "NVLink TLW error"),
    147: ("RESET_GPU", "NVLink TREX error"),
    148: ("RESET_GPU", "NVLink NVLPW_CTRL error"),
    149: ("RESET_GPU", "NVLink NETIR error"),
    150: ("RESET_GPU", "NVLink MSE error"),
}
"""XID → (catalog resolution bucket, description): the XIDs A100/H100 report in practice."""


class FaultKind(StrEnum):
    XID = "xid"
    ECC_UNCORRECTED = "ecc_uncorrected"  # double-bit
    ECC_CORRECTED = "ecc_corrected"  # single-bit
    LOST = "lost"  # NVML: GPU is lost


@dataclass(frozen=True, slots=True)
class GpuFault:
    """One health event of one GPU, classified. ``code`` is the XID (XID events)."""

    gpu_uuid: str
    kind: FaultKind
    fault_class: FaultClass
    code: int | None = None
    detail: str = ""

    @property
    def summary(self) -> str:
        """``XID 79 (GPU has fallen off the bus)``: for reasons and events."""
        if self.kind is FaultKind.XID:
            return f"XID {self.code} ({self.detail})" if self.detail else f"XID {self.code}"
        text = {
            FaultKind.ECC_UNCORRECTED: "uncorrectable (double-bit) ECC error",
            FaultKind.ECC_CORRECTED: "corrected (single-bit) ECC error",
            FaultKind.LOST: "GPU is lost",
        }[self.kind]
        return f"{text} ({self.detail})" if self.detail else text


def classify_xid(xid: int, overrides: Mapping[int, FaultClass] | None = None) -> GpuFault:
    """The fault an XID event means for its GPU (the GPU's uuid filled in by the caller)."""
    bucket, detail = XID_CATALOG.get(xid, ("", ""))
    found = (overrides or {}).get(xid) or _BUCKETS.get(bucket, FaultClass.APPLICATION)
    return GpuFault("", FaultKind.XID, found, xid, detail)


def ecc_fault(uncorrected: bool, detail: str = "") -> GpuFault:
    if uncorrected:
        return GpuFault("", FaultKind.ECC_UNCORRECTED, FaultClass.GPU_RESET, None, detail)
    return GpuFault("", FaultKind.ECC_CORRECTED, FaultClass.INFO, None, detail)
