"""AIPerf profile_export_aiperf.json (one level each) and its sweep summary (both)."""

from __future__ import annotations

import pytest

from servelab.bench.peers.aiperf import parse_aiperf_sweep
from servelab.bench.peers.common import Doc, NotImportable
from tests.peers.peerfiles import AIPERF_C1, AIPERF_C8, AIPERF_SWEEP, imported, read_json

# servelab's latency <- AIPerf's metric: its inter_token_latency is other tools' TPOT and
# its inter_chunk_latency their ITL.
_LATENCIES = {
    "ttft": "time_to_first_token",
    "tpot": "inter_token_latency",
    "itl": "inter_chunk_latency",
    "e2e_latency": "request_latency",
}
_STATS = {"mean": "avg", "median": "p50", "std": "std", "p90": "p90", "p95": "p95", "p99": "p99"}


def _same_numbers(s, metrics, *, with_std: bool) -> None:
    assert s.completed == metrics["completed_request_count"]["avg"]
    assert metrics["benchmark_duration"]["unit"] == "sec"
    assert s.duration == metrics["benchmark_duration"]["avg"]
    assert s.total_input_tokens == metrics["total_isl"]["avg"]
    assert s.total_output_tokens == metrics["total_output_tokens"]["avg"]
    assert s.request_throughput == metrics["request_throughput"]["avg"]
    assert s.input_throughput == metrics["input_token_throughput"]["avg"]
    assert s.output_throughput == metrics["output_token_throughput"]["avg"]
    assert s.total_throughput == metrics["total_token_throughput"]["avg"]
    assert s.concurrency == metrics["effective_concurrency"]["avg"]
    assert s.max_concurrent_requests == metrics["effective_concurrency"]["max"]
    for metric, name in _LATENCIES.items():
        assert metrics[name]["unit"] == "ms"
        for stat, key in _STATS.items():
            ours = getattr(s, f"{stat}_{metric}_ms")
            if stat == "std" and not with_std:
                assert ours is None  # the sweep's std is between trials
            else:
                assert ours == metrics[name][key], (stat, metric)


@pytest.mark.parametrize(("path", "concurrency"), [(AIPERF_C1, 1), (AIPERF_C8, 8)])
def test_profile_export_is_one_level_with_its_numbers(path, concurrency):
    data = read_json(path)
    run = imported(path)
    assert (run.tool, run.version) == ("aiperf", "0.13.0")
    (s,) = run.summary.levels
    assert (s.load_mode, s.max_concurrency) == ("concurrency", concurrency)
    assert data["input_config"]["phases"][0]["concurrency"] == concurrency
    _same_numbers(s, data, with_std=True)
    assert s.failed == 0 and data["error_summary"] == []
    assert s.num_requests == data["input_config"]["phases"][0]["requests"]
    assert s.warmup_requests == 0  # a profiling phase only
    assert s.interrupted is False
    assert s.input_token_source == "workload"  # use_server_token_count false
    # AIPerf has no peak of output tokens per second and no client self-check.
    assert s.max_output_tokens_per_s is None and s.client is None
    if concurrency == 1:
        assert s.single_stream_tok_s == data["e2e_output_token_throughput"]["avg"]
    else:
        assert s.single_stream_tok_s is None
    assert run.records == []


def test_profile_target_and_notes():
    info = imported(AIPERF_C8).summary.run
    assert info.target["url"] == "http://127.0.0.1:18123"
    assert info.target["model"] == "servelab-sim"
    assert info.target["engine"] == "openai"
    assert info.target["stream"] is True
    assert info.versions == {"aiperf": "0.13.0"}
    assert info.workload["input_len"] == 64 and info.workload["output_len"] == 32
    notes = " ".join(info.notes)
    assert "inter_token_latency is imported as TPOT" in notes
    assert "profile_export.jsonl" in info.notes[0]


def test_sweep_summary_gives_both_levels():
    data = read_json(AIPERF_SWEEP)
    run = imported(AIPERF_SWEEP)
    assert run.tool == "aiperf" and run.generation == "sweep aggregate"
    levels = run.summary.levels
    assert [s.max_concurrency for s in levels] == [1, 8]
    for s, combo in zip(levels, data["per_combination_metrics"], strict=True):
        _same_numbers(s, combo["metrics"], with_std=False)
        assert s.failed == 0  # its error rate is 0 %
        assert s.num_requests is None and s.warmup_requests is None
    # The same run's per-level files agree with the sweep (one trial per level).
    for s, path in zip(levels, (AIPERF_C1, AIPERF_C8), strict=True):
        (own,) = imported(path).summary.levels
        assert s.total_throughput == own.total_throughput
        assert s.p99_ttft_ms == own.p99_ttft_ms
    assert run.summary.run.target["url"] is None
    assert any("mean over the 1 trial(s)" in n for n in run.summary.run.notes)


def test_a_sweep_over_something_else_than_the_load_is_refused():
    data = read_json(AIPERF_SWEEP)
    for combo in data["per_combination_metrics"]:
        combo["parameters"] = {"isl": 64}
    with pytest.raises(NotImportable, match=r"its sweep varies isl.*profile_export_aiperf\.json"):
        parse_aiperf_sweep([Doc(data)])
