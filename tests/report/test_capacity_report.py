"""A capacity run's report leads with the answer, its boundary and their bands, and lists
the search's levels in the results; other runs' headlines are as before."""

from __future__ import annotations

from servelab.bench.capacity_results import (
    CapacityLevel,
    CapacityResult,
    CapacityStep,
    LevelJudgement,
    SloQuantile,
)
from servelab.bench.capacity_text import capacity_sentence
from servelab.report.document import Table
from servelab.report.markdown import render_markdown
from servelab.report.sections import build_report
from tests.diagnose.builders import level
from tests.report.builders import bench_summary, blocks, report_run

SLO = {"ttft": 2000.0}


def step(
    index: int,
    load: float,
    kind: CapacityStep,
    attained: float,
    ttft_ms: float,
    band_ms: tuple[float, float],
    *,
    within_noise: bool = False,
    measurements: int = 1,
) -> CapacityLevel:
    judged = LevelJudgement(
        requests=5 * int(load) * measurements,
        attained=attained,
        attained_lo=attained - 0.01,
        attained_hi=min(1.0, attained + 0.01),
        quantiles=[
            SloQuantile(
                metric="ttft",
                slo_ms=2000.0,
                value_ms=ttft_ms,
                band_lo_ms=band_ms[0],
                band_hi_ms=band_ms[1],
            )
        ],
        binding="ttft",
        meets=attained >= 0.99,
        within_noise=within_noise,
        noise="within noise: ..." if within_noise else "outside noise",
    )
    return CapacityLevel(
        level=index, load=load, step=kind, measurements=measurements, judged=judged
    )


def capacity_run():
    """32 meets, 64 fails, 48 meets, 56 fails (within noise, then measured again)."""
    steps = [
        step(0, 32, "start", 1.0, 900, (800, 1000)),
        step(1, 64, "double", 0.80, 4100, (3900, 4400)),
        step(2, 48, "bisect", 0.995, 1800, (1600, 1900)),
        step(3, 56, "bisect", 0.985, 2300, (1950, 2600), within_noise=True),
        step(4, 56, "remeasure", 0.97, 2400, (2100, 2900), measurements=2),
    ]
    result = CapacityResult(
        mode="concurrency",
        slo_ms=SLO,
        attainment=0.99,
        status="found",
        capacity=48,
        held=steps[2],
        failed=steps[4],
        within_noise=False,
        levels=steps,
        plan="capacity search: 99.0% of requests within TTFT ≤ 2 s; ...",
        explanation="",
    )
    result = result.model_copy(update={"explanation": capacity_sentence(result)})
    levels = [
        level(
            i,
            int(s.load),
            total_tps=100.0 * s.load,
            tpot_ms=20,
            ttft_ms=s.judged.quantiles[0].value_ms or 0,
        )
        for i, s in enumerate(steps)
    ]
    return report_run(bench_summary(levels).model_copy(update={"capacity": result}))


def test_the_headline_leads_with_the_capacity_and_its_boundary():
    report = build_report(capacity_run())
    (tone, first), (_, second) = report.headline[:2]
    assert first == (
        "Capacity: 48 concurrent at TTFT p99 1.8 s ≤ 2 s; 56 fails (TTFT p99 2.4 s, 97.0% met "
        "every SLO)."
    )
    assert tone == "good"
    assert second.startswith("Boundary: 48 concurrent meets: 99.5% of 240 requests met every SLO")
    assert "TTFT p99 1.8 s (band 1.6 s–1.9 s)" in second
    assert "56 concurrent fails: 97.0% of 560 requests" in second
    assert "TTFT p99 2.4 s (band 2.1 s–2.9 s), 2 measurements pooled" in second
    assert report.headline[2][1].startswith("Best: ")
    markdown, _ = render_markdown(report)
    assert markdown.split("\n- ")[1].startswith("✅ Capacity: 48 concurrent at TTFT p99 1.8 s")


def test_a_boundary_within_noise_or_no_load_meeting_is_not_marked_good():
    run = capacity_run()
    capacity = run.summary.capacity
    assert capacity is not None
    noisy = capacity.model_copy(update={"within_noise": True})
    report = build_report(report_run(run.summary.model_copy(update={"capacity": noisy})))
    assert report.headline[0][0] == "warn"
    assert report.headline[1][1].endswith("Within noise: a repeat could reverse it.")
    failed = capacity.levels[0].model_copy(
        update={"judged": capacity.levels[1].judged, "load": 1.0}
    )
    none = capacity.model_copy(
        update={"status": "none", "capacity": None, "held": None, "failed": failed}
    )
    none = none.model_copy(update={"explanation": capacity_sentence(none)})
    report = build_report(report_run(run.summary.model_copy(update={"capacity": none})))
    tone, text = report.headline[0]
    assert tone == "bad"
    assert text.startswith("Capacity: no load tried kept TTFT ≤ 2 s for 99.0% of requests; 1 fails")


def test_the_results_list_every_level_of_the_search_with_its_verdict_and_bands():
    report = build_report(capacity_run())
    results = next(s for s in report.sections if s.key == "results")
    table = next(t for t in blocks(results, Table) if t.header[0] == "level")
    assert table.header == [
        "level",
        "concurrency",
        "step",
        "requests",
        "met every SLO",
        "band",
        "TTFT p99",
        "band",
        "verdict",
    ]
    assert [row[1] for row in table.rows] == ["32", "64", "48", "56", "56"]
    assert [row[-1] for row in table.rows] == [
        "meets",
        "fails",
        "meets",
        "fails (within noise)",
        "fails",
    ]
    assert table.rows[2][4:8] == ["99.5%", "98.5%–100.0%", "1.8 s", "1.6 s–1.9 s"]
    assert table.tones == ["good", "bad", "good", "warn", "bad"]


def test_a_run_without_a_capacity_search_keeps_its_headline():
    report = build_report(report_run())
    assert report.headline[0][1].startswith("Best: ")
    results = next(s for s in report.sections if s.key == "results")
    assert all(t.header[0] != "level" for t in blocks(results, Table))
