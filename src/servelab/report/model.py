"""Rich rendering of the performance model: summary, step breakdown, throughput, comparison."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table

from servelab.core.units import BYTES_PER_GB, GIB, KIB, MS_PER_S
from servelab.model.results import KernelFloor, ModelComparison, ModelReport, StepBreakdown

__all__ = ["render_model_comparison", "render_model_report"]


def render_model_report(report: ModelReport) -> RenderableType:
    """One deployment: summary, the step at the asked batch, throughput, calibration, notes."""
    parts: list[RenderableType] = [
        _summary(report),
        _floors(report),
        _breakdown(report.step, title=_step_title(report.step)),
        _throughput(report),
    ]
    if report.calibration:
        parts.append(_calibration(report))
    parts.append(_assumptions(report))
    return Group(*parts)


def render_model_comparison(comparison: ModelComparison) -> RenderableType:
    """Layouts side by side, one column each."""
    reports = comparison.reports
    first = reports[0]
    table = Table(
        title=f"{escape(first.model)} on {first.gpu}: layouts compared", title_justify="left"
    )
    table.add_column("")
    for report in reports:
        table.add_column(escape(f"{report.gpus}x {report.layout}"), justify="right")
    rows: list[tuple[str, list[str]]] = [
        ("weights per GPU", [f"{r.weight_memory.per_gpu_bytes / GIB:,.1f} GiB" for r in reports]),
        (
            "KV per token per GPU",
            [f"{r.kv.kv_bytes_per_token_per_gpu / KIB:,.1f} KiB" for r in reports],
        ),
        ("KV capacity", [f"{r.kv.capacity_tokens:,} tokens" for r in reports]),
        ("max concurrency", [f"{r.kv.max_concurrency:,}" for r in reports]),
        ("single stream", [f"{r.single_stream_tokens_per_s:,.1f} tok/s" for r in reports]),
        ("  bound by", [r.single_stream.bound for r in reports]),
        ("  kernel floor, graphs", [_ms(r.kernel_floor.graph_floor_s) for r in reports]),
        ("  kernel floor, eager", [_ms(r.kernel_floor.eager_floor_s) for r in reports]),
        (f"step at batch {first.step.batch:g}", [_ms(r.step.step_s) for r in reports]),
        (f"prefill {first.input_len} tokens", [_ms(r.prefill.step_s) for r in reports]),
        ("best total tok/s", [_best(r) for r in reports]),
    ]
    for label, values in rows:
        table.add_row(label, *values)
    return table


def _summary(report: ModelReport) -> Table:
    params, kv, mem = report.params, report.kv, report.weight_memory
    table = Table(
        title=f"{escape(report.model)} on {report.gpus}x {report.gpu}, {report.layout}",
        show_header=False,
        title_justify="left",
        box=None,
        pad_edge=False,
    )
    table.add_column(style="bold")
    table.add_column()
    plan = report.weights
    table.add_row(
        "model",
        f"{escape(report.family)}: {params.total_params / 1e9:,.1f}B parameters, "
        f"{params.active_params / 1e9:,.1f}B active "
        f"({params.active_params_excluding_embeddings / 1e9:,.1f}B without embeddings)",
    )
    table.add_row(
        "formats",
        f"weights {plan.name.value} (attention {plan.attention.value}, "
        f"embeddings and routers {plan.embeddings.value}), KV cache {report.kv_dtype}",
    )
    other = mem.per_gpu_bytes - mem.experts_bytes - mem.attention_bytes
    table.add_row(
        "weights per GPU",
        f"{mem.per_gpu_bytes / GIB:,.1f} GiB (experts {mem.experts_bytes / GIB:,.1f}, "
        f"attention {mem.attention_bytes / GIB:,.1f}, other {other / GIB:,.1f}); "
        f"model {mem.model_bytes / BYTES_PER_GB:,.0f} GB",
    )
    table.add_row(
        "KV per token",
        f"{kv.kv_bytes_per_token / KIB:,.1f} KiB (all layers); "
        f"{kv.kv_bytes_per_token_per_gpu / KIB:,.1f} KiB on each GPU",
    )
    table.add_row(
        "KV capacity",
        f"{kv.capacity_tokens:,} tokens ({kv.kv_pool_bytes_per_gpu / GIB:,.1f} GiB per GPU "
        f"after weights and a {kv.activation_reserve_bytes / GIB:g} GiB reserve)",
    )
    table.add_row(
        "max concurrency",
        f"{kv.max_concurrency:,} requests of {report.input_len} + {report.output_len} tokens",
    )
    single = report.single_stream
    table.add_row(
        "single-stream ceiling",
        f"{report.single_stream_tokens_per_s:,.1f} tok/s ({_ms(single.step_s)} per token at "
        f"context {single.context_tokens:,.0f}, {single.bound}-bound)",
    )
    fill = report.prefill
    table.add_row(
        "prefill",
        f"{_ms(fill.step_s)} for {report.input_len:,} tokens ({fill.tokens_per_s:,.0f} tok/s, "
        f"{fill.bound}-bound)",
    )
    return table


def _floors(report: ModelReport) -> Table:
    """The single stream's roofline beside its kernel floors, each with its source."""
    single, floor = report.single_stream, report.kernel_floor
    table = Table(
        title=f"Single stream: roofline and kernel floor (context {single.context_tokens:,.0f})",
        title_justify="left",
    )
    for name in ("", "ms per token", "tok/s", "from"):
        table.add_column(name, justify="right" if name in ("ms per token", "tok/s") else "left")
    table.add_row(
        "roofline",
        _ms(single.step_s),
        f"{single.tokens_per_s:,.1f}",
        f"{single.bound}-bound: bytes and FLOPs at the GPU's peaks, collectives, "
        f"{report.step_overhead_us:g} us per step",
    )
    table.add_row(
        "kernel floor, CUDA graphs",
        _ms(floor.graph_floor_s),
        f"{floor.graph_tokens_per_s:,.1f}",
        _floor_source(floor, floor.graph_us_per_kernel, "replayed"),
    )
    table.add_row(
        "kernel floor, eager",
        _ms(floor.eager_floor_s),
        f"{floor.eager_tokens_per_s:,.1f}",
        _floor_source(floor, floor.eager_us_per_kernel, "dispatched one by one"),
    )
    table.caption = escape(f"per-kernel latencies: {floor.source}")
    return table


def _floor_source(floor: KernelFloor, us: float, how: str) -> str:
    kernels = floor.kernels
    return escape(
        f"{kernels.per_step:,} {kernels.style} kernels x {us:.1f} us {how}, at least the "
        f"GPU work {_ms(floor.gpu_work_s)}"
    )


def _step_title(step: StepBreakdown) -> str:
    return f"Decode step: batch {step.batch:g}, context {step.context_tokens:,.0f}"


def _breakdown(step: StepBreakdown, *, title: str) -> Table:
    """Where one step's time goes, per GPU along the critical path."""
    table = Table(title=title, title_justify="left")
    table.add_column("part")
    table.add_column("per GPU", justify="right")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    read = step.weight_bytes + step.expert_bytes + step.kv_bytes

    def share_of(seconds: float) -> str:
        return f"{seconds / step.step_s:.0%}" if step.step_s else ""

    def memory_row(label: str, nbytes: float) -> None:
        seconds = step.memory_s * nbytes / read if read else 0.0
        table.add_row(f"  {label}", f"{nbytes / BYTES_PER_GB:,.3f} GB", _ms(seconds), "")

    memory_row("weights (non-expert)", step.weight_bytes)
    if step.distinct_experts_per_layer:
        memory_row(f"experts (~{step.distinct_experts_per_layer:,.1f}/layer)", step.expert_bytes)
    memory_row("KV cache", step.kv_bytes)
    table.add_row("memory", f"{read / BYTES_PER_GB:,.3f} GB", _ms(step.memory_s), "")
    table.add_row("compute", f"{step.flops / 1e12:,.3f} TFLOP", _ms(step.compute_s), "")
    table.add_row(
        f"GPU busy ({'memory' if step.memory_s >= step.compute_s else 'compute'})",
        "",
        _ms(step.gpu_busy_s),
        share_of(step.gpu_busy_s),
    )
    if step.allreduces:
        table.add_row(
            f"all-reduce ({step.allreduces})", "", _ms(step.allreduce_s), share_of(step.allreduce_s)
        )
    if step.alltoall_s:
        table.add_row("all-to-all (EP)", "", _ms(step.alltoall_s), share_of(step.alltoall_s))
    if step.pp_send_s:
        table.add_row("pipeline sends", "", _ms(step.pp_send_s), share_of(step.pp_send_s))
    table.add_row("overhead", "", _ms(step.overhead_s), share_of(step.overhead_s))
    table.add_row("step", f"{step.tokens_per_s:,.0f} tok/s", _ms(step.step_s), "100%", style="bold")
    if step.pp_bubble_fraction:
        table.caption = f"pipeline bubble: {step.pp_bubble_fraction:.0%} of stage time idle"
    return table


def _throughput(report: ModelReport) -> Table:
    table = Table(
        title=f"Throughput ceiling by concurrency ({report.input_len} in, {report.output_len} out)",
        title_justify="left",
    )
    for name in ("concurrency", "TPOT", "output tok/s", "total tok/s", "bound"):
        table.add_column(name, justify="left" if name == "bound" else "right")
    for point in report.throughput:
        table.add_row(
            f"{point.concurrency:,}",
            f"{point.tpot_ms:,.2f} ms",
            f"{point.output_tokens_per_s:,.0f}",
            f"{point.total_tokens_per_s:,.0f}",
            point.bound,
        )
    if not report.throughput:
        table.caption = "no request of this length fits in the KV cache"
    return table


def _calibration(report: ModelReport) -> Table:
    table = Table(title="Calibrated from the probe", title_justify="left")
    for name in ("figure", "datasheet", "used", "how"):
        table.add_column(name, justify="right" if name in ("datasheet", "used") else "left")
    for item in report.calibration:
        old = "" if item.datasheet is None else f"{item.datasheet:,.4g} {item.unit}"
        table.add_row(escape(item.name), old, f"{item.calibrated:,.4g} {item.unit}", item.how)
    return table


def _assumptions(report: ModelReport) -> Table:
    table = Table(title="Assumptions", show_header=False, title_justify="left", box=None)
    table.add_column()
    for note in report.assumptions:
        table.add_row(f"· {escape(note)}")
    return table


def _best(report: ModelReport) -> str:
    if not report.throughput:
        return "-"
    best = max(report.throughput, key=lambda p: p.total_tokens_per_s)
    return f"{best.total_tokens_per_s:,.0f} @ {best.concurrency:,}"


def _ms(seconds: float) -> str:
    return f"{seconds * MS_PER_S:,.3f} ms" if seconds < 0.01 else f"{seconds * MS_PER_S:,.1f} ms"
