"""The profiled level, in the findings: where the engine's time went in its torch trace.

The top kernels (or CPU ops on a CPU build), the device's busy share of the window as a
strip of busy and idle, per step where the engine marked its steps, and the long gaps with
the host op before each. Absent when the run was not profiled (`--torch-profile`).
"""

from __future__ import annotations

from servelab.report.document import Block, KeyValues, Paragraph, Section, Table
from servelab.trace import TraceSummary

__all__ = ["STRIP_WIDTH", "busy_strip", "profile_section"]

STRIP_WIDTH = 40
TOP = 10


def profile_section(traces: list[TraceSummary]) -> Section | None:
    """One block group per trace file; None without a profile."""
    if not traces:
        return None
    blocks: list[Block] = []
    for trace in traces:
        blocks += _trace_blocks(trace)
    return Section("profile", "Where the time goes (torch profile)", blocks)


def busy_strip(share: float, width: int = STRIP_WIDTH) -> str:
    """'█████░░░░░ 50% busy': the busy share of the window, as text any viewer shows."""
    filled = max(0, min(width, round(share * width)))
    return "█" * filled + "░" * (width - filled) + f" {share:.0%} busy"


def _trace_blocks(trace: TraceSummary) -> list[Block]:
    name = trace.file.rsplit("/", 1)[-1]
    what = "device (kernels, copies)" if trace.device else "CPU ops (a CPU-only trace)"
    facts = [
        ("file", name),
        ("window", f"{trace.window_us / 1000:,.1f} ms"),
        (f"busy: {what}", busy_strip(trace.busy_share)),
    ]
    if trace.device and trace.mean_kernel_us is not None:
        facts.append(("kernels", f"{trace.kernels:,}, {trace.mean_kernel_us:.2f} µs each"))
    if trace.per_step is not None:
        step = trace.per_step
        facts.append(
            (
                f"per step ({step.steps:g} steps)",
                f"{step.window_us / 1000:,.2f} ms, of it {step.busy_us / 1000:,.2f} ms busy",
            )
        )
    gaps = trace.gaps
    facts.append(
        (
            "idle gaps",
            f"{gaps.count:,}, {gaps.total_us / 1000:,.1f} ms in all, "
            f"longest {gaps.longest_us / 1000:,.2f} ms",
        )
    )
    blocks: list[Block] = [KeyValues(facts)]
    rows = [
        [
            op.name[:90],
            op.category,
            f"{op.count:,}",
            f"{op.total_us / 1000:,.3f}",
            f"{op.mean_us:,.2f}",
            f"{op.window_share:.1%}",
        ]
        for op in trace.top_ops[:TOP]
    ]
    if rows:
        blocks.append(
            Table(
                [
                    "kernel" if trace.device else "op",
                    "category",
                    "count",
                    "total ms",
                    "mean µs",
                    "share",
                ],
                rows,
                caption="By exclusive time over the profiled window",
                right=frozenset({2, 3, 4, 5}),
            )
        )
    blocks += [Paragraph(note) for note in trace.notes]
    return blocks
