"""The report's plots: the series each plot is built from, and what rendering gives."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import time
import warnings
from typing import Any

import numpy as np
import pytest

from servelab.bench.cost import level_cost
from servelab.bench.cost_results import Price
from servelab.bench.metrics import itl_ns
from servelab.bench.prefix import PrefixCacheLevel
from servelab.bench.records import ErrorKind, RequestRecord
from servelab.bench.results import LevelSummary
from servelab.report.plots import (
    MAX_POINTS,
    PLOT_KEYS,
    Plot,
    RunPlotInput,
    build_plots,
    itl_ms,
    level_windows,
    pareto_frontier,
    render_png,
    render_svg,
    weighted_percentiles,
)
from servelab.report.plots._style import PALETTE
from tests.diagnose.builders import level

MS = 1_000_000
S = 1_000_000_000


def record(
    level_index: int,
    t_send_ns: int,
    offsets_ms: list[float],
    *,
    tokens: list[int] | None = None,
    ok: bool = True,
    warmup: bool = False,
    t_end_ns: int | None = None,
) -> dict[str, Any]:
    """A requests.jsonl row: chunk offsets in ms after the send."""
    offsets = [round(ms * MS) for ms in offsets_ms]
    end = t_end_ns if t_end_ns is not None else t_send_ns + (offsets[-1] if offsets else 0)
    return RequestRecord(
        index=0,
        level=level_index,
        warmup=warmup,
        worker=0,
        t_send_ns=t_send_ns,
        t_scheduled_ns=t_send_ns,
        t_end_ns=end,
        ok=ok,
        max_tokens=16,
        chunk_offsets_ns=offsets,
        chunk_tokens=tokens,
        output_tokens=sum(tokens) if tokens is not None else len(offsets),
        error_kind=None if ok else ErrorKind.HTTP,
    ).to_json()


def sweep(*concurrencies: int, tpot_ms: float = 10.0) -> list[LevelSummary]:
    """Closed-loop levels whose throughput grows with concurrency."""
    return [
        level(i, c, total_tps=100.0 * c, tpot_ms=tpot_ms * (1 + i), ttft_ms=50.0 * (1 + i))
        for i, c in enumerate(concurrencies)
    ]


def unstreamed(summary: LevelSummary) -> LevelSummary:
    """The level without TTFT and TPOT statistics, as when nothing was streamed."""
    stats = {
        f"{stat}_{metric}_ms": None for stat in ("median", "p99") for metric in ("ttft", "tpot")
    }
    return summary.model_copy(update=stats)


def run(label: str = "run", **given: Any) -> RunPlotInput:
    values: dict[str, Any] = {
        "levels": sweep(1, 4, 16),
        "records": [],
        "telemetry_rows": [],
        "metrics_rows": [],
        **given,
    }
    return RunPlotInput(label=label, **values)


def plot_of(key: str, *runs: RunPlotInput) -> Plot:
    return next(plot for plot in build_plots(runs) if plot.key == key)


def gpu_row(tick: int, gpu: int, t_ns: int, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"kind": "gpu", "t_ns": t_ns, "tick": tick, "gpu": gpu}
    defaults = {"power_w": None, "power_limit_w": None, "util_pct": None, "mem_util_pct": None}
    return {**row, **defaults, **values}


# -- the sweep plots -----------------------------------------------------------------------


def test_every_plot_comes_back_in_order_whatever_is_missing():
    plots = build_plots([run()])
    assert [plot.key for plot in plots] == list(PLOT_KEYS)
    assert all(plot.title and plot.caption for plot in plots)


def test_throughput_lines_follow_the_levels_sorted_by_concurrency():
    levels = sweep(1, 4, 16)
    plot = plot_of("throughput", run(levels=list(reversed(levels))))
    total = plot.line("total tok/s")
    assert total.x == (1.0, 4.0, 16.0)
    assert total.y == pytest.approx((100.0, 400.0, 1600.0))
    output = plot.line("output tok/s")
    assert output.y == pytest.approx(tuple(s.output_throughput for s in levels))
    assert plot.panels[0].x_scale == "log2"
    assert plot.missing is None


def test_the_ceiling_is_the_models_value_at_each_concurrency_where_it_gives_one():
    def ceiling(concurrency: int) -> float | None:
        return None if concurrency == 16 else 1000.0 * concurrency

    plot = plot_of("throughput", run(ceiling_total_tok_s=ceiling))
    line = plot.line("model ceiling (total tok/s)")
    assert (line.x, line.y, line.role) == ((1.0, 4.0), (1000.0, 4000.0), "ceiling")
    assert "ceiling" in plot.caption
    assert plot.notes == ()


def test_throughput_goes_log_when_a_far_ceiling_would_flatten_the_measured_curve():
    near = plot_of("throughput", run(levels=sweep(1, 4), ceiling_total_tok_s=lambda c: 150.0 * c))
    assert (near.panels[0].y_scale, near.panels[0].y_min) == ("linear", 0)
    # measured 100-400 tok/s against a ceiling of 100,000 per stream: 1000x apart
    far = plot_of("throughput", run(levels=sweep(1, 4), ceiling_total_tok_s=lambda c: 1e5 * c))
    assert (far.panels[0].y_scale, far.panels[0].y_min) == ("log", None)


def test_without_a_model_there_is_no_ceiling_and_a_note_says_so():
    plot = plot_of("throughput", run())
    assert all(line.role != "ceiling" for line in plot.lines())
    assert plot.notes == ("run: no model ceiling (the run has no analytic model)",)
    assert "dashed" not in plot.caption
    assert plot.missing is None


def test_an_open_loop_sweep_is_plotted_against_its_request_rate():
    rates = [
        level(i, 1, total_tps=50.0 * rate, tpot_ms=10, ttft_ms=40).model_copy(
            update={"load_mode": "request_rate", "max_concurrency": None, "request_rate": rate}
        )
        for i, rate in enumerate((2.0, 0.5, 8.0))
    ]
    plot = plot_of("throughput", run(levels=rates, ceiling_total_tok_s=lambda c: 1e6))
    assert plot.line("total tok/s").x == (0.5, 2.0, 8.0)
    assert plot.panels[0].x_label == "request rate (requests/s)"
    assert plot.title == "Throughput by request rate"
    assert "drawn against concurrency only" in plot.notes[0]
    closed = run("closed")
    mixed = plot_of("throughput", closed, run("open", levels=rates))
    assert {line.run for line in mixed.lines()} == {"closed"}
    assert "open: 3 open-loop level(s) left out; x is concurrency" in mixed.notes


def test_latency_has_a_panel_per_metric_with_median_and_p99():
    levels = [
        level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20, p99_ttft_ms=30, p99_tpot_ms=12),
        level(1, 8, total_tps=800, tpot_ms=20, ttft_ms=900, p99_ttft_ms=2000, p99_tpot_ms=25),
        unstreamed(level(2, 64, total_tps=900, tpot_ms=10, ttft_ms=20)),
    ]
    plot = plot_of("latency", run(levels=levels))
    assert [panel.name for panel in plot.panels] == ["ttft", "tpot"]
    assert plot.line("TTFT p50").y == (20.0, 900.0)
    assert plot.line("TTFT p99").x == (1.0, 8.0)
    assert plot.line("TPOT p99").y == (12.0, 25.0)
    ttft, tpot = plot.panels
    assert (ttft.y_scale, tpot.y_scale) == ("log", "linear")  # 20 to 2000 ms spans 100x


def test_latency_is_missing_when_no_level_has_a_statistic():
    levels = [unstreamed(level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20))]
    plot = plot_of("latency", run(levels=levels))
    assert plot.missing is not None
    assert plot.missing.startswith("no latency statistics")
    with pytest.raises(ValueError, match="no data"):
        render_svg(plot)
    with pytest.raises(ValueError, match="no data"):
        render_png(plot)


def test_pareto_frontier_on_a_hand_computed_case():
    points = [
        (100.0, 50.0),  # 0 on the frontier
        (200.0, 40.0),  # 1 on the frontier
        (150.0, 30.0),  # 2 dominated by 1
        (300.0, 10.0),  # 3 on the frontier
        (250.0, 10.0),  # 4 dominated by 3: as good on y, better on x
        (100.0, 50.0),  # 5 equal to 0: neither dominates the other
        (90.0, 50.0),  # 6 dominated by 0
    ]
    assert pareto_frontier(points) == (0, 5, 1, 3)
    assert pareto_frontier([]) == ()


def test_pareto_points_are_tok_s_per_gpu_against_1000_over_tpot():
    levels = [
        level(0, 1, total_tps=800, tpot_ms=10, ttft_ms=20),  # (100, 100)
        level(1, 8, total_tps=4000, tpot_ms=20, ttft_ms=20),  # (500, 50)
        level(2, 16, total_tps=3200, tpot_ms=40, ttft_ms=20),  # (400, 25): dominated
        level(3, 32, total_tps=6400, tpot_ms=50, ttft_ms=20),  # (800, 20)
    ]
    plot = plot_of("pareto", run(levels=levels, gpu_count=8))
    points = plot.line("levels")
    assert points.x == pytest.approx((100.0, 400.0, 500.0, 800.0))
    assert points.y == pytest.approx((100.0, 25.0, 50.0, 20.0))
    assert points.point_labels == ("1", "16", "8", "32")
    frontier = plot.line("Pareto frontier")
    assert frontier.x == pytest.approx((100.0, 500.0, 800.0))
    assert frontier.y == pytest.approx((100.0, 50.0, 20.0))
    assert plot.notes == ()
    assert "1000 / median TPOT" in plot.caption


def test_pareto_counts_one_gpu_when_it_is_not_told_and_says_so():
    plot = plot_of("pareto", run(levels=[level(0, 1, total_tps=800, tpot_ms=10, ttft_ms=20)]))
    assert plot.line("levels").x == (800.0,)
    assert plot.notes == ("run: the GPUs serving it are not known; counted as 1",)


PRICE = Price(
    basis="machine_hour",
    usd_per_gpu_hour=None,
    usd_per_machine_hour=36.0,
    gpus=None,
    gpus_source=None,
    price_source="test",
    usd_per_hour=36.0,
)
"""$36 an hour, $0.01 a second: $10 per million tokens at 1,000 tok/s."""


def test_cost_points_are_usd_per_million_against_1000_over_tpot_cheaper_is_better():
    levels = [
        level(0, 1, total_tps=1000, tpot_ms=10, ttft_ms=20),  # ($10, 100)
        level(1, 8, total_tps=4000, tpot_ms=20, ttft_ms=20),  # ($2.5, 50)
        level(2, 16, total_tps=2000, tpot_ms=40, ttft_ms=20),  # ($5, 25): dominated
        level(3, 32, total_tps=10000, tpot_ms=50, ttft_ms=20),  # ($1, 20)
    ]
    priced = [lv.model_copy(update={"cost": level_cost(lv, PRICE)}) for lv in levels]
    plot = plot_of("cost", run(levels=priced))
    points = plot.line("levels")
    assert points.x == pytest.approx((1.0, 2.5, 5.0, 10.0))
    assert points.y == pytest.approx((20.0, 50.0, 25.0, 100.0))
    assert points.point_labels == ("32", "8", "16", "1")
    frontier = plot.line("Pareto frontier")
    assert frontier.x == pytest.approx((1.0, 2.5, 10.0))
    assert frontier.y == pytest.approx((20.0, 50.0, 100.0))
    unpriced = plot_of("cost", run(levels=levels))
    assert unpriced.missing == "no price given (--gpu-hour-price or --machine-hour-price)"


def test_gpu_count_must_be_positive():
    with pytest.raises(ValueError, match="gpu_count"):
        run(gpu_count=0)


# -- the distributions ---------------------------------------------------------------------


def test_itl_counts_a_k_token_chunk_k_times_as_gap_over_k():
    # Gaps of 20 ms before a 1-token chunk and 30 ms before a 3-token chunk.
    levels, values, weights = itl_ms([record(0, 0, [50, 70, 100], tokens=[1, 1, 3])])
    assert values.tolist() == pytest.approx([20.0, 10.0])
    assert weights.tolist() == [1, 3]
    assert levels.tolist() == [0, 0]
    plot = plot_of(
        "itl_distribution",
        run(levels=sweep(1), records=[record(0, 0, [50, 70, 100], tokens=[1, 1, 3])]),
    )
    (box,) = plot.boxes()
    # The expanded values are [10, 10, 10, 20]: three of 10 ms for the 3-token chunk.
    assert (box.count, box.p25, box.p50, box.p75) == (4, 10.0, 10.0, pytest.approx(12.5))
    assert box.mean == pytest.approx(12.5)
    assert box.p99 == pytest.approx(np.percentile([10, 10, 10, 20], 99))


def test_a_chunk_of_no_tokens_passes_its_gap_on_and_none_means_one_each():
    _, values, weights = itl_ms([record(0, 0, [0, 10, 20, 40], tokens=[1, 0, 2, 1])])
    assert values.tolist() == pytest.approx([10.0, 20.0])  # (10 + 10) / 2, then 20
    assert weights.tolist() == [2, 1]
    _, values, weights = itl_ms([record(0, 0, [5, 8, 20])])
    assert values.tolist() == pytest.approx([3.0, 12.0])
    assert weights.tolist() == [1, 1]


def test_itl_agrees_with_the_metrics_definition_on_many_records():
    rng = np.random.default_rng(7)
    records = []
    for i in range(200):
        n = int(rng.integers(1, 20))
        offsets = np.cumsum(rng.integers(0, 5 * MS, n)).tolist()
        tokens = rng.integers(0, 4, n).tolist() if i % 2 else None
        records.append(
            RequestRecord(
                index=i,
                level=i % 3,
                warmup=False,
                worker=0,
                t_send_ns=0,
                t_scheduled_ns=0,
                t_end_ns=offsets[-1],
                ok=True,
                max_tokens=n,
                chunk_offsets_ns=offsets,
                chunk_tokens=tokens,
            )
        )
    expected = [(r.level, gap / MS, k) for r in records for gap, k in itl_ns(r)]
    levels, values, weights = itl_ms([r.to_json() for r in records])
    assert levels.tolist() == [lv for lv, _, _ in expected]
    assert values.tolist() == pytest.approx([v for _, v, _ in expected])
    assert weights.tolist() == [k for _, _, k in expected]


def test_weighted_percentiles_equal_numpys_on_the_expanded_values():
    rng = np.random.default_rng(3)
    values = rng.exponential(10.0, 50)
    weights = rng.integers(1, 6, 50)
    expanded = np.repeat(values, weights)
    qs = [0, 1, 25, 50, 75, 99, 100]
    assert weighted_percentiles(values, weights, qs) == pytest.approx(np.percentile(expanded, qs))


def test_ttft_boxes_use_completed_measured_requests_of_each_level():
    records = [
        record(0, 0, [10, 20]),
        record(0, 0, [30, 40]),
        record(0, 0, [1, 2], warmup=True),  # left out
        record(0, 0, [2, 3], ok=False),  # left out
        record(1, 0, [100, 110]),
        record(1, 0, []),  # not streamed: no TTFT
    ]
    plot = plot_of("ttft_distribution", run(levels=sweep(2, 8), records=records))
    first, second = plot.boxes()
    assert (first.category, first.count, first.p1, first.p50) == (
        "2",
        2,
        pytest.approx(np.percentile([10, 30], 1)),
        20.0,
    )
    assert (second.category, second.count, second.p50) == ("8", 1, 100.0)
    assert plot.panels[0].categories == ("2", "8")


def test_distributions_are_missing_without_records():
    plots = {plot.key: plot for plot in build_plots([run()])}
    assert plots["ttft_distribution"].missing == (
        "no TTFT: no completed request streamed text (requests.jsonl has none)"
    )
    itl = plots["itl_distribution"].missing
    assert itl == "no ITL: no completed request streamed two or more text chunks"


# -- the timelines -------------------------------------------------------------------------


def test_level_windows_span_first_send_to_last_end_without_warmup():
    records = [
        record(0, 5 * S, [10], t_end_ns=6 * S),
        record(0, 4 * S, [10], t_end_ns=7 * S, ok=False),  # failed: its load counts
        record(0, 1 * S, [10], t_end_ns=9 * S, warmup=True),  # warm-up: not
        record(1, 8 * S, [10], t_end_ns=10 * S),
    ]
    assert level_windows(records) == {0: (4 * S, 7 * S), 1: (8 * S, 10 * S)}


def test_gpu_timeline_points_from_hand_made_rows():
    origin = 10 * S
    rows = [
        {"kind": "start", "t_ns": 0, "gpus": []},
        gpu_row(0, 0, origin + 1 * S, power_w=100.0, power_limit_w=200.0, util_pct=40),
        gpu_row(0, 1, origin + 1 * S + 2 * MS, power_w=300.0, power_limit_w=600.0, util_pct=60),
        gpu_row(1, 0, origin + 2 * S, power_w=None, power_limit_w=200.0, util_pct=80),
        gpu_row(1, 1, origin + 2 * S + 2 * MS, power_w=150.0, power_limit_w=600.0),
        {"kind": "gpm", "t_ns": origin + 1 * S, "gpu": 0, "sm_util_pct": 20.0},
        {"kind": "gpm", "t_ns": origin + 1 * S + MS, "gpu": 1, "sm_util_pct": 40.0},
        {"kind": "gpm", "t_ns": origin + 3 * S, "gpu": 0, "sm_util_pct": 70.0},
        {"kind": "pcie", "t_ns": origin + 3 * S, "gpu": 0, "tx_kb_s": 1, "rx_kb_s": 1},
    ]
    records = [
        record(0, origin, [10], t_end_ns=origin + 2 * S),
        record(1, origin + 2 * S, [10], t_end_ns=origin + 4 * S),
    ]
    plot = plot_of("gpu_timeline", run(levels=sweep(4, 8), records=records, telemetry_rows=rows))
    power = plot.line("power (% of limit)")
    # Tick 0: (100 + 300) W of (200 + 600) W; tick 1: GPU 1 alone, 150 of 600 W.
    assert power.y == pytest.approx((50.0, 25.0))
    assert power.x == pytest.approx((1.001, 2.001))
    util = plot.line("GPU utilization (NVML)")
    assert util.y == pytest.approx((50.0, 80.0))
    sm = plot.line("SM activity (GPM)")
    assert sm.y == pytest.approx((30.0, 70.0))
    assert sm.x == pytest.approx((1.0005, 3.0))
    assert [panel.name for panel in plot.panels] == ["power", "util", "sm"]
    assert [(b.label, b.start_s, b.end_s) for b in plot.bands] == [
        ("c=4", 0.0, 2.0),
        ("c=8", 2.0, 4.0),
    ]
    assert plot.missing is None


def test_a_long_timeline_is_averaged_down_to_max_points():
    ticks = 5 * MAX_POINTS + 3
    rows = [
        gpu_row(t, 0, t * 100 * MS, power_w=float(t % 2) * 100, power_limit_w=100.0, util_pct=50)
        for t in range(ticks)
    ]
    plot = plot_of(
        "gpu_timeline",
        run(records=[record(0, 0, [1], t_end_ns=ticks * 100 * MS)], telemetry_rows=rows),
    )
    power = plot.line("power (% of limit)")
    assert len(power.x) <= MAX_POINTS
    assert np.mean(power.y) == pytest.approx(50.0, abs=0.5)
    assert list(power.x) == sorted(power.x)


def test_engine_timeline_from_metrics_rows():
    rows = [
        {"kind": "start", "t_ns": 0, "url": "http://127.0.0.1:8000/metrics"},
        {"kind": "metrics", "t_ns": 2 * S, "running": 64.0, "queued": 3.0, "kv_usage": 0.5},
        {"kind": "error", "t_ns": 3 * S, "message": "HTTP 503"},
        {"kind": "metrics", "t_ns": 4 * S, "running": 64.0, "queued": None, "kv_usage": 0.9},
    ]
    plot = plot_of(
        "engine_timeline",
        run(records=[record(0, 1 * S, [5], t_end_ns=5 * S)], metrics_rows=rows),
    )
    assert plot.line("running").x == (1.0, 3.0)
    assert plot.line("running").y == (64.0, 64.0)
    assert plot.line("queued").y == (3.0,)
    assert plot.line("queued").role == "queue"
    assert plot.line("KV cache usage").y == pytest.approx((50.0, 90.0))
    assert [(b.label, b.start_s, b.end_s) for b in plot.bands] == [("c=1", 0.0, 4.0)]


def test_missing_telemetry_says_why_in_one_line():
    plots = {plot.key: plot for plot in build_plots([run(records=[record(0, 0, [1, 2])])])}
    assert plots["gpu_timeline"].missing == "no GPU telemetry: the run sampled no GPU (NVML)"
    assert plots["engine_timeline"].missing == (
        "no engine metrics: the run scraped no /metrics (transformers serve has none)"
    )
    reason = "HTTP 404 from http://127.0.0.1:8000/metrics (transformers serve has none)"
    unavailable = run(
        records=[record(0, 0, [1])],
        metrics_rows=[{"kind": "unavailable", "t_ns": 1, "reason": reason}],
    )
    assert plot_of("engine_timeline", unavailable).missing == f"no engine metrics: {reason}"


def test_a_run_without_telemetry_beside_one_with_it_gets_a_note():
    rows = [gpu_row(0, 0, S, power_w=50.0, power_limit_w=100.0, util_pct=10)]
    with_gpu = run("gpu", records=[record(0, 0, [1], t_end_ns=2 * S)], telemetry_rows=rows)
    cpu = run("cpu", records=[record(0, 0, [1])])
    plot = plot_of("gpu_timeline", with_gpu, cpu)
    assert plot.missing is None
    assert {line.run for line in plot.lines()} == {"gpu"}
    assert plot.notes == ("cpu: no GPU telemetry: the run sampled no GPU (NVML)",)


def test_runs_with_one_label_are_told_apart():
    plots = build_plots([run("same"), run("same")])
    assert all(plot.runs == ("same", "same (2)") for plot in plots)
    assert {line.run for line in plots[0].lines()} == {"same", "same (2)"}


# -- rendering -----------------------------------------------------------------------------


def full_run(label: str = "run", levels: int = 3, per_level: int = 20) -> RunPlotInput:
    """A run with every kind of data, so every plot renders."""
    rng = np.random.default_rng(1)
    records, gpu, metrics = [], [], []
    t = 0
    for i in range(levels):
        for j in range(per_level):
            offsets = np.cumsum(rng.exponential(10.0, 8)).tolist()
            records.append(record(i, t + j * 10 * MS, offsets))
        t += per_level * 10 * MS + S
    for tick in range(t // (100 * MS)):
        gpu.append(gpu_row(tick, 0, tick * 100 * MS, power_w=200.0, power_limit_w=600.0))
        gpu[-1]["util_pct"] = 90
    for s in range(t // S + 1):
        metrics.append({"kind": "metrics", "t_ns": s * S, "running": 4.0, "queued": 0.0})
    return RunPlotInput(
        label=label,
        levels=[
            level.model_copy(
                update={
                    "prefix_cache": _cache(0.6, 0.5 - 0.04 * level.level),
                    "cost": level_cost(level, PRICE),
                }
            )
            for level in sweep(*[2**i for i in range(levels)])
        ],
        records=records,
        telemetry_rows=gpu,
        metrics_rows=metrics,
        gpu_count=2,
        ceiling_total_tok_s=lambda c: 500.0 * c,
    )


@pytest.fixture(scope="module")
def rendered() -> dict[str, tuple[str, bytes]]:
    plots = build_plots([full_run(), full_run("<script>alert(1)</script> $\\frac$")])
    assert [plot.key for plot in plots if plot.missing] == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a legend too wide collapses the layout, with a warning
        return {plot.key: (render_svg(plot), render_png(plot)) for plot in plots}


def test_svg_is_one_inlineable_element(rendered):
    for svg, _ in rendered.values():
        assert svg.startswith("<svg")
        assert svg.rstrip().endswith("</svg>")
        assert "<?xml" not in svg
        assert "DOCTYPE" not in svg
        assert "<script" not in svg.lower()
        assert not re.search(r"<style[^>]*>\s*\*", svg)  # the default rule is scoped


def test_svg_refers_only_to_its_own_ids(rendered):
    for svg, _ in rendered.values():
        ids = set(re.findall(r'\bid="([^"]+)"', svg))
        refs = re.findall(r'href="([^"]*)"', svg) + re.findall(r"url\(([^)]*)\)", svg)
        assert refs
        assert all(ref.startswith("#") and ref[1:] in ids for ref in refs)


def test_two_plots_share_no_id(rendered):
    seen: dict[str, str] = {}
    for key, (svg, _) in rendered.items():
        ids = re.findall(r'\bid="([^"]+)"', svg)
        assert len(ids) == len(set(ids))
        for element_id in ids:
            assert element_id not in seen, f"{element_id} is in {seen.get(element_id)} and {key}"
            seen[element_id] = key


def test_a_run_label_is_escaped_text(rendered):
    svg, _ = rendered["throughput"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt; $\\frac$: total tok/s" in svg


def test_each_run_keeps_its_colour_in_every_plot(rendered):
    first, second = PALETTE[0].lower(), PALETTE[1].lower()
    for svg, _ in rendered.values():
        assert first in svg
        assert second in svg


def test_png_is_a_png_800_px_wide(rendered):
    for _, png in rendered.values():
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        width, _height = struct.unpack(">II", png[16:24])
        assert width == 800


def test_the_same_plot_renders_to_the_same_bytes():
    first = build_plots([full_run()])
    second = build_plots([full_run()])
    assert first == second
    for a, b in zip(first, second, strict=True):
        assert render_svg(a) == render_svg(b)
        assert render_png(a) == render_png(b)


def test_importing_the_plots_loads_no_matplotlib():
    code = "import sys, servelab.report.plots; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.timing
def test_a_large_run_builds_and_renders_in_seconds():
    rng = np.random.default_rng(0)
    records = []
    for i in range(10):
        for j in range(500):
            offsets = np.cumsum(rng.exponential(10.0, 64)).tolist()
            records.append(record(i, (i * 600 + j) * 10 * MS, offsets))
    base = full_run(levels=10, per_level=5)
    big = RunPlotInput(
        label="big",
        levels=base.levels,
        records=records,
        telemetry_rows=base.telemetry_rows,
        metrics_rows=base.metrics_rows,
        gpu_count=8,
        ceiling_total_tok_s=base.ceiling_total_tok_s,
    )
    start = time.perf_counter()
    plots = build_plots([big])
    built = time.perf_counter() - start
    for plot in plots:
        render_svg(plot)
        render_png(plot)
    rendered_s = time.perf_counter() - start - built
    itl = plots[PLOT_KEYS.index("itl_distribution")]
    assert itl.boxes()[0].count == 500 * 63
    assert built < 2.0
    assert rendered_s < 10.0


def _cache(ideal: float, hit: float | None) -> PrefixCacheLevel:
    return PrefixCacheLevel(
        block_tokens=16,
        block_source="test",
        prompt_tokens=1000,
        shared_tokens=int(1000 * ideal),
        shareable_tokens=int(1000 * ideal),
        ideal_hit_rate=ideal,
        queries=1000.0 if hit is not None else None,
        hits=1000 * hit if hit is not None else None,
        hit_rate=hit,
    )


def test_the_prefix_cache_plot_draws_the_measured_rate_under_its_ideal():
    levels = [
        level.model_copy(update={"prefix_cache": _cache(0.75, hit)})
        for level, hit in zip(sweep(1, 4), (0.74, 0.2), strict=True)
    ]
    plot = plot_of("prefix_cache", run(levels=levels))
    assert plot.missing is None
    measured = plot.line("measured hit rate")
    ideal = plot.line("ideal hit rate")
    assert measured.y == pytest.approx((74.0, 20.0)) and ideal.y == pytest.approx((75.0, 75.0))
    assert ideal.role == "ceiling" and plot.panels[0].y_max == 100


def test_no_prefix_to_reuse_and_no_counters_draw_no_prefix_cache_plot():
    levels = [lv.model_copy(update={"prefix_cache": _cache(0.0, None)}) for lv in sweep(1, 4)]
    assert plot_of("prefix_cache", run(levels=levels)).missing is not None
    assert plot_of("prefix_cache", run()).missing is not None
