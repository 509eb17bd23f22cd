"""`not_saturated`: the sweep stopped while throughput still grew; the knee lies beyond it.

The knee rule (10% per doubling) found no knee. With the model, the expected knee is
the first doubling past the sweep where the model's own throughput grows by less than
that, or the KV limit, whichever comes first; the sweep should reach it.
"""

from __future__ import annotations

from servelab.bench.knee import KNEE_GROWTH_PER_DOUBLING
from servelab.diagnose.actions import bench_action
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import Evidence, Finding, FindingKind, Severity
from servelab.diagnose.signals import fmt, model_growth

__all__ = ["MAX_DOUBLINGS", "rule"]

MAX_DOUBLINGS = 10
"""The model is asked up to 1,024 times the sweep's last load."""


def rule(facts: RunFacts) -> list[Finding]:
    levels = facts.closed
    if facts.knee.found or len(levels) < 2:
        return []
    last = levels[-1]
    growth = facts.knee.growth_per_doubling[-1] if facts.knee.growth_per_doubling else None
    evidence = []
    if growth is not None:
        evidence.append(
            Evidence(
                what=f"total-throughput growth per doubling into {last.label}",
                value=fmt(growth),
                unit="x",
                source=f"{levels[-2].source}, {last.source}",
            )
        )
    expected = _expected_knee(facts, last)
    if expected is not None:
        evidence.append(expected)
    target = (
        int(expected.value) if expected is not None and isinstance(expected.value, int) else None
    )
    sweep = _extended(int(last.load), target)
    where = f"; the model expects it near {target}" if target else ""
    return [
        Finding(
            kind=FindingKind.NOT_SATURATED,
            title=f"no knee up to {last.label}: the sweep stopped too early{where}",
            severity=Severity.INFO,
            confidence=0.9,
            evidence=evidence,
            explanation=(
                "Throughput still grew by at least 10% per doubling at the last level, so the "
                "engine had more to give: the run does not show where it saturates."
            ),
            actions=[bench_action("--concurrency", sweep, "extend the sweep")],
            missing=[f"model: {facts.missing['model']}"] if facts.missing.get("model") else [],
            levels=[last.level],
            impact=0.0,
        )
    ]


def _expected_knee(facts: RunFacts, last: LevelFacts) -> Evidence | None:
    if facts.model is None:
        return None
    limit = facts.model.kv_max_concurrency(round(last.input_tokens), round(last.output_tokens))
    load = last.load
    for _ in range(MAX_DOUBLINGS):
        if 2 * load > limit:
            return Evidence(
                what="concurrency the model's KV cache holds (its last level)",
                value=int(limit),
                unit="requests",
                source=facts.model.kv_source,
            )
        growth = model_growth(facts, load, 2 * load, last)
        if growth is not None and growth < KNEE_GROWTH_PER_DOUBLING:
            return Evidence(
                what="the model's knee (growth per doubling under 10%)",
                value=int(load),
                unit="requests",
                source="model: throughput by concurrency",
            )
        load *= 2
    return None


def _extended(last: int, target: int | None) -> str:
    """Doublings from the last level to twice the expected knee (or four times the last)."""
    end = 2 * target if target else 4 * last
    levels, level = [], last * 2
    while level <= end:
        levels.append(level)
        level *= 2
    return ",".join(str(v) for v in levels or [last * 2])
