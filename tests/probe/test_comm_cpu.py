"""The CPU's rates: measured for real (quickly), by thread count, and where they land."""

from __future__ import annotations

import pytest

import servelab.probe.collect as collect
from servelab.core.units import MIB
from servelab.probe.collect import CPU_ONLY, run_probe
from servelab.probe.comm.cpu import (
    CpuPlan,
    cpu_thread_counts,
    last_level_cache_bytes,
    measure_cpu,
    measure_cpu_in_child,
)
from servelab.probe.comm.results import CommResults, CpuRates
from servelab.probe.report import ProbeReport
from servelab.report.probe_rows import comm_tables
from tests.ci import require_module

_TINY_PLAN = CpuPlan(
    min_copy_bytes=8 * MIB,
    copy_iterations=1,
    copy_repeats=2,
    matmul_mnk=256,
    matmul_iterations=1,
    matmul_repeats=2,
    bf16=True,
    launch_repeats=2,
)


def test_the_real_measurement_is_positive_and_records_its_thread_count():
    torch = require_module("torch")
    before = torch.get_num_threads()
    rates = measure_cpu([1], plan=_TINY_PLAN)
    assert torch.get_num_threads() == before  # restored
    assert rates.errors == {}
    assert rates.torch_threads == before and rates.cores >= 1
    [one] = rates.by_threads
    assert one.threads == 1 and rates.at(1) is one and rates.at(2) is None
    assert one.memory_copy.device == "cpu" and one.memory_copy.bandwidth_gb_s > 0
    assert one.memory_copy.buffer_bytes >= 8 * MIB
    assert one.memory_copy.bytes_moved == 2 * one.memory_copy.buffer_bytes
    assert {m.dtype for m in one.matmul} == {"fp32", "bf16"}
    assert all(m.tflop_s > 0 and m.datasheet_tflop_s is None for m in one.matmul)
    assert one.launch.chain_verified and one.launch.eager_us_per_kernel > 0
    assert one.launch.graph_us_per_kernel is None
    assert rates.duration_s > 0
    # It travels in probe.json's comm section and survives the round trip.
    comm = CommResults(cpu=rates)
    assert CommResults.model_validate_json(comm.model_dump_json()) == comm


def test_thread_counts_are_half_all_and_the_users():
    assert cpu_thread_counts(8, {}) == [4, 8]
    assert cpu_thread_counts(2, {"OMP_NUM_THREADS": "1"}) == [1, 2]
    assert cpu_thread_counts(16, {"OMP_NUM_THREADS": "6"}) == [6, 8, 16]
    assert cpu_thread_counts(1, {"OMP_NUM_THREADS": "bogus"}) == [1]


def test_the_last_level_cache_is_the_largest_listed(tmp_path):
    base = tmp_path / "sys/devices/system/cpu/cpu0/cache"
    for index, size in (("index0", "48K"), ("index2", "2048K"), ("index3", "32768K")):
        (base / index).mkdir(parents=True)
        (base / index / "size").write_text(size + "\n")
    assert last_level_cache_bytes(tmp_path) == 32 * MIB
    assert last_level_cache_bytes(tmp_path / "nothing") is None


def test_a_failing_child_is_an_error_not_an_exception(monkeypatch):
    monkeypatch.setattr("sys.executable", "/nonexistent/python")
    rates = measure_cpu_in_child([1])
    assert rates.by_threads == [] and "cpu" in rates.errors


def test_run_probe_takes_the_cpu_rates_without_comm(monkeypatch):
    asked: list[object] = []

    def fake(threads: object, *, quick: bool) -> CpuRates:
        asked.append((threads, quick))
        return CpuRates(cores=2, torch_threads=2)

    monkeypatch.setattr("servelab.probe.comm.cpu.measure_cpu_in_child", fake)
    report = run_probe(cuda=False, cpu_rates=True, cpu_threads=[1])
    assert asked == [([1], True)]
    assert report.comm is not None and report.comm.cpu == CpuRates(cores=2, torch_threads=2)
    assert report.comm.skipped == {"gpu": CPU_ONLY}
    assert not [v for v in report.verdicts if v.code.startswith("comm")]
    assert ProbeReport.model_validate_json(report.model_dump_json(by_alias=True)) == report
    assert collect.run_probe(cuda=False).comm is None  # off unless asked


def test_the_probe_tables_show_the_cpu_by_thread_count():
    require_module("torch")
    rates = measure_cpu([1], plan=_TINY_PLAN)
    rates.errors["4"] = "RuntimeError: boom"
    [table] = comm_tables(CommResults(cpu=rates))
    assert table.header == [
        "torch threads",
        "memory copy",
        "fp32 matmul",
        "bf16 matmul",
        "op dispatch",
    ]
    one, failed = table.rows
    assert one[0] == "1" and one[1].endswith("GB/s") and "GFLOP/s (256³)" in one[2]
    assert one[4].endswith("µs")
    assert failed[:2] == ["4", "failed: RuntimeError: boom"]
    assert f"{rates.cores} cores" in table.title and "MiB" in table.title


@pytest.mark.slow
def test_the_child_measures_for_real():
    rates = measure_cpu_in_child([1])
    assert rates.errors == {}
    assert rates.at(1) is not None and rates.at(1).matmul[0].tflop_s > 0  # type: ignore[union-attr]
