"""Section 1, the goal: each target met or not, with the level that meets it."""

from __future__ import annotations

from collections.abc import Sequence

from servelab.report.document import Block, Paragraph, Section, Table, Tone
from servelab.report.inputs import ReportRun
from servelab.report.targets import Target, evaluate_targets

__all__ = ["goal_section"]


def goal_section(run: ReportRun, targets: Sequence[Target]) -> Section:
    run_info = run.summary.run
    workload = run_info.workload
    lengths = ", ".join(
        f"{value} {name} tokens"
        for name, value in (
            ("input", workload.get("input_len")),
            ("output", workload.get("output_len")),
        )
        if value is not None
    )
    target = run_info.target
    where = [
        f"{target['url']}" + (f" ({target['api']} API)" if target.get("api") else "")
        if target.get("url")
        else None,
        f"model {target['model']}" if target.get("model") else None,
        f"engine {target['engine']}" if target.get("engine") else None,
    ]
    what = [f"workload {workload['dataset']}" if workload.get("dataset") else None, lengths]
    text = "Endpoint " + ", ".join(p for p in where if p)
    if any(what):
        text += "; " + ", ".join(p for p in what if p)
    blocks: list[Block] = [Paragraph(text + ".")]
    if not targets:
        blocks.append(
            Paragraph(
                "No targets were given (servelab report --target total=1000 --target "
                "single=100 --target ttft_p99=2s, say): the best level of each metric is in "
                "the results."
            )
        )
        return Section("targets", "Goal and targets", blocks)
    results = evaluate_targets(targets, run.summary.levels)
    rows, tones = [], []
    for result in results:
        rows.append(
            [
                result.target.text,
                result.target.goal,
                "met" if result.met else "not met",
                result.detail,
            ]
        )
        tone: Tone = "good" if result.met else "bad"
        tones.append(tone)
    met = sum(r.met for r in results)
    blocks.append(Table(["target", "goal", "result", "where"], rows, tones=tones))
    blocks.append(
        Paragraph(f"{met} of {len(results)} targets met.", "good" if met == len(results) else "bad")
    )
    return Section("targets", "Goal and targets", blocks)
