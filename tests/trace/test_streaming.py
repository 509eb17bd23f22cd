"""A 60 MB trace is summarised without being held: the peak of Python's allocations stays
a fraction of the file (json.load of such a file peaks at hundreds of MB)."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

from servelab.trace import summarize_trace

STEPS = 700
OPS_PER_STEP = 100
PEAK_BOUND_BYTES = 30 * 2**20
# A real kernel name's length: Kineto writes the whole template instantiation.
KERNEL = (
    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, "
    "false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> "
    ">, false, false, false, false, true, true, false, false>(flash::Flash_fwd_params) "
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::"
    "BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul>) cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_"
    "64x64_64x4_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8"
    "::Params)"
)


def _write(path: Path) -> int:
    """SGLang-style decode steps: each an annotation, 100 ops and 100 kernels; 1.1 ms apart."""
    events = 0
    with path.open("w") as out:
        out.write('{"schemaVersion": 1, "deviceProperties": [], "traceEvents": [\n')
        for step in range(STEPS):
            ts = 1000.0 + step * 1100.0
            lines = [
                '{"ph": "X", "cat": "user_annotation", "name": "step[DECODE bs=1]", "pid": 1, '
                f'"tid": 1, "ts": {ts:.3f}, "dur": {OPS_PER_STEP * 10.0:.3f}, "args": {{}}}},\n'
            ]
            for k in range(OPS_PER_STEP):
                at = ts + k * 10.0
                lines.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "aten::op{k % 20}", "pid": 1, '
                    f'"tid": 1, "ts": {at:.3f}, "dur": 5.0, "args": {{"External id": {k}, '
                    f'"Record function id": 0, "Ev Idx": {k}}}}},\n'
                    f'{{"ph": "X", "cat": "kernel", "name": "{KERNEL}_{k % 30}", "pid": 0, '
                    f'"tid": 7, "ts": {at + 4.0:.3f}, "dur": 3.0, "args": {{"device": 0, '
                    f'"stream": 7, "correlation": {k}, "registers per thread": 32, '
                    f'"grid": [1, 1, 1], "block": [128, 1, 1]}}}},\n'
                )
            out.write("".join(lines))
            events += 1 + 2 * OPS_PER_STEP
        out.write('{"ph": "i", "name": "Record Window End", "pid": 1, "tid": 1, "ts": 0.0}\n]}\n')
    return events + 1


def test_a_60_mb_trace_is_read_as_a_stream(tmp_path: Path):
    path = tmp_path / "big.trace.json"
    events = _write(path)
    assert path.stat().st_size > 60e6

    started = time.perf_counter()
    tracemalloc.start()
    try:
        summary = summarize_trace(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - started

    assert summary.events_read == events
    assert summary.steps is not None and summary.steps.decode == STEPS
    assert summary.per_step is not None
    assert summary.per_step.kernels == OPS_PER_STEP
    assert summary.per_step.busy_us == OPS_PER_STEP * 3.0
    assert summary.threads[0].exclusive_us <= summary.window_us
    assert peak < PEAK_BOUND_BYTES, f"peak {peak / 2**20:.1f} MiB in {elapsed:.1f} s"
