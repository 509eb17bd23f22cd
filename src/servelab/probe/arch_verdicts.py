"""Verdicts on what a GPU's architecture allows kernels tuned for another one.

Kernels and configs tuned on SM90/SM100 datacenter GPUs are the ones engines ship; a
compute capability 12.x GPU shares the Blackwell name but not their shared memory, so
those kernels can fail to launch there, and the MoE configs engines look up by device
name are usually not written for it.
"""

from __future__ import annotations

from servelab.model.architectures import SOURCE, limits_for
from servelab.probe.gpus import GpuFacts
from servelab.probe.verdict import Severity, Verdict

__all__ = ["architecture_verdicts"]

_KIB = 1024


def architecture_verdicts(gpus: list[GpuFacts]) -> list[Verdict]:
    """An info verdict for GPUs of compute capability 12.x (SM120: RTX PRO 6000, RTX 50)."""
    sm120 = [g for g in gpus if (g.compute_capability or "").startswith("12.")]
    if not sm120:
        return []
    ours = limits_for(sm120[0].compute_capability) or limits_for("12.0")
    datacenter = limits_for("10.0")
    assert ours is not None and datacenter is not None
    names = sorted({g.name or "unnamed GPU" for g in sm120})
    indexes = ", ".join(f"gpu{g.nvml_index}" for g in sm120)
    return [
        Verdict(
            code="sm120-kernel-limits",
            severity=Severity.INFO,
            title=(
                f"{', '.join(names)}: compute capability {sm120[0].compute_capability} "
                f"({ours.sm}), {ours.shared_per_sm_bytes // _KIB} KB of shared memory per SM "
                f"against {datacenter.shared_per_sm_bytes // _KIB} KB on SM90/SM100"
            ),
            evidence=[
                f"{indexes}: compute capability {sm120[0].compute_capability}",
                f"{ours.sm}: at most {ours.shared_per_block_optin_bytes // _KIB} KB per block, "
                f"{ours.shared_per_sm_bytes // _KIB} KB per SM ({SOURCE})",
                f"SM90/SM100 ({datacenter.examples}): "
                f"{datacenter.shared_per_block_optin_bytes // _KIB} KB per block, "
                f"{datacenter.shared_per_sm_bytes // _KIB} KB per SM",
            ],
            meaning=(
                "Kernels whose block sizes were chosen on SM90/SM100 can ask for more shared "
                "memory than an SM120 block may have and fail to launch ('out of resource: "
                "shared memory'): SGLang's Triton extend attention needed smaller blocks on "
                "SM120 (PR #14311: `_get_block_sizes_for_extend_attention` checks "
                "CUDA_CAPABILITY[0] == 12 and uses (64, 128), (64, 64) or (32, 32) by head "
                "dimension). The fused-MoE configs engines look up by device name are usually "
                "written for H100/H200/B200, not these GPUs, so MoE layers run on defaults."
            ),
            action=(
                "Use an engine release with SM120 block sizes (SGLang with #14311 or later); "
                "for a MoE model, check and generate its kernel configs for this GPU: "
                "servelab tune kernels --engine SPEC."
            ),
            subjects=[f"gpu{g.nvml_index}" for g in sm120],
        )
    ]
