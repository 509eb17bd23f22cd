"""A CPU as the performance model sees it, at one thread count: measured, or from a datasheet.

An engine on the CPU runs torch's CPU kernels with OMP_NUM_THREADS threads, so a CPU's
figures hold for one thread count: the copy bandwidth, the matmul rate and an op's
dispatch all change with it. `cpu_from_probe` reads them from a probe document
(`servelab probe --comm`, or the quick CPU rates `servelab run` records), read as plain
JSON like `calibration` does: model/ does not import probe/. `datasheet_cpu` derives
peaks from a part's datasheet for a machine never probed; no datasheet gives an op's
dispatch, so its op floor is then unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.errors import ConfigError

__all__ = ["BYTES_PER_TRANSFER", "CpuSpec", "cpu_from_probe", "datasheet_cpu"]

BYTES_PER_TRANSFER = 8
"""A DDR channel is 64 bits wide: 8 bytes per transfer (JEDEC DDR4 and DDR5 alike)."""
_GB = 1e9
_TFLOPS = 1e12


class CpuSpec(BaseModel):
    """One CPU at one thread count, in SI units; `source` says where the figures come from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The CPU as the probe or the datasheet names it.")
    threads: int = Field(ge=1, description="torch intra-op threads the figures hold for.")
    memory_bandwidth_bytes_s: float = Field(
        gt=0, description="A large copy's bytes read + written per second (as on a GPU)."
    )
    fp32_flops: float = Field(gt=0, description="Square fp32 matmul rate, FLOP/s.")
    bf16_flops: float | None = Field(
        default=None, gt=0, description="Square bf16 matmul rate; None: not measured."
    )
    dispatch_us_per_op: float | None = Field(
        default=None,
        gt=0,
        description="One eager torch op's dispatch and run on the CPU (the probe's launch "
        "chain of tiny adds); None: unknown, and with it the op floor.",
    )
    memory_bytes: int | None = Field(default=None, description="Host memory; None: unknown.")
    source: str = Field(description="Where the figures come from.")


def cpu_from_probe(document: Mapping[str, Any], threads: int, *, source: str = "probe") -> CpuSpec:
    """The CPU measured at exactly `threads` in a probe document; a ConfigError saying which
    evidence is missing otherwise (no CPU rates, or not at this thread count)."""
    comm = document.get("comm")
    cpu = comm.get("cpu") if isinstance(comm, dict) else None
    if not isinstance(cpu, dict):
        raise ConfigError(
            f"{source} holds no CPU rates",
            hint="servelab run records them; servelab probe --comm measures them too",
        )
    rows = [r for r in cpu.get("by_threads") or [] if isinstance(r, dict)]
    row = next((r for r in rows if r.get("threads") == threads), None)
    if row is None:
        measured = ", ".join(str(r.get("threads")) for r in rows) or "none"
        errors = "; ".join(f"{k}: {v}" for k, v in (cpu.get("errors") or {}).items())
        raise ConfigError(
            f"{source} measured the CPU at {measured} threads, not at the engine's {threads}"
            + (f" ({errors})" if errors else ""),
            hint=f"probe with OMP_NUM_THREADS={threads} set",
        )
    by_dtype = {m.get("dtype"): m for m in row.get("matmul") or [] if isinstance(m, dict)}
    fp32 = (by_dtype.get("fp32") or {}).get("tflop_s")
    bandwidth = (row.get("memory_copy") or {}).get("bandwidth_gb_s")
    if not fp32 or not bandwidth:
        raise ConfigError(f"{source} lacks the fp32 matmul or the copy at {threads} threads")
    bf16 = (by_dtype.get("bf16") or {}).get("tflop_s")
    launch = row.get("launch") or {}
    dispatch = launch.get("eager_us_per_kernel") if launch.get("chain_verified", True) else None
    host = document.get("host")
    host = host if isinstance(host, dict) else {}
    return CpuSpec(
        name=str(host.get("cpu_model") or "CPU"),
        threads=threads,
        memory_bandwidth_bytes_s=float(bandwidth) * _GB,
        fp32_flops=float(fp32) * _TFLOPS,
        bf16_flops=float(bf16) * _TFLOPS if bf16 else None,
        dispatch_us_per_op=float(dispatch) if dispatch else None,
        memory_bytes=host.get("memory_bytes"),
        source=f"{source}: measured at {threads} torch threads",
    )


def datasheet_cpu(
    *,
    name: str,
    threads: int,
    memory_channels: int,
    memory_mt_s: float,
    ghz: float,
    fp32_flops_per_cycle: int,
    dispatch_us_per_op: float | None = None,
) -> CpuSpec:
    """Peaks from a datasheet: channels x MT/s x 8 bytes, and threads x GHz x FLOP per cycle.

    `fp32_flops_per_cycle` is per core: FMA units x SIMD lanes x 2 (AVX2 with two FMA
    units: 2 x 8 x 2 = 32; AVX-512 with two: 64). A copy reaches 60-90% of the channels'
    peak and a matmul 70-90% of the cores', so these are upper bounds of upper bounds.
    """
    if min(threads, memory_channels, fp32_flops_per_cycle) < 1 or min(memory_mt_s, ghz) <= 0:
        raise ConfigError("a CPU's threads, channels, MT/s, GHz and FLOP per cycle must be > 0")
    return CpuSpec(
        name=name,
        threads=threads,
        memory_bandwidth_bytes_s=memory_channels * memory_mt_s * 1e6 * BYTES_PER_TRANSFER,
        fp32_flops=threads * ghz * 1e9 * fp32_flops_per_cycle,
        dispatch_us_per_op=dispatch_us_per_op,
        source=(
            f"datasheet: {memory_channels} channels x {memory_mt_s:g} MT/s x 8 B; "
            f"{threads} threads x {ghz:g} GHz x {fp32_flops_per_cycle} FLOP/cycle"
            + ("" if dispatch_us_per_op is None else f"; {dispatch_us_per_op:g} us per op given")
        ),
    )
