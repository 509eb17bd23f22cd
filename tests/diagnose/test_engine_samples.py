"""A level's engine counts rest on at least three samples of /metrics, or are missing.

A short level scraped once or twice (/metrics once a second, a level of two seconds) can
catch the engine between steps: 0 running at 24 streams. Such a level is missing
evidence, with its reason, in every rule that reads the engine's counts, never a 0.
"""

from __future__ import annotations

from pathlib import Path

from servelab.diagnose.facts import level_facts
from servelab.diagnose.findings import FindingKind
from servelab.telemetry.summary import EngineLevel, LevelTelemetry
from tests.diagnose.builders import diagnose, summary, write_run
from tests.diagnose.test_rules import capped_sweep


def _scraped(levels: list, samples: int) -> list:
    """The levels with their engine counts from `samples` scrapes (an old summary.json,
    written before the summary refused so few)."""
    out = []
    for lv in levels:
        telemetry: LevelTelemetry = lv.telemetry
        engine: EngineLevel = telemetry.engine.model_copy(update={"samples": samples})
        out.append(
            lv.model_copy(update={"telemetry": telemetry.model_copy(update={"engine": engine})})
        )
    return out


def test_two_scrapes_at_a_level_are_not_read_as_its_running_count(tmp_path: Path):
    run = summary(_scraped(capped_sweep(), 2), target_engine="sglang")
    found = diagnose(write_run(tmp_path, run))
    cap = next(f for f in found.findings if f.kind is FindingKind.RUNNING_REQUEST_CAP)
    assert not any(e.source.startswith("engine metrics") for e in cap.evidence), cap.evidence
    assert any("2 samples of /metrics in this level: too few" in m for m in cap.missing), (
        cap.missing
    )


def test_a_zero_from_one_scrape_is_not_the_levels_batch():
    last = capped_sweep()[-1]
    idle = {"running_mean": 0.0, "running_max": 0.0, "queued_mean": 0.0, "queued_max": 0.0}
    engine = last.telemetry.engine.model_copy(update={**idle, "samples": 1})
    last = last.model_copy(
        update={"telemetry": last.telemetry.model_copy(update={"engine": engine})}
    )
    facts = level_facts(last, workload={}, running_cap=None, raw={}, model=None)
    assert facts.engine is None
    assert facts.engine_missing == "1 sample of /metrics in this level: too few (3 needed)"
    assert not facts.batch_source.startswith("engine metrics") and facts.batch > 1


def _from_the_log(levels: list, lines: int) -> list:
    """The levels with /metrics missed (no scrape inside) and their gauges from `lines`
    stats lines of the engine's log."""
    out = []
    for lv in levels:
        telemetry: LevelTelemetry = lv.telemetry
        engine = telemetry.engine
        update = {
            "samples": 0,
            "log_samples": lines,
            "sources": {name: "log" for name in ("running", "queued", "kv_usage")},
        }
        out.append(
            lv.model_copy(
                update={
                    "telemetry": telemetry.model_copy(
                        update={"engine": engine.model_copy(update=update)}
                    )
                }
            )
        )
    return out


def test_a_level_the_log_covered_stands_on_the_logs_samples(tmp_path: Path):
    """/metrics missed the level, the log's stats lines did not: the counts are evidence."""
    run = summary(_from_the_log(capped_sweep(), 11), target_engine="sglang")
    found = diagnose(write_run(tmp_path, run))
    cap = next(f for f in found.findings if f.kind is FindingKind.RUNNING_REQUEST_CAP)
    assert any(e.what.startswith("waiting requests") for e in cap.evidence), cap.evidence


def test_two_stats_lines_are_too_few_whatever_the_scrapes():
    engine = capped_sweep()[-1].telemetry.engine
    assert engine.model_copy(update={"samples": 20}).gauge_samples == 20
    log = engine.model_copy(update={"samples": 20, "log_samples": 2, "sources": {"running": "log"}})
    assert log.gauge_samples == 2
