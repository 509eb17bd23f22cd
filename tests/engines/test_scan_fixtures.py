"""`servelab engine scan` on every fixture of the engines' own output.

- tests/fixtures/engine_logs/events/<kind>.json: each case is one line an engine (or NCCL)
  prints; written alone to a file, it must scan, with no engine given, to that engine and to
  exactly its event, with exactly the listed fields.
- tests/fixtures/engine_logs/stats/{vllm,sglang}.json: each released format of the periodic
  stats line; alone in a file it must scan to a series of one point holding the entry's
  `expected` numbers. One line is enough: `LogStats` makes a sample of every stats line, so
  no entry needs several lines (or stamps) to make a series.
- tests/fixtures/engine_metrics/*.txt: saved /metrics pages; each must scan to one snapshot of
  its engine. Its numbers are read off the page's own rows (the rule the README and
  `telemetry.scrape` state: the workers' rows summed, KV usage averaged, a copy counted once).

A line that cannot tell its engine by itself (the same text in both engines, or NCCL's own
line) is scanned with its engine given: AMBIGUOUS says why, case by case. A case the scanner
reads otherwise than its fixture says would be marked xfail(strict=True) in DISAGREEMENTS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.logscan import (
    SCAN_ENGINES,
    SERIES_FIELDS,
    EngineLogScan,
    StatsPoint,
    scan_engine_file,
    scan_engine_text,
)
from servelab.engines.signatures import EventKind
from servelab.telemetry.logstats import StatsLine
from servelab.telemetry.scrape import guess_engine, sample_from_text

FIXTURES = Path(__file__).parents[1] / "fixtures"
EVENTS = FIXTURES / "engine_logs" / "events"
STATS = FIXTURES / "engine_logs" / "stats"
METRICS = FIXTURES / "engine_metrics"

Case = dict[str, Any]


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


EVENT_CASES: dict[tuple[str, int], Case] = {
    (path.stem, index): case
    for path in sorted(EVENTS.glob("*.json"))
    for index, case in enumerate(_load(path))
}
STATS_CASES: dict[str, tuple[str, Case]] = {
    fmt["id"]: (engine, fmt)
    for engine in ("vllm", "sglang")
    for fmt in _load(STATS / f"{engine}.json")["formats"]
}

# --- lines that do not tell their engine by themselves: scanned with the engine given ----------

_COPIED = (
    "SGLang's custom all-reduce is vLLM's custom_all_reduce.py, copied: the message is the same "
    "text in both, so both engines' own signatures match the line and the guess is a tie "
    "(1 line each); the log prefix around it is not what the guess reads"
)
_NCCL = (
    "NCCL's own line, printed alike under any engine: nccl.transport is in both engines' "
    "signature sets, so it counts for neither (0 lines each) and no engine is guessed"
)
AMBIGUOUS: dict[tuple[str, int], str] = {
    # vLLM 0.6.6-0.11.0 and 0.34.0's "Custom allreduce is disabled ..." (0-5) and SGLang's
    # (8-12); vLLM 0.34.0's "Custom collectives are disabled ..." (6, 7) is vLLM's alone.
    **{("custom_allreduce_off", index): _COPIED for index in (0, 1, 2, 3, 4, 5)},
    **{("custom_allreduce_off", index): _COPIED for index in (8, 9, 10, 11, 12)},
    **{("nccl_transport", index): _NCCL for index in range(7)},
}

# --- where the scanner reads a fixture otherwise than it says: xfail(strict) ---------------------

DISAGREEMENTS: dict[object, str] = {}
"""Keys: an events case (file stem, index), a stats entry's id, a metrics page's file name."""


def _param(key: object, *values: object, ident: str) -> Any:
    """A pytest.param, xfail(strict) where DISAGREEMENTS lists it."""
    reason = DISAGREEMENTS.get(key)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(*values, id=ident, marks=marks)


def _log(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "engine.log"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def _other(engine: str) -> str:
    (other,) = (name for name in SCAN_ENGINES if name != engine)
    return other


def _series(point: StatsPoint) -> dict[str, float | None]:
    return {name: getattr(point, name) for name in SERIES_FIELDS}


def _servelab(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command, as a user runs it: `python -m servelab ...`."""
    env = {key: value for key, value in os.environ.items() if key != "FORCE_COLOR"}
    return subprocess.run(
        [sys.executable, "-m", "servelab", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_every_exception_names_a_real_case():
    keys = {*EVENT_CASES, *STATS_CASES, *(path.name for path in METRICS.glob("*.txt"))}
    assert set(AMBIGUOUS) <= set(EVENT_CASES)
    assert set(DISAGREEMENTS) <= keys


# --- 1. events ---------------------------------------------------------------------------------


def _event_id(key: tuple[str, int]) -> str:
    case = EVENT_CASES[key]
    return f"{key[0]}-{key[1]}-{case['engine']}-{case['version'].replace(' ', '')}"


def _expected_event(key: tuple[str, int]) -> list[tuple[EventKind, str, dict[str, Any]]]:
    case = EVENT_CASES[key]
    return [(EventKind(key[0]), case["signature"], case["fields"])]


def _events(scan: EngineLogScan) -> list[tuple[EventKind, str, dict[str, Any]]]:
    return [(event.kind, event.signature, event.fields) for event in scan.events]


@pytest.mark.parametrize("key", [_param(key, key, ident=_event_id(key)) for key in EVENT_CASES])
def test_each_event_line_scans_to_its_engine_and_exactly_its_event(
    tmp_path: Path, key: tuple[str, int]
):
    case = EVENT_CASES[key]
    engine = case["engine"]
    path = _log(tmp_path, case["line"])

    guessed = scan_engine_file(path)
    if key in AMBIGUOUS:
        # Why each is ambiguous: AMBIGUOUS[key]. The guess shows it: a tie.
        assert guessed.guess.matches[engine] == guessed.guess.matches[_other(engine)]
        if guessed.recognised and guessed.stamp_style in (engine, _other(engine)):
            # a tie goes to the engine whose timestamp style the line carries
            assert guessed.engine == guessed.stamp_style, (guessed.engine, guessed.stamp_style)
        scan = scan_engine_file(path, engine=engine)
        assert (scan.engine, scan.guess.how) == (engine, "given")
    else:
        scan = guessed
        assert (scan.engine, scan.guess.engine, scan.guess.how) == (engine, engine, "log_lines")
        assert scan.guess.matches == {engine: 1, _other(engine): 0}

    assert (scan.kind, scan.lines, scan.recognised, scan.stats) == ("log", 1, True, None)
    assert _events(scan) == _expected_event(key)
    assert scan.counts == {EventKind(key[0]): 1}
    (event,) = scan.events
    assert (event.line_no, event.count) == (1, 1)
    if "t_unix" in case:
        assert event.t_unix == pytest.approx(case["t_unix"])


# A few through the command itself, --json as documented in docs/ENGINE_SCAN.md: a vLLM event
# with a field, an SGLang data-parallel rank's, and an ambiguous one with --engine.
CLI_EVENT_CASES = [("engine_error", 2), ("running_cap_lowered", 1), ("custom_allreduce_off", 2)]


@pytest.mark.parametrize("key", [_param(key, key, ident=_event_id(key)) for key in CLI_EVENT_CASES])
def test_the_command_prints_the_same_event_as_json(tmp_path: Path, key: tuple[str, int]):
    case = EVENT_CASES[key]
    engine = case["engine"]
    path = _log(tmp_path, case["line"])
    given = ["--engine", engine] if key in AMBIGUOUS else []

    result = _servelab("engine", "scan", str(path), "--json", *given)

    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    document = json.loads(result.stdout)
    assert document["engine"] == engine
    assert document["guess"]["how"] == ("given" if given else "log_lines")
    assert document["recognised"] is True
    events = [(EventKind(e["kind"]), e["signature"], e["fields"]) for e in document["events"]]
    assert events == _expected_event(key)
    if "t_unix" in case:
        assert document["events"][0]["t_unix"] == pytest.approx(case["t_unix"])


# --- 2. stats lines ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt_id", [_param(fmt_id, fmt_id, ident=fmt_id) for fmt_id in STATS_CASES])
def test_each_stats_line_scans_to_a_point_of_its_numbers(tmp_path: Path, fmt_id: str):
    engine, fmt = STATS_CASES[fmt_id]
    expected = StatsLine(**fmt["expected"])

    scan = scan_engine_file(_log(tmp_path, fmt["line"]))

    assert (scan.kind, scan.engine, scan.guess.how) == ("log", engine, "log_lines")
    assert scan.guess.matches == {engine: 1, _other(engine): 0}
    assert scan.recognised and scan.stats is not None and scan.stats.source == "log"
    (point,) = scan.stats.points
    assert point.line_no == 1
    want = {name: getattr(expected, name) for name in SERIES_FIELDS}
    assert _series(point) == pytest.approx(want)
    # Each gauge the line carries is in the spread, once; the others are not.
    spread = {f.field: (f.samples, f.min, f.median, f.max) for f in scan.stats.fields}
    carried = {name: value for name, value in _series(point).items() if value is not None}
    assert spread == {name: (1, value, value, value) for name, value in carried.items()}


# --- 3. /metrics pages ------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """What a page's rows say, by the README's rules (see each entry's arithmetic)."""

    engine: str
    running: float | None
    queued: float | None
    kv_usage: float | None
    gen_throughput: float | None
    prompt_tokens_total: float | None
    generation_tokens_total: float | None
    prefix_queries_total: float | None
    prefix_hits_total: float | None


PAGES: dict[str, Page] = {
    # V0: running, waiting, gpu_cache_usage_perc (swapped and the CPU's usage are not either);
    # no throughput gauge; only hit-rate gauges, no prefix counters.
    "vllm_0.6_v0.txt": Page("vllm", 4, 7, 0.93, None, 182340, 95120, None, None),
    # HELP/TYPE alone: no gauge has a value; the declared counters count 0 (telemetry.scrape).
    "vllm_0.6_v0_declared_only.txt": Page("vllm", None, None, None, None, 0, 0, None, None),
    # V1 0.8: gpu_cache_usage_perc, gpu_prefix_cache_queries/hits (blocks).
    "vllm_0.8_v1.txt": Page("vllm", 9, 2, 0.64, None, 65536, 20480, 4096, 1024),
    # Engines 0 and 1: 3+5 running, 1+0 waiting, (0.5+0.25)/2, 2000+3000 queries, 512+1024
    # hits, 2100+3150 prompt, 700+900 generated; the deprecated gpu_ names are the same values.
    "vllm_0.10_v1_dp2.txt": Page("vllm", 8, 1, 0.375, None, 5250, 1600, 5000, 1536),
    "vllm_0.12_v1.txt": Page("vllm", 16, 4, 0.82, None, 72000, 30500, 120000, 48000),
    # Hosts .5 and .6, each copied by replicas prom-0 and prom-1 (the larger copy): 3+5, 1+0,
    # (0.5+0.25)/2, 2000+3000, 512+1024, 2100+3150, 700+900.
    "vllm_federated_underscore.txt": Page("vllm", 8, 1, 0.375, None, 5250, 1600, 5000, 1536),
    # 0.3.4: num_requests_running/waiting (queue_req is another gauge); prompt tokens are the
    # prefix queries; no cached_tokens_total.
    "sglang_0.3.4.txt": Page("sglang", 64, 12, 0.31, 1843.2, 50000, 40000, 50000, None),
    "sglang_collector.txt": Page("sglang", 48, 6, 0.52, 2210.5, 96000, 41000, 96000, 24000),
    # dp_rank 0 and 1: 30+34, 2+3, (0.45+0.55)/2, 900+1100.
    "sglang_dp_attention_extra_labels.txt": Page(
        "sglang", 64, 5, 0.5, 2000, 500000, 250000, 500000, 100000
    ),
    # The engine's own rows are repeated in the federation's view of two hosts, which alone
    # counts: 10+12+20+22, 1+2+0+1, (0.4+0.6+0.5+0.7)/4, 8000+9000 prompt, 2000+3000 cached;
    # no throughput gauge, no generation counter.
    "sglang_repeated_under_extra_labels.txt": Page(
        "sglang", 64, 4, 0.55, None, 17000, None, 17000, 5000
    ),
}


def test_every_metrics_page_has_its_numbers():
    assert set(PAGES) == {path.name for path in METRICS.glob("*.txt")}


@pytest.mark.parametrize("name", [_param(name, name, ident=name) for name in sorted(PAGES)])
def test_each_metrics_page_scans_to_one_snapshot_of_its_engine(name: str):
    page = PAGES[name]
    path = METRICS / name
    text = path.read_text(encoding="utf-8")

    scan = scan_engine_file(path)

    assert (scan.kind, scan.engine) == ("metrics", page.engine)
    assert (scan.guess.engine, scan.guess.how) == (page.engine, "metric_names")
    assert scan.guess.matches[_other(page.engine)] == 0
    # prefill_tokens and cached_tokens come from log lines only ("where the engine logs
    # them", docs/ENGINE_SCAN.md): a page gives none.
    want = {
        "running": page.running,
        "queued": page.queued,
        "kv_usage": page.kv_usage,
        "gen_throughput": page.gen_throughput,
        "prefill_tokens": None,
        "cached_tokens": None,
    }
    if any(value is not None for value in want.values()):
        assert scan.recognised and scan.guess.matches[page.engine] > 0
        assert scan.stats is not None and scan.stats.times == "snapshot"
        (point,) = scan.stats.points
        assert (point.line_no, point.stamp, point.t_s) == (None, None, None)
        assert _series(point) == pytest.approx(want)
    else:
        # Declared but empty: an empty snapshot or no reading, but no gauge with a value.
        points = scan.stats.points if scan.stats is not None else []
        assert all(_series(point) == want for point in points)
        assert scan.stats is None or scan.stats.fields == []

    # The counters are not in the scan's point: the page's sample, read as the scan reads it.
    assert guess_engine(text) == page.engine
    sample = sample_from_text(text)
    assert sample is not None and sample.engine == page.engine
    gauges = ("running", "queued", "kv_usage", "gen_throughput")
    assert {name: getattr(sample, name) for name in gauges} == pytest.approx(
        {name: want[name] for name in gauges}
    )
    counters = (
        "prompt_tokens_total",
        "generation_tokens_total",
        "prefix_queries_total",
        "prefix_hits_total",
    )
    assert {name: getattr(sample, name) for name in counters} == pytest.approx(
        {name: getattr(page, name) for name in counters}
    )


# --- 4. nothing to read --------------------------------------------------------------------------

UNRELATED = (
    "Mounting /data on /dev/sdb1 read-only",
    "backup: 1,204 files copied in 3.2 s",
    "cron[812]: (root) CMD (run-parts /etc/cron.hourly)",
)


def test_unrelated_lines_say_nothing_was_read(tmp_path: Path):
    scan = scan_engine_text("".join(f"{line}\n" for line in UNRELATED))
    assert (scan.kind, scan.engine, scan.recognised) == ("log", None, False)
    assert (scan.events, scan.stats, scan.looks_like) == ([], None, None)
    assert scan.guess.matches == dict.fromkeys(SCAN_ENGINES, 0)

    path = _log(tmp_path, *UNRELATED)
    result = _servelab("engine", "scan", str(path))

    assert (result.returncode, result.stdout) == (2, "")
    engines = " or ".join(SCAN_ENGINES)
    assert result.stderr == (
        f"error: nothing was read from {path}: no {engines} stats line or known message "
        f"among its {len(UNRELATED)} lines\n"
    )
