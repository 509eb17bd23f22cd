"""`servelab engine scan`: finished logs and saved /metrics pages read into events and a
stats series (engines.logscan, engines.logstamps), and the command around them.

Every line here is a real engine's: the fixture logs in tests/engines/data/logs, the stats
lines of tests/engines/test_enginelog.py, the signatures' own examples, and /metrics pages
written by prometheus_client under the engines' metric names.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.cli.engine_log_options import LogEngine
from servelab.core.errors import ConfigError
from servelab.engines.logscan import (
    SCAN_ENGINES,
    EngineGuess,
    EngineLogScan,
    FieldStats,
    StatsPoint,
    StatsSeries,
    engines_recognising,
    scan_engine_file,
    scan_engine_stream,
    scan_engine_text,
)
from servelab.engines.logstamps import StampReader
from servelab.engines.signatures import SIGNATURES, EventKind
from tests.engines.test_enginelog import (
    SGLANG_LINE,
    SGLANG_OLD_LINE,
    SGLANG_SPEC_DP1_LINE,
    VLLM_CPU_LINE,
    VLLM_KV_FULL_LINE,
)

LOGS = Path(__file__).parent / "data" / "logs"
DOC = Path(__file__).parents[2] / "docs" / "ENGINE_SCAN.md"


def example(engine: str, name: str) -> str:
    """The real line a signature is checked against."""
    return next(sig.example for sig in SIGNATURES[engine] if sig.name == name)


def metrics_page(engine: str) -> str:
    """A /metrics page as the engine's prometheus_client writes it."""
    registry = CollectorRegistry()
    names = {
        "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"),
        "vllm": (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
        ),
    }[engine]
    for name, value in zip(names, (48, 6, 0.52), strict=True):
        Gauge(name, name, ["model_name"], registry=registry).labels("m").set(value)
    Counter(f"{engine}:prompt_tokens", "prompt", ["model_name"], registry=registry).labels("m")
    return generate_latest(registry).decode()


# --- logs ---------------------------------------------------------------------------------


def test_a_vllm_log_is_guessed_and_read_with_its_own_stamps():
    scan = scan_engine_file(LOGS / "vllm_startup.log")
    assert (scan.kind, scan.engine, scan.lines, scan.recognised) == ("log", "vllm", 43, True)
    assert scan.guess.how == "log_lines"
    assert scan.guess.matches["sglang"] == 0 and scan.guess.matches["vllm"] > 10
    assert scan.version == "0.11.1" and scan.looks_like is None
    moe = next(e for e in scan.events if e.kind is EventKind.MOE_CONFIG_MISSING)
    assert (moe.count, moe.line_no, moe.last_line_no) == (2, 20, 21)
    assert moe.fields["experts"] == 128
    assert scan.counts[EventKind.MOE_CONFIG_MISSING] == 2
    assert scan.stamp_style == "vllm"
    stats = scan.stats
    assert stats is not None and stats.times == "engine_stamps"
    (point,) = stats.points
    assert (point.line_no, point.stamp) == (43, "11-25 08:02:18")
    assert point.t_s == 102.0  # from 08:00:36, the log's first stamp
    assert (point.running, point.queued, point.kv_usage) == (64, 0, pytest.approx(0.031))
    assert point.gen_throughput == 2315.4


def test_an_sglang_log_stamped_by_its_launcher_is_placed_by_those_stamps():
    scan = scan_engine_file(LOGS / "sglang_startup.log")
    assert scan.engine == "sglang" and scan.guess.matches["vllm"] == 0
    assert scan.stamp_style == "iso8601" and scan.stamped_lines == scan.lines == 39
    kinds = {event.kind for event in scan.events}
    assert {EventKind.DEEPGEMM_SCALE_FORMAT, EventKind.KV_CACHE_CAPACITY} <= kinds
    assert scan.stats is not None and scan.stats.times == "engine_stamps"
    decode = {p.line_no: p for p in scan.stats.points if p.line_no in (37, 39)}
    assert decode[37].stamp == "2026-11-29T15:08:10.365Z"
    assert decode[39].t_s - decode[37].t_s == pytest.approx(4.014)  # type: ignore[operator]
    assert (decode[39].running, decode[39].queued) == (64, 62)


def test_a_servelab_engine_log_is_read_without_its_two_stamps(tmp_path: Path):
    """engine.log's own lines carry UTC and the bench clock: both come off the line."""
    path = tmp_path / "engine.log"
    path.write_text(
        f"2026-11-29T15:43:01.123456Z 8123.456789 {VLLM_KV_FULL_LINE}\n"
        f"2026-11-29T15:43:03.123456Z 8125.456789 {VLLM_KV_FULL_LINE}\n"
    )
    scan = scan_engine_file(path)
    assert scan.engine == "vllm" and scan.stamp_style == "iso8601"
    assert scan.stats is not None
    assert [p.t_s for p in scan.stats.points] == [0.0, 2.0]


def test_stats_lines_without_stamps_are_placed_by_line_order():
    text = "\n".join([VLLM_CPU_LINE, "", VLLM_KV_FULL_LINE, VLLM_KV_FULL_LINE]) + "\n"
    scan = scan_engine_text(text)
    assert scan.stats is not None and scan.stats.times == "line_order"
    assert [(p.line_no, p.t_s) for p in scan.stats.points] == [(1, None), (3, None), (4, None)]
    assert scan.stats.points[0].stamp == "12-01 09:45:45"
    running = next(f for f in scan.stats.fields if f.field == "running")
    assert (running.samples, running.min, running.median, running.max) == (3, 0, 5, 5)


def test_sglang_stamps_and_data_parallel_ranks_add_up():
    text = f"{SGLANG_OLD_LINE}\n{SGLANG_SPEC_DP1_LINE}\n{SGLANG_LINE}\n"
    scan = scan_engine_text(text, engine="sglang")
    assert scan.guess == EngineGuess(engine="sglang", how="given", matches={"sglang": 3, "vllm": 0})
    assert scan.stamp_style == "sglang"
    assert scan.stats is not None and scan.stats.times == "engine_stamps"
    assert [p.running for p in scan.stats.points] == [64, 64 + 14, 2 + 14]
    assert [p.stamp for p in scan.stats.points] == [
        "[2026-11-29 15:08:10 TP0]",
        "[2026-09-27 00:15:25 DP1 TP4]",
        "[2026-03-04 15:13:22]",
    ]


def test_stamps_of_each_style_and_vllm_over_new_year():
    reader = StampReader()
    late = reader.read("(APIServer pid=1) INFO 12-31 23:59:59 [loggers.py:127] Engine 000: x")
    early = reader.read("(APIServer pid=1) INFO 01-01 00:00:01 [loggers.py:127] Engine 000: x")
    assert late is not None and early is not None and early.unix_s - late.unix_s == 2.0
    iso = StampReader().read("2025-01-02 10:00:00,250 - vllm - INFO - x")
    zoned = StampReader().read("2025-01-02T11:00:00.250+01:00 x")
    assert iso is not None and zoned is not None and iso.unix_s == zoned.unix_s
    assert StampReader().read("Loading safetensors checkpoint shards: 100% Completed") is None


def test_gzip_is_told_by_its_bytes_and_reads_as_the_plain_file(tmp_path: Path):
    plain = scan_engine_file(LOGS / "vllm_startup.log")
    packed = tmp_path / "vllm.log.gz"
    packed.write_bytes(gzip.compress((LOGS / "vllm_startup.log").read_bytes()))
    assert scan_engine_file(packed).model_copy(update={"source": plain.source}) == plain
    streamed = scan_engine_stream(io.BytesIO(packed.read_bytes()), source="-")
    assert streamed.model_copy(update={"source": plain.source}) == plain


def test_a_given_engine_that_wrote_none_of_it_reads_nothing_and_says_whose_it_looks():
    scan = scan_engine_file(LOGS / "vllm_startup.log", engine="sglang")
    assert not scan.recognised and scan.stats is None
    assert scan.guess.how == "given" and scan.guess.matches["vllm"] > 10
    assert scan.looks_like == "vllm 0.11.1 (its version line, line 1)"


def test_a_log_of_another_engine_is_named_and_nothing_is_read():
    scan = scan_engine_file(LOGS / "embedded_startup.log")
    assert (scan.engine, scan.recognised, scan.events) == (None, False, [])
    assert scan.looks_like is not None and scan.looks_like.startswith("transformers (")
    empty = scan_engine_text("")
    assert (empty.lines, empty.recognised, empty.looks_like) == (0, False, None)


def test_a_version_line_alone_is_not_a_reading():
    scan = scan_engine_text(example("vllm", "vllm.api_server_version") + "\nhello\n")
    assert scan.engine == "vllm" and scan.version == "0.11.1"
    assert not scan.recognised
    assert scan.looks_like == "vllm 0.11.1 (its version line, line 1)"


def test_only_an_engines_own_lines_tell_it_apart():
    assert engines_recognising(VLLM_KV_FULL_LINE) == {"vllm"}
    assert engines_recognising(SGLANG_LINE) == {"sglang"}
    assert engines_recognising(example("sglang", "sglang.kv_cache_pool_full_retract")) == {"sglang"}
    # Shared by both engines' signature sets, or with transformers serve: no vote.
    assert engines_recognising(example("vllm", "torch.cuda_out_of_memory")) == frozenset()
    assert engines_recognising("INFO:     Application startup complete.") == frozenset()


# --- /metrics pages --------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_saved_metrics_page_is_one_sample_of_its_engine(engine: str):
    scan = scan_engine_text(metrics_page(engine), source="metrics.txt")
    assert (scan.kind, scan.engine, scan.recognised) == ("metrics", engine, True)
    assert scan.guess.how == "metric_names" and scan.guess.matches[engine] >= 3
    assert scan.stats is not None and scan.stats.times == "snapshot"
    (point,) = scan.stats.points
    assert (point.line_no, point.t_s) == (None, None)
    assert (point.running, point.queued, point.kv_usage) == (48, 6, 0.52)


def test_a_metrics_page_of_another_server_reads_nothing():
    registry = CollectorRegistry()
    Gauge("process_open_fds", "open fds", registry=registry).set(12)
    scan = scan_engine_text(generate_latest(registry).decode())
    assert (scan.kind, scan.engine, scan.recognised) == ("metrics", None, False)
    assert scan.looks_like == "a /metrics page of another server"
    given = scan_engine_text(metrics_page("sglang"), engine="vllm")
    assert (given.engine, given.recognised, given.looks_like) == (
        "vllm",
        False,
        "sglang (its metric names)",
    )


# --- bad input --------------------------------------------------------------------------------


def test_what_cannot_be_read_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="no file at"):
        scan_engine_file(tmp_path / "missing.log")
    with pytest.raises(ConfigError, match="is a folder"):
        scan_engine_file(tmp_path)
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gzip.compress(b"x" * 5000)[:20])
    with pytest.raises(ConfigError, match="is not a readable gzip file"):
        scan_engine_file(cut)
    with pytest.raises(ConfigError, match="no log reader for engine 'sim'"):
        scan_engine_text("x", engine="sim")


def test_the_cli_choices_are_the_engines_read():
    assert tuple(engine.value for engine in LogEngine) == SCAN_ENGINES


def test_the_doc_names_every_field_of_the_json():
    doc = DOC.read_text()
    for model in (EngineLogScan, EngineGuess, StatsSeries, StatsPoint, FieldStats):
        names = [*model.model_fields, *model.model_computed_fields]
        missing = [name for name in names if f"`{name}`" not in doc]
        assert not missing, f"{model.__name__}: {missing} not in docs/ENGINE_SCAN.md"


# --- the command --------------------------------------------------------------------------------


def scan_cli(*args: str, stdin: bytes | None = None):
    return CliRunner().invoke(app, ["engine", "scan", *args], input=stdin)


def test_the_command_prints_the_guess_the_events_and_the_series():
    result = scan_cli(str(LOGS / "vllm_startup.log"))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(r"engine\s+vllm \(guessed: \d+ of its lines matched, 0 of sglang's\)", out)
    assert re.search(r"version\s+0\.11\.1", out)
    assert re.search(r"moe_config_missing\s+warning\s+2\s+20", out)
    assert "times    the lines' own timestamps (vLLM's LEVEL MM-DD HH:MM:SS, no year)" in out
    assert re.search(r"KV cache usage \(%\)\s+1\s+3\.1\s+3\.1\s+3\.1", out)


def test_the_json_document_has_the_documented_keys():
    result = scan_cli(str(LOGS / "sglang_startup.log"), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document) == {*EngineLogScan.model_fields, "recognised"}
    assert document["engine"] == "sglang" and document["recognised"] is True
    assert document["stats"]["times"] == "engine_stamps"
    assert {"field", "samples", "min", "median", "max"} == set(document["stats"]["fields"][0])


def test_standard_input_and_gzip_read_alike(tmp_path: Path):
    raw = (LOGS / "vllm_startup.log").read_bytes()
    piped = scan_cli("-", "--json", stdin=gzip.compress(raw))
    assert piped.exit_code == 0, piped.output
    packed = tmp_path / "vllm.log.gz"
    packed.write_bytes(gzip.compress(raw))
    named = scan_cli(str(packed), "--json")
    assert json.loads(piped.stdout) == json.loads(named.stdout) | {"source": "-"}


def test_nothing_recognised_is_one_line_and_exit_2():
    result = scan_cli(str(LOGS / "vllm_startup.log"), "--engine", "sglang")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        f"error: nothing was read from {LOGS / 'vllm_startup.log'}: no sglang stats line or "
        "known message among its 43 lines; it looks like vllm 0.11.1 (its version line, "
        "line 1)\n"
    )
    empty = scan_cli("-", stdin=b"")
    assert (empty.exit_code, empty.stderr) == (2, "error: nothing was read from -: it is empty\n")


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path):
    missing = scan_cli(str(tmp_path / "nope.log"))
    assert (missing.exit_code, missing.stderr) == (2, f"error: no file at {tmp_path}/nope.log\n")
    cut = tmp_path / "cut.gz"
    cut.write_bytes(gzip.compress(b"line\n" * 1000)[:30])
    unreadable = scan_cli(str(cut))
    assert unreadable.exit_code == 2
    assert unreadable.stderr.startswith(f"error: {cut} is not a readable gzip file: ")
    unknown = scan_cli(str(LOGS / "vllm_startup.log"), "--engine", "tgi")
    assert unknown.exit_code == 2 and len(unknown.stderr.splitlines()) == 1
    assert "'tgi' is not one of 'sglang', 'vllm'" in unknown.stderr


def test_plot_draws_the_series_or_says_why_not(tmp_path: Path):
    png = tmp_path / "stats.png"
    drawn = scan_cli(str(LOGS / "sglang_startup.log"), "--plot", str(png))
    assert drawn.exit_code == 0, drawn.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn.stderr == f"plot: {png}\n"
    single = scan_cli(str(LOGS / "vllm_startup.log"), "--plot", str(tmp_path / "one.png"))
    assert single.exit_code == 0
    assert single.stderr == "not plotted: fewer than 2 stats samples\n"
    assert not (tmp_path / "one.png").exists()
