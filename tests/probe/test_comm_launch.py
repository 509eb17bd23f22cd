"""The kernel launch chain, run for real on the CPU (eager only); CUDA is the GPU machine's."""

from __future__ import annotations

import pytest

from servelab.probe.comm import CommResults, LaunchResult, measure_launch
from servelab.probe.report import ProbeReport
from tests.ci import require_module

torch = require_module("torch")
CPU = torch.device("cpu")


def test_the_cpu_chain_is_eager_only_and_every_op_ran():
    result = measure_launch(CPU, kernels=200, repeats=3)
    assert (result.device, result.kernels, result.elements) == ("cpu", 200, 1024)
    assert 0 < result.eager_min_us_per_kernel <= result.eager_us_per_kernel
    assert result.eager_us_per_kernel <= result.eager_max_us_per_kernel
    assert result.eager_us_per_kernel < 1000  # a tiny add is microseconds, not milliseconds
    assert result.graph_us_per_kernel is None and result.graph_replays == 0
    assert result.chain_verified


def test_a_longer_chain_costs_about_the_same_per_op():
    """Per-op time is what is measured: not a fixed cost spread over the chain."""
    short = min(measure_launch(CPU, kernels=100, repeats=5).eager_us_per_kernel for _ in range(3))
    long = min(measure_launch(CPU, kernels=2000, repeats=5).eager_us_per_kernel for _ in range(3))
    assert long < 3 * short


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        measure_launch(CPU, kernels=0)


def test_the_result_is_part_of_the_probe_document():
    launch = measure_launch(CPU, kernels=50, repeats=2)
    comm = CommResults(launch=[launch])
    assert CommResults.model_validate_json(comm.model_dump_json()) == comm
    assert "launch" in ProbeReport.model_json_schema()["$defs"]["CommResults"]["properties"]
    assert set(LaunchResult.model_fields) >= {"eager_us_per_kernel", "graph_us_per_kernel"}


def test_the_probe_tables_show_both_launch_latencies():
    from servelab.probe.comm.results import CommResults, LaunchResult
    from servelab.report.probe_rows import comm_tables

    launch = LaunchResult(
        device="cuda:0",
        kernels=2000,
        elements=1,
        eager_us_per_kernel=7.04,
        eager_min_us_per_kernel=6.9,
        eager_max_us_per_kernel=7.3,
        graph_us_per_kernel=1.01,
        graph_replays=20,
        chain_verified=True,
    )
    cpu = launch.model_copy(
        update={"device": "cpu", "graph_us_per_kernel": None, "graph_replays": 0}
    )
    (table,) = comm_tables(CommResults(launch=[launch, cpu]))
    assert table.title == "Kernel launch, per kernel"
    assert table.rows == [
        ["cuda:0", "2,000 tiny ops in a chain", "7.04 µs", "1.01 µs"],
        ["cpu", "2,000 tiny ops in a chain", "7.04 µs", ""],
    ]
