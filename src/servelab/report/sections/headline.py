"""The report's first lines: the answer before the evidence.

The capacity under the SLO first where the run searched it (with its boundary's bands),
then the best total throughput and where, the single stream, the knee, the targets met,
the price and what a million tokens cost (at the knee, the capacity, and the cheapest level
meeting the targets and SLOs) with the GPU energy per token, the quality probe's verdicts
where it ran, and the top finding with its first action — what a reader would otherwise
piece together from all six sections.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from servelab.bench.knee import find_knee
from servelab.bench.results import BenchSummary, LevelSummary
from servelab.report.capacity import capacity_headline
from servelab.report.cost import cost_lines, slo_rule
from servelab.report.document import Tone
from servelab.report.inputs import ReportRun
from servelab.report.sections._common import load_text, sentence, tone_of
from servelab.report.sections.quality import quality_line
from servelab.report.targets import Target, evaluate_targets, level_meets

__all__ = ["headline"]


def headline(run: ReportRun, targets: Sequence[Target]) -> list[tuple[Tone, str]]:
    capacity = run.summary.capacity
    lines = capacity_headline(capacity) if capacity is not None else []
    levels = [s for s in run.summary.levels if s.completed != 0]
    if not levels:
        return [*lines, ("bad", "No level completed a request: there is nothing to report yet.")]
    best = max(levels, key=lambda s: s.total_throughput or 0.0)
    total = "-" if best.total_throughput is None else f"{best.total_throughput:,.0f}"
    lines.append(
        (
            "plain",
            f"Best: {total} tok/s total ({best.output_throughput:,.0f} "
            f"output) at {load_text(best)}.",
        )
    )
    single = next((s for s in levels if s.single_stream_tok_s is not None), None)
    if single is not None and single.single_stream_tok_s is not None:
        lines.append(("plain", f"Single stream: {single.single_stream_tok_s:,.1f} tok/s."))
    knee = find_knee(levels)
    lines.append(
        (
            "info" if knee.found else "plain",
            sentence(knee.explanation),
        )
    )
    results = evaluate_targets(targets, levels)
    if results:
        missed = [r.target.text for r in results if not r.met]
        tone: Tone = "bad" if missed else "good"
        text = f"Targets: {len(results) - len(missed)} of {len(results)} met"
        lines.append((tone, text + (f"; not met: {', '.join(missed)}." if missed else ".")))
    meets, goal = _goal(run.summary, targets)
    for line in cost_lines(run.summary, meets=meets, goal=goal):
        lines.append(("bad" if "no level meets" in line else "plain", sentence(line)))
    if run.quality is not None:
        lines.append(quality_line(run.quality))
    top = run.diagnosis.top if run.diagnosis is not None else None
    if top is not None:
        lines.append((tone_of(top.severity), f"Top finding: {top.title}."))
        if top.actions:
            lines.append(("plain", f"Try first: {top.actions[0].text}"))
    return lines


def _goal(
    summary: BenchSummary, targets: Sequence[Target]
) -> tuple[Callable[[LevelSummary], bool] | None, str]:
    """Whether a level meets every target it is judged on and its SLOs, and what to call
    that; None where the run has neither."""
    judged = [t for t in targets if t.name != "single"]
    slo = slo_rule(summary)
    if not judged and slo is None:
        return None, ""

    def meets(level: LevelSummary) -> bool:
        on_targets = all(level_meets(t, level) is not False for t in judged)
        return on_targets and (slo is None or slo(level))

    names = [name for name, on in (("the targets", judged), ("the SLOs", slo)) if on]
    return meets, " and ".join(names)
