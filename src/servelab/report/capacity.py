"""The capacity search as the report and the CLI show it: the answer, its boundary with
the bands, and every level of the search. Pure formatters, no console."""

from __future__ import annotations

import math

from rich.table import Table as RichTable

from servelab.bench.attainment import duration_text, quantile_label
from servelab.bench.capacity_results import CapacityLevel, CapacityResult, SloQuantile
from servelab.bench.capacity_text import load_text
from servelab.report.document import Tone

__all__ = ["capacity_headline", "capacity_table", "render_capacity"]


def capacity_headline(result: CapacityResult) -> list[tuple[Tone, str]]:
    """The answer, then the boundary's two levels with their bands."""
    answer = result.explanation[:1].upper() + result.explanation[1:] + "."
    lines: list[tuple[Tone, str]] = [(_tone(result), answer)]
    sides = [
        f"{_load(result, level)} {_verdict_text(result, level)}"
        for level in (result.held, result.failed)
        if level is not None
    ]
    if sides:
        noise = " Within noise: a repeat could reverse it." if result.within_noise else ""
        lines.append(("plain", "Boundary: " + "; ".join(sides) + "." + noise))
    return lines


def capacity_table(result: CapacityResult) -> tuple[list[str], list[list[str]]]:
    """One row per level of the search, in the order they ran."""
    label = quantile_label(result.attainment)
    metrics = list(result.slo_ms)
    header = ["level", _axis(result), "step", "requests", "met every SLO", "band"]
    for metric in metrics:
        header += [f"{metric.upper()} {label}", "band"]
    header.append("verdict")
    rows = []
    for level in result.levels:
        j = level.judged
        row = [
            str(level.level),
            f"{level.load:g}",
            level.step,
            str(j.requests),
            f"{j.attained:.1%}",
            _share_band(j.attained_lo, j.attained_hi),
        ]
        for q in j.quantiles:
            row += [_ms(q.value_ms), _band(q, drawn=j.attained_lo is not None)]
        verdict = "meets" if j.meets else "fails"
        if j.within_noise:
            verdict += " (within noise)"
        rows.append([*row, verdict])
    return header, rows


def render_capacity(result: CapacityResult) -> RichTable:
    """The search's table for the terminal, its answer as the caption."""
    header, rows = capacity_table(result)
    table = RichTable(title="capacity search", caption=result.explanation)
    for i, name in enumerate(header):
        table.add_column(name, justify="right" if i in (0, 1, 3) else "left")
    for row in rows:
        table.add_row(*row)
    return table


def _tone(result: CapacityResult) -> Tone:
    if result.status == "none":
        return "bad"
    if result.status in ("found", "at_max") and not result.within_noise:
        return "good"
    return "warn"


def _verdict_text(result: CapacityResult, level: CapacityLevel) -> str:
    """'meets: 99.2% of 640 requests met every SLO (band 98.1%–100%), TTFT p99 1.8 s (band
    1.6 s–1.9 s), 2 measurements'."""
    j = level.judged
    q = next(q for q in j.quantiles if q.metric == j.binding)
    band = _share_band(j.attained_lo, j.attained_hi)
    text = (
        f"{'meets' if j.meets else 'fails'}: {j.attained:.1%} of {j.requests} requests met "
        f"every SLO (band {band}), {q.metric.upper()} {quantile_label(result.attainment)} "
        f"{_ms(q.value_ms)} (band {_band(q, drawn=j.attained_lo is not None)})"
    )
    if level.measurements > 1:
        text += f", {level.measurements} measurements pooled"
    return text


def _load(result: CapacityResult, level: CapacityLevel) -> str:
    return load_text(result.mode, level.load)


def _axis(result: CapacityResult) -> str:
    return "concurrency" if result.mode == "concurrency" else "rate req/s"


def _share_band(lo: float | None, hi: float | None) -> str:
    if lo is None or hi is None:
        return "no band"
    return f"{lo:.1%}–{hi:.1%}"


def _band(q: SloQuantile, *, drawn: bool) -> str:
    """A metric's band; its ends are None where infinite once a level's bands are drawn."""
    if not drawn:
        return "no band"
    return f"{_ms(q.band_lo_ms)}–{_ms(q.band_hi_ms)}"


def _ms(value: float | None) -> str:
    return duration_text(math.inf if value is None else value)
