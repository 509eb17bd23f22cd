"""The engine's log events on the engine timeline, at their bench-clock time among the levels.

Run directories are written as a launched run writes them: summary.json, requests.jsonl,
metrics.jsonl where the engine has /metrics, and engine_events.json from the signature
matcher fed real log lines (each signature's own example) stamped on the bench clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servelab.engines.signatures import SIGNATURES, EngineExit, LogScan, SignatureMatcher
from servelab.report import write_report
from servelab.report.document import Bullets, Figure, Paragraph
from servelab.report.inputs import load_report_run
from servelab.report.plots import Panel, Plot, build_plots
from servelab.report.sections import build_report
from servelab.report.sections.results import plot_input
from servelab.store import RunDir
from tests.conftest import DemoRun
from tests.diagnose.builders import write_run
from tests.report.builders import MS, bench_summary, record, subsection, sweep

S = 1_000_000_000
T0 = 5_000 * S
"""The bench clock at the first measured send: perf_counter_ns is no wall time."""
LEVEL_S = 10
"""Level i is measured from T0 + 10 i s to 8 s later (4 requests, 2 s each)."""
EMBEDDED = {"engine": "embedded", "model": "tiny", "command": ["transformers", "serve"]}
VLLM = {"engine": "vllm", "model": "tiny", "command": ["vllm", "serve", "tiny"]}


def example(name: str) -> str:
    """The log line a signature was written from."""
    engine = name.split(".")[0].replace("transformers", "embedded")
    return next(sig.example for sig in SIGNATURES[engine] if sig.name == name)


def events(engine: str, stamped: list[tuple[str, float]], *, clock: bool = True) -> LogScan:
    """engine_events.json of these signatures' lines, each read at T0 + its offset in s."""
    matcher = SignatureMatcher(engine)
    for name, offset_s in stamped:
        matcher.feed(example(name), t_mono_ns=T0 + round(offset_s * S) if clock else None)
    return matcher.summary()


def level_records() -> list[dict[str, Any]]:
    return [
        record(lv.level, (T0 + (LEVEL_S * lv.level + 2 * i) * S) / MS, [5.0, 1000.0, 2000.0])
        for lv in sweep()
        for i in range(4)
    ]


def run_dir(
    folder: Path,
    scan: LogScan,
    *,
    engine: dict[str, Any] = EMBEDDED,
    metric_rows: list[dict[str, Any]] | None = None,
) -> Path:
    write_run(folder, bench_summary(engine=engine), events=scan, metric_rows=metric_rows)
    RunDir(folder).append_requests(level_records())
    return folder


def timeline(folder: Path) -> Plot:
    """The engine timeline as the report's results section holds it."""
    report = build_report(load_report_run(folder))
    results = next(s for s in report.sections if s.key == "results")
    figures = [b.plot for b in results.blocks if isinstance(b, Figure)]
    return next(p for p in figures if p.key == "engine_timeline")


def timeline_or_missing(folder: Path) -> Plot:
    run = plot_input(load_report_run(folder))
    return next(p for p in build_plots([run]) if p.key == "engine_timeline")


def marks(plot: Plot, run: str | None = None) -> dict[str, list[float]]:
    """Each row's label and the times of its markers."""
    line = plot.line("log events", run)
    assert line.role == "points"
    rows = events_panel(plot).y_categories
    at: dict[str, list[float]] = {}
    for x, y in zip(line.x, line.y, strict=True):
        at.setdefault(rows[int(y)], []).append(x)
    return at


def notes(plot: Plot, run: str | None = None) -> list[tuple[float, str]]:
    """What is written beside a marker, with the marker's time."""
    line = plot.line("log events", run)
    return [(x, note) for x, note in zip(line.x, line.point_labels, strict=True) if note]


def events_panel(plot: Plot) -> Panel:
    (panel,) = [p for p in plot.panels if p.name == "events"]
    return panel


def band_at(plot: Plot, t_s: float) -> int:
    (level,) = [b.level for b in plot.bands if b.start_s <= t_s <= b.end_s]
    return level


EMBEDDED_LOG = [
    ("transformers.memory_for_cache", -6.0),
    ("transformers.paged_cache_initialized", -6.0),
    ("transformers.cuda_graphs_off", -5.5),
    ("transformers.cb_worker_dead", 14.5),
]


def test_the_levels_are_the_requests_windows_on_the_same_clock(tmp_path: Path):
    plot = timeline(run_dir(tmp_path / "run", events("embedded", EMBEDDED_LOG)))
    assert [(b.label, b.start_s, b.end_s) for b in plot.bands] == [
        ("c=1", 0.0, 8.0),
        ("c=8", 10.0, 18.0),
        ("c=32", 20.0, 28.0),
        ("c=64", 30.0, 38.0),
    ]


def test_an_event_is_drawn_within_its_level_at_its_offset(tmp_path: Path):
    plot = timeline(run_dir(tmp_path / "run", events("embedded", EMBEDDED_LOG)))
    (t_s,) = marks(plot)["engine error"]
    assert t_s == pytest.approx(14.5)
    assert band_at(plot, t_s) == 1


def test_each_event_kind_is_a_labelled_row_in_the_order_first_read(tmp_path: Path):
    plot = timeline(run_dir(tmp_path / "run", events("embedded", EMBEDDED_LOG)))
    assert events_panel(plot).y_categories == (
        "KV cache memory",
        "KV cache capacity",
        "CUDA graph disabled",
        "KV cache sizing failed",
        "engine error",
    )
    assert events_panel(plot).y_label == "log event"
    assert set(marks(plot)) == set(events_panel(plot).y_categories)


def test_start_up_events_are_drawn_at_the_start_and_the_caption_says_so(tmp_path: Path):
    plot = timeline(run_dir(tmp_path / "run", events("embedded", EMBEDDED_LOG)))
    at = marks(plot)
    assert at["KV cache memory"] == at["KV cache capacity"] == at["CUDA graph disabled"] == [0.0]
    assert "before the first measured request (start-up" in plot.caption
    assert "drawn at 0" in plot.caption


def test_events_of_one_kind_share_its_row(tmp_path: Path):
    names = [sig.name for sig in SIGNATURES["vllm"] if sig.severity.value == "info"][:9]
    scan = events("vllm", [(n, -30.0) for n in names] + [("vllm.preempted_no_kv_space", 3.0)])
    plot = timeline(run_dir(tmp_path / "run", scan))
    line = plot.line("log events")
    rows = events_panel(plot).y_categories
    assert len(line.x) == len(scan.events)
    assert len(rows) == len({event.kind for event in scan.events})
    assert rows[-1] == "KV cache full"  # read last, drawn lowest
    assert marks(plot)["KV cache full"] == [pytest.approx(3.0)]


def test_the_embedded_engine_is_drawn_from_its_events_and_says_its_counts_are_absent(
    tmp_path: Path,
):
    folder = run_dir(tmp_path / "run", events("embedded", EMBEDDED_LOG))
    plot = timeline(folder)
    assert plot.missing is None
    assert [panel.name for panel in plot.panels] == ["events"]
    assert (
        "Running and queued requests and KV cache usage are not available for this run: the "
        "run scraped no /metrics (transformers serve has none); only its log events are drawn."
    ) in plot.caption
    html = write_report([folder], out=tmp_path / "out").html.read_text()
    assert 'id="plot-engine_timeline"' in html
    assert "Engine requests and KV cache over time: not drawn" not in html
    assert "only its log events are drawn" in html


def test_vllm_kv_full_and_an_exit_sit_beside_its_metrics(tmp_path: Path):
    scan = events(
        "vllm", [("vllm.kv_cache_size_tokens", -20.0), ("vllm.preempted_no_kv_space", 23.0)]
    )
    died = scan.model_copy(
        update={"exit": EngineExit(code=-9, description="signal SIGKILL", during="level 2")}
    )
    rows = [
        {"kind": "metrics", "t_ns": T0 + s * S, "running": 8.0, "queued": 2.0, "kv_usage": 0.99}
        for s in range(29)
    ]
    plot = timeline(run_dir(tmp_path / "run", died, engine=VLLM, metric_rows=rows))
    assert [panel.name for panel in plot.panels] == ["requests", "kv", "events"]
    assert events_panel(plot).y_categories == ("KV cache capacity", "KV cache full", "engine exit")
    at = marks(plot)
    assert at["KV cache full"] == [pytest.approx(23.0)]
    assert band_at(plot, at["KV cache full"][0]) == 2
    assert at["engine exit"] == [pytest.approx(28.0)]  # level 2's last end
    assert notes(plot) == [(pytest.approx(28.0), "signal SIGKILL")]
    assert at["KV cache capacity"] == [0.0]
    assert "not available" not in plot.caption


def test_a_repeated_message_says_how_often_beside_its_marker(tmp_path: Path):
    scan = events("vllm", [("vllm.preempted_no_kv_space", s) for s in (23.0, 24.0, 25.0)])
    plot = timeline(run_dir(tmp_path / "run", scan, engine=VLLM))
    assert marks(plot) == {"KV cache full": [pytest.approx(23.0)]}
    assert notes(plot) == [(pytest.approx(23.0), "x3")]


def test_the_table_of_events_gives_each_its_time_since_the_runs_start(tmp_path: Path):
    report = build_report(
        load_report_run(run_dir(tmp_path / "run", events("embedded", EMBEDDED_LOG)))
    )
    findings = next(s for s in report.sections if s.key == "findings")
    warnings = subsection(findings, "warnings")
    intro = next(b for b in warnings.blocks if isinstance(b, Paragraph))
    assert "seconds since the first measured request" in intro.text
    (items,) = [b for b in warnings.blocks if isinstance(b, Bullets)]
    first = {sub[0].split(":")[0] for _, _, sub in items.items}
    assert "line 4 at 14.5 s" in first
    assert "line 2 at start-up (6.0 s before the first measured request)" in first


def test_events_read_from_a_finished_log_are_listed_not_drawn(tmp_path: Path):
    folder = run_dir(tmp_path / "run", events("embedded", EMBEDDED_LOG, clock=False))
    plot = timeline_or_missing(folder)
    assert plot.missing == (
        "no engine metrics: the run scraped no /metrics (transformers serve has none)"
    )
    report = build_report(load_report_run(folder))
    warnings = subsection(next(s for s in report.sections if s.key == "findings"), "warnings")
    (items,) = [b for b in warnings.blocks if isinstance(b, Bullets)]
    first = [sub[0] for _, _, sub in items.items]
    assert any(line.startswith("line 2: - ContinuousBatchingLogger") for line in first)
    assert not any(" at " in line.split(":")[0] for line in first)


def test_each_run_of_a_comparison_keeps_its_own_events(tmp_path: Path):
    one = plot_input(load_report_run(run_dir(tmp_path / "a", events("embedded", EMBEDDED_LOG))))
    two = plot_input(load_report_run(run_dir(tmp_path / "b", events("embedded", EMBEDDED_LOG[:1]))))
    plot = next(p for p in build_plots([one, two]) if p.key == "engine_timeline")
    assert one.events is not None
    assert sum(map(len, marks(plot, "hand-built").values())) == len(one.events.events)
    assert marks(plot, "hand-built (2)") == {"KV cache memory": [0.0]}
    assert events_panel(plot).y_categories[0] == "KV cache memory"  # one row for both runs


def test_the_demos_timeline_shows_its_cache_sizing(demo_run: DemoRun):
    """The real embedded engine's log, read on the bench clock by the session's demo run."""
    assert demo_run.result.returncode == 0, demo_run.result.stderr[-2000:]
    plot = timeline_or_missing(demo_run.out)
    assert plot.missing is None
    assert "KV cache capacity" in marks(plot)  # transformers' "Paged cache initialized"
    assert "CUDA graph disabled" in marks(plot)  # on the CPU, (varlen, decode): (False, False)
    assert "engine config" in marks(plot)
    scan = plot_input(load_report_run(demo_run.out)).events
    assert scan is not None and "transformers.cuda_graphs" not in {
        event.signature for event in scan.events
    }
    assert "not available for this run" in plot.caption
