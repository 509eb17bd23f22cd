"""Section 4, the results: the sweep table as the CLI prints it, the capacity search's
levels where it ran, the knee, why the sweep ended, and the plots."""

from __future__ import annotations

from collections.abc import Callable

from servelab.bench.capacity_results import CapacityResult
from servelab.bench.knee import find_knee
from servelab.bench.results import LevelSummary
from servelab.core.redact import scrub
from servelab.report.capacity import capacity_table
from servelab.report.cost import COST_COLUMNS, cost_rows, price_text
from servelab.report.document import (
    Block,
    Bullets,
    Code,
    Figure,
    Paragraph,
    Section,
    Table,
    Tone,
)
from servelab.report.inputs import ReportRun
from servelab.report.plots import RunPlotInput, build_plots
from servelab.report.plots._load import short_label
from servelab.report.sections._common import sentence
from servelab.report.tables import sweep_header, sweep_rows

__all__ = ["figures", "plot_input", "results_section"]


def results_section(run: ReportRun, *, plots: bool = True) -> Section:
    summary = run.summary
    levels = summary.levels
    header = sweep_header(levels)
    right = frozenset(range(1, len(header)))
    blocks: list[Block] = [Table(header, sweep_rows(levels), right=right)]
    if any(s.client is not None and s.client.client_bound for s in levels):
        blocks.append(
            Paragraph(
                "* client-bound: the load generator's lag or CPU may have limited it.", "warn"
            )
        )
    if summary.capacity is not None:
        blocks += _capacity(summary.capacity)
    blocks += _cost(run)
    blocks += _prefix_and_turns(levels)
    knee = find_knee(levels)
    blocks.append(Paragraph(sentence(knee.explanation), "info" if knee.found else "plain"))
    if summary.sweep_stop is not None and summary.sweep_stop.reason != "levels":
        blocks.append(Paragraph(f"The sweep ended: {summary.sweep_stop.explanation}."))
    blocks += _what_happened(run)
    notes = list(summary.run.notes) + [n for s in levels for n in s.notes] + run.notes
    if notes:
        blocks.append(Bullets([("plain", n, []) for n in dict.fromkeys(notes)]))
    if plots:
        blocks += figures([plot_input(run)])
    return Section("results", "Results", blocks)


def _capacity(result: CapacityResult) -> list[Block]:
    """The search's levels in order, each verdict with its bands, and the rule."""
    header, rows = capacity_table(result)
    tones: list[Tone] = [
        "warn" if lv.judged.within_noise else "good" if lv.judged.meets else "bad"
        for lv in result.levels
    ]
    return [
        Table(header, rows, caption=result.plan, tones=tones, right=frozenset({0, 1, 3})),
        Paragraph(sentence(result.explanation), "info"),
        Paragraph(
            f"A level meets the SLO when at least {result.attainment:.1%} of its attempted "
            "requests completed within every SLO; bands are the block bootstrap's 95% "
            "(docs/REPORT.md, capacity). A boundary level within noise is measured again "
            "and judged on its measurements pooled."
        ),
    ]


def _cost(run: ReportRun) -> list[Block]:
    """The price, then each level's USD and GPU energy per token; where either is missing,
    the reason, never a blank."""
    summary = run.summary
    blocks: list[Block] = [Paragraph(sentence(f"Price: {price_text(summary.price)}"))]
    costs = [s.cost for s in summary.levels if s.cost is not None]
    measured = any(c.j_per_output_token is not None for c in costs)
    if summary.price is not None or measured:
        blocks.append(
            Table(
                ["level", *COST_COLUMNS],
                cost_rows(summary.levels),
                caption="USD per million tokens: the hour's price / 3600 / the level's tok/s "
                "x 1e6. J per token: the sampled GPUs' energy over the level / its tokens; "
                "total tok/s per MW: total tok/s / (their mean power / 1e6). GPU power only: "
                "not the host, fans or network (docs/METRICS.md, cost and energy).",
                right=frozenset(range(1, len(COST_COLUMNS) + 1)),
            )
        )
    if not measured:
        why = next((c.unavailable["energy"] for c in costs if "energy" in c.unavailable), None)
        blocks.append(Paragraph(sentence(f"Energy per token: not measured: {why or 'no level'}")))
    return blocks


def _prefix_and_turns(levels: list[LevelSummary]) -> list[Block]:
    """The prefix cache per level (ideal against measured), and a conversation's TTFT by
    turn: where the cache changes what a later turn waits."""
    blocks: list[Block] = []
    cached = [(lv, lv.prefix_cache) for lv in levels if lv.prefix_cache is not None]
    if any(c.ideal_hit_rate or c.hit_rate is not None for _, c in cached):
        rows = [
            [
                short_label(lv),
                f"{c.prompt_tokens:,}",
                _percent(c.ideal_hit_rate),
                _percent(c.hit_rate),
                f"{c.block_tokens} ({c.block_source})",
            ]
            for lv, c in cached
        ]
        blocks.append(
            Table(
                ["level", "prompt tokens", "ideal hit rate", "measured", "block"],
                rows,
                caption="Prefix cache: the share of prompt tokens the workload repeats in "
                "whole blocks (ideal) and the share the engine's counters say it served.",
                right=frozenset({1, 2, 3}),
            )
        )
    turned = [lv for lv in levels if lv.turns]
    if turned:
        rows = [
            [
                short_label(lv),
                str(t.turn),
                str(t.completed),
                f"{t.mean_input_tokens:,.0f}" if t.mean_input_tokens is not None else "-",
                f"{t.median_ttft_ms:,.1f}" if t.median_ttft_ms is not None else "-",
                f"{t.p99_ttft_ms:,.1f}" if t.p99_ttft_ms is not None else "-",
            ]
            for lv in turned
            for t in lv.turns or []
        ]
        blocks.append(
            Table(
                ["level", "turn", "completed", "prompt tokens", "TTFT p50 ms", "TTFT p99 ms"],
                rows,
                caption="Conversations by turn: each turn resends the history, so its prompt "
                "grows; a prefix cache keeps a later turn's TTFT near the first's.",
                right=frozenset({1, 2, 3, 4, 5}),
            )
        )
    return blocks


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def figures(inputs: list[RunPlotInput]) -> list[Block]:
    """Each plot with data as a Figure; the others in one list with the reason."""
    plots = build_plots(inputs)
    blocks: list[Block] = [Figure(p) for p in plots if p.missing is None]
    absent = [p for p in plots if p.missing is not None]
    if absent:
        blocks.append(
            Bullets([("plain", f"{p.title}: not drawn, {p.missing}", []) for p in absent])
        )
    return blocks


def plot_input(run: ReportRun, label: str | None = None) -> RunPlotInput:
    return RunPlotInput(
        label=scrub(label or run.name),
        levels=run.summary.levels,
        records=run.records,
        telemetry_rows=run.telemetry_rows,
        metrics_rows=run.metrics_rows,
        gpu_count=run.gpu_count,
        ceiling_total_tok_s=_ceiling(run),
        events=run.events,
    )


def _ceiling(run: ReportRun) -> Callable[[int], float | None] | None:
    """The model's total tok/s at each concurrency, as diagnose computed it."""
    if run.diagnosis is None or not run.diagnosis.ceiling:
        return None
    points = {p.concurrency: p.total_tok_s for p in run.diagnosis.ceiling}
    return points.get


def _what_happened(run: ReportRun) -> list[Block]:
    summary = run.summary
    blocks: list[Block] = []
    if summary.failure:
        blocks.append(Paragraph(f"The run failed: {summary.failure}.", "bad"))
    died = run.events.exit if run.events is not None else None
    if died is not None:
        blocks += [
            Paragraph(
                f"The engine exited during {died.during} with {died.description}; the levels "
                "before it are kept, later levels were not run. Its last log lines:",
                "bad",
            ),
            Code("\n".join(died.log_tail)),
        ]
    return blocks
