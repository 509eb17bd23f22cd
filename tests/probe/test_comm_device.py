"""Single-device and pairwise measurements, run on the CPU with tiny sizes."""

from __future__ import annotations

import pytest

from servelab.model.gpus import gpu_by_slug
from servelab.probe.comm._timing import bandwidth_point, gb_s
from servelab.probe.comm.device import (
    fp8_unsupported_reason,
    measure_host_copy,
    measure_matmul,
    measure_memory_copy,
)
from servelab.probe.comm.p2p import measure_p2p_pair
from tests.ci import require_module

torch = require_module("torch")
CPU = torch.device("cpu")


def test_units():
    assert gb_s(1e9, 1e6) == pytest.approx(1.0)  # 1 GB in 1 s
    point = bandwidth_point(12 << 10, [13.7, 14.0, 20.0])
    assert point.time_us == 14.0
    assert (point.min_time_us, point.max_time_us) == (13.7, 20.0)
    assert point.bandwidth_gb_s == pytest.approx(12288 / 14.0 / 1e3)


def test_memory_copy_counts_read_and_written_bytes():
    result = measure_memory_copy(CPU, size_bytes=1 << 20, iterations=2, repeats=3)
    assert result.device == "cpu"
    assert result.buffer_bytes == 1 << 20
    assert result.bytes_moved == 2 << 20
    assert result.min_time_us <= result.time_us <= result.max_time_us
    assert result.bandwidth_gb_s == pytest.approx(result.bytes_moved / result.time_us / 1e3)
    assert result.fraction_of_datasheet is None


def test_memory_copy_compares_with_the_datasheet():
    spec = gpu_by_slug("h200")
    result = measure_memory_copy(CPU, size_bytes=1 << 16, iterations=1, repeats=2, spec=spec)
    assert result.datasheet_bandwidth_gb_s == pytest.approx(4800)
    assert result.fraction_of_datasheet == pytest.approx(result.bandwidth_gb_s / 4800)


def test_bf16_matmul_rate():
    spec = gpu_by_slug("h100")
    result = measure_matmul(CPU, dtype="bf16", mnk=64, iterations=2, repeats=2, spec=spec)
    assert (result.dtype, result.mnk) == ("bf16", 64)
    assert result.tflop_s == pytest.approx(2 * 64**3 / result.time_us / 1e6)
    assert result.datasheet_tflop_s == pytest.approx(989.5)
    assert result.fraction_of_datasheet == pytest.approx(result.tflop_s / 989.5)


def test_fp8_matmul_through_scaled_mm():
    spec = gpu_by_slug("a100")  # no FP8 in the datasheet: nothing to compare with
    result = measure_matmul(CPU, dtype="fp8", mnk=32, iterations=1, repeats=2, spec=spec)
    assert result.dtype == "fp8"
    assert result.tflop_s > 0
    assert result.datasheet_tflop_s is None
    assert result.fraction_of_datasheet is None
    assert fp8_unsupported_reason(CPU) is None


def test_host_copy_on_the_cpu_is_unpinned():
    result = measure_host_copy(CPU, size_bytes=1 << 16, iterations=2, repeats=2)
    assert result.pinned is False
    assert result.h2d_gb_s == pytest.approx((1 << 16) / result.h2d_time_us / 1e3)
    assert result.d2h_gb_s == pytest.approx((1 << 16) / result.d2h_time_us / 1e3)


def test_pairwise_copies_both_ways_with_verification():
    sizes = [64 << 10, 4 << 10]
    result = measure_p2p_pair(
        torch.device("cpu", 0), torch.device("cpu", 1), sizes_bytes=sizes, repeats=2
    )
    assert (result.gpu_a, result.gpu_b) == (0, 1)
    assert result.copy_verified is True
    assert result.p2p_access_reported is False  # only CUDA devices have peers
    for series in (result.a_to_b, result.b_to_a):
        assert [p.size_bytes for p in series] == sorted(sizes)
        for point in series:
            assert point.bandwidth_gb_s == pytest.approx(point.size_bytes / point.time_us / 1e3)


def test_pairwise_copies_need_indexed_devices():
    with pytest.raises(ValueError):
        measure_p2p_pair(CPU, torch.device("cpu", 1), sizes_bytes=[1024])
