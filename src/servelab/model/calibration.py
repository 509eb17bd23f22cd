"""Measured figures from `servelab probe --comm` that replace the GPU catalogue's datasheet.

The probe document (schema servelab.probe/1) is read as plain JSON: model/ sits above
probe/ and does not import it. Each part is optional; only what was measured replaces
anything. Where several GPUs were measured, the slowest one counts: under tensor
parallelism every step waits for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.errors import ConfigError
from servelab.core.jsonfile import read_json_object
from servelab.core.units import US_PER_S
from servelab.model.gpus import GRAPH_EMPTY_KERNEL_US, GpuSpec

__all__ = [
    "PROBE_SCHEMA",
    "AllReduceSample",
    "Calibration",
    "Replacement",
    "apply_calibration",
    "calibration_from_probe",
]

PROBE_SCHEMA = "servelab.probe/1"
_GB = 1e9


class AllReduceSample(BaseModel):
    """One message size of a measured all-reduce sweep."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    size_bytes: int
    time_s: float
    busbw_bytes_s: float


class Calibration(BaseModel):
    """What a probe measured, in SI units; None where it measured nothing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(description="The probe file, or '<dict>'.")
    gpu_slug: str | None = Field(description="Catalogue slug of the GPUs measured.")
    gpu_name: str | None = None
    memory_bandwidth_bytes_s: float | None = Field(
        default=None, description="Device-to-device copy, bytes read + written per second."
    )
    bf16_flops: float | None = Field(default=None, description="Measured bf16 matmul rate.")
    fp8_flops: float | None = Field(default=None, description="Measured fp8 matmul rate.")
    link_bandwidth_bytes_s: float | None = Field(
        default=None, description="GPU-to-GPU copy bandwidth at the largest size, slowest pair."
    )
    send_latency_s: float | None = Field(
        default=None, description="GPU-to-GPU copy time at the smallest size, slowest pair."
    )
    allreduce_world_size: int | None = None
    allreduce: tuple[AllReduceSample, ...] = Field(
        default=(), description="The all-reduce sweep, sorted by size."
    )
    eager_kernel_s: float | None = Field(
        default=None, description="The launch chain's eager dispatch per op, slowest GPU."
    )
    graph_kernel_s: float | None = Field(
        default=None, description="The launch chain's graph replay per (empty) kernel, slowest."
    )


def calibration_from_probe(source: str | Path | Mapping[str, Any]) -> Calibration:
    """A Calibration from a probe.json path (or its parsed document)."""
    if isinstance(source, str | Path):
        name, document = str(source), _read(Path(source))
    else:
        name, document = "<dict>", dict(source)
    if document.get("schema") != PROBE_SCHEMA:
        raise ConfigError(
            f"{name} is not a servelab probe document",
            hint=f"schema {document.get('schema')!r}, expected {PROBE_SCHEMA!r}",
        )
    comm = document.get("comm")
    if not isinstance(comm, dict):
        raise ConfigError(f"{name} has no measurements", hint="run `servelab probe --comm --out`")
    devices = comm.get("devices") or []
    slugs = {d.get("catalogue_slug") for d in devices}
    if len(slugs) > 1:
        raise ConfigError(f"{name} measured different GPU models: {sorted(map(str, slugs))}")
    fields: dict[str, Any] = {
        "source": name,
        "gpu_slug": next(iter(slugs), None),
        "gpu_name": devices[0].get("name") if devices else None,
        "memory_bandwidth_bytes_s": _slowest(comm.get("memory_copy"), "bandwidth_gb_s", _GB),
    }
    for dtype in ("bf16", "fp8"):
        rows = [m for m in comm.get("matmul") or [] if m.get("dtype") == dtype]
        fields[f"{dtype}_flops"] = _slowest(rows, "tflop_s", 1e12)
    fields.update(_p2p(comm.get("p2p") or []))
    fields.update(_allreduce(comm.get("allreduce")))
    fields.update(_launch(comm.get("launch") or []))
    calibration = Calibration.model_validate(fields)
    measured = [k for k, v in fields.items() if k not in ("source", "gpu_slug", "gpu_name") and v]
    if not measured:
        raise ConfigError(f"{name} holds no usable measurement (see its 'skipped' and 'errors')")
    return calibration


def _read(path: Path) -> dict[str, Any]:
    return read_json_object(path, what="probe file")


def _slowest(rows: Any, key: str, scale: float) -> float | None:
    values = [float(r[key]) for r in rows or [] if isinstance(r, dict) and r.get(key)]
    return min(values) * scale if values else None


def _p2p(pairs: list[dict[str, Any]]) -> dict[str, float]:
    """Largest-size bandwidth and smallest-size time over every pair and direction."""
    series = [
        points
        for pair in pairs
        if pair.get("copy_verified", True)
        for points in (pair.get("a_to_b") or [], pair.get("b_to_a") or [])
        if points
    ]
    if not series:
        return {}
    largest = [max(points, key=lambda p: p["size_bytes"]) for points in series]
    smallest = [min(points, key=lambda p: p["size_bytes"]) for points in series]
    return {
        "link_bandwidth_bytes_s": min(p["bandwidth_gb_s"] for p in largest) * _GB,
        "send_latency_s": max(p["time_us"] for p in smallest) / US_PER_S,
    }


def _allreduce(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict) or result.get("device_type") != "cuda":
        return {}
    points = sorted(result.get("points") or [], key=lambda p: p["size_bytes"])
    if int(result.get("world_size") or 0) < 2 or not points:
        return {}
    return {
        "allreduce_world_size": int(result["world_size"]),
        "allreduce": tuple(
            AllReduceSample(
                size_bytes=int(p["size_bytes"]),
                time_s=float(p["time_us"]) / US_PER_S,
                busbw_bytes_s=float(p["busbw_gb_s"]) * _GB,
            )
            for p in points
        ),
    }


def _launch(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The slowest GPU's per-kernel launch figures; a CPU's eager dispatch says nothing of a
    GPU's, and a chain that did not run whole is not read."""
    cuda = [
        r
        for r in rows
        if isinstance(r, dict) and str(r.get("device", "")).startswith("cuda")
        if r.get("chain_verified", True)
    ]
    found: dict[str, float] = {}
    pairs = (("eager_kernel_s", "eager_us_per_kernel"), ("graph_kernel_s", "graph_us_per_kernel"))
    for key, field in pairs:
        values = [float(r[field]) for r in cuda if r.get(field)]
        if values:
            found[key] = max(values) / US_PER_S
    return found


class Replacement(BaseModel):
    """One datasheet figure a measurement replaced."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="e.g. 'memory bandwidth'.")
    unit: str
    datasheet: float | None
    calibrated: float
    how: str = Field(description="'measured', or how it was derived from a measurement.")


def apply_calibration(
    gpu: GpuSpec, calibration: Calibration | None
) -> tuple[GpuSpec, tuple[Replacement, ...]]:
    """`gpu` with the measured memory bandwidth and matmul rates in place of the datasheet's."""
    if calibration is None:
        return gpu, ()
    if calibration.gpu_slug is not None and calibration.gpu_slug != gpu.slug:
        raise ConfigError(
            f"{calibration.source} measured {calibration.gpu_slug} GPUs, not {gpu.slug}",
            hint="calibrate with a probe of the GPU being modelled",
        )
    update: dict[str, float] = {}
    replaced: list[Replacement] = []

    def replace(field: str, name: str, unit: str, scale: float, value: float, how: str) -> None:
        old = getattr(gpu, field)
        update[field] = value
        replaced.append(
            Replacement(
                name=name,
                unit=unit,
                datasheet=None if old is None else old / scale,
                calibrated=value / scale,
                how=how,
            )
        )

    if calibration.memory_bandwidth_bytes_s:
        bandwidth = calibration.memory_bandwidth_bytes_s
        replace("memory_bandwidth_bytes_s", "memory bandwidth", "GB/s", _GB, bandwidth, "measured")
    if calibration.bf16_flops:
        replace(
            "bf16_dense_flops", "bf16 matmul", "TFLOP/s", 1e12, calibration.bf16_flops, "measured"
        )
    if calibration.fp8_flops:
        replace("fp8_dense_flops", "fp8 matmul", "TFLOP/s", 1e12, calibration.fp8_flops, "measured")
        if gpu.fp4_dense_flops and gpu.fp8_dense_flops:
            fraction = calibration.fp8_flops / gpu.fp8_dense_flops
            replace(
                "fp4_dense_flops",
                "fp4 matmul",
                "TFLOP/s",
                1e12,
                gpu.fp4_dense_flops * fraction,
                f"datasheet x fp8's measured fraction {fraction:.2f}",
            )
    if calibration.eager_kernel_s:
        eager_us = calibration.eager_kernel_s * US_PER_S
        replace("eager_kernel_us", "eager dispatch per kernel", "us", 1.0, eager_us, "measured")
    if calibration.graph_kernel_s:
        # The chain's kernels are empty; a decode step's are not: scale the catalogue's
        # decode-kernel replay by this GPU's empty-kernel replay over the H200's.
        ratio = calibration.graph_kernel_s * US_PER_S / GRAPH_EMPTY_KERNEL_US
        replace(
            "graph_kernel_us",
            "graph replay per kernel",
            "us",
            1.0,
            gpu.graph_kernel_us * ratio,
            f"catalogue x this GPU's empty-kernel replay over the H200's ({ratio:.2f})",
        )
    copy = gpu.model_copy(update=update)
    if calibration.eager_kernel_s or calibration.graph_kernel_s:
        source = f"{calibration.source}: the probe's launch chain"
        copy = copy.model_copy(update={"kernel_latency_source": source})
    return copy, tuple(replaced)
