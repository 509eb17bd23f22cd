"""What each compute capability allows a kernel: shared memory per block and per SM.

Kernels tuned on one architecture carry block sizes that assume its shared memory; a
GPU of another compute capability can refuse them ("out of resource: shared memory")
even when its name sounds like the same generation. Figures are the CUDA C++
Programming Guide's ("Technical Specifications per Compute Capability", and the
per-architecture shared-memory sections); 9.0's per-block figure was read on an H200
(`cudaDevAttrMaxSharedMemoryPerBlockOptin`, 232,448 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ARCHITECTURE_LIMITS", "ArchitectureLimits", "limits_for"]

_KIB = 1024


@dataclass(frozen=True, slots=True)
class ArchitectureLimits:
    """Shared memory a kernel may use on one compute capability."""

    capability: tuple[int, int]
    sm: str
    shared_per_block_optin_bytes: int
    """The most one block may ask for (opting in above the default 48 KB)."""
    shared_per_sm_bytes: int
    examples: str


ARCHITECTURE_LIMITS = (
    ArchitectureLimits((8, 0), "SM80", 163 * _KIB, 164 * _KIB, "A100"),
    ArchitectureLimits((8, 6), "SM86", 99 * _KIB, 100 * _KIB, "A10, RTX 30"),
    ArchitectureLimits((8, 9), "SM89", 99 * _KIB, 100 * _KIB, "L40S, RTX 40"),
    ArchitectureLimits((9, 0), "SM90", 227 * _KIB, 228 * _KIB, "H100, H200"),
    ArchitectureLimits((10, 0), "SM100", 227 * _KIB, 228 * _KIB, "B200, GB200"),
    ArchitectureLimits((12, 0), "SM120", 99 * _KIB, 100 * _KIB, "RTX PRO 6000 Blackwell, RTX 50"),
)

SOURCE = (
    "CUDA C++ Programming Guide, Technical Specifications per Compute Capability; "
    "SM90 per block read on an H200"
)


def limits_for(capability: str | tuple[int, int] | None) -> ArchitectureLimits | None:
    """The limits of '12.0' or (12, 0); None for a capability not listed."""
    if capability is None:
        return None
    if isinstance(capability, str):
        major, _, minor = capability.partition(".")
        try:
            capability = (int(major), int(minor or 0))
        except ValueError:
            return None
    return next((a for a in ARCHITECTURE_LIMITS if a.capability == capability), None)
