"""GuideLLM benchmarks.json in its three schema generations (0.8.1, 0.6.1, 0.3.1)."""

from __future__ import annotations

import pytest

from tests.peers.peerfiles import GUIDELLM, imported, read_json

_TOTALS = {"0.8.1": "metrics", "0.6.1": "metrics", "0.3.1": "benchmark"}
_PERCENTILES = ("p90", "p95", "p99")


def _successful(benchmark, name):
    return benchmark["metrics"][name]["successful"]


def _stats(d):
    return {
        "mean": d["mean"],
        "median": d["median"],
        "std": d["std_dev"],
        **{p: d["percentiles"][p] for p in _PERCENTILES},
    }


@pytest.mark.parametrize("version", sorted(GUIDELLM))
def test_every_benchmark_is_a_level_with_its_numbers(version):
    path = GUIDELLM[version]
    data = read_json(path)
    run = imported(path)
    assert run.tool == "guidellm"
    assert run.version == (None if version == "0.3.1" else version)
    levels = run.summary.levels
    assert [s.max_concurrency for s in levels] == [1, 8]
    for s, b in zip(levels, data["benchmarks"], strict=True):
        totals = (
            b["metrics"]["request_totals"] if _TOTALS[version] == "metrics" else b["request_totals"]
        )
        assert s.completed == totals["successful"]
        assert s.failed == totals["errored"]
        assert s.cancelled == totals["incomplete"]
        assert s.num_requests == totals["total"]
        assert s.duration == b["duration"]
        assert s.total_input_tokens == _successful(b, "prompt_token_count")["total_sum"]
        assert s.total_output_tokens == _successful(b, "output_token_count")["total_sum"]
        assert s.request_throughput == _successful(b, "requests_per_second")["mean"]
        assert s.output_throughput == _successful(b, "output_tokens_per_second")["mean"]
        assert s.total_throughput == _successful(b, "tokens_per_second")["mean"]
        assert s.concurrency == _successful(b, "request_concurrency")["mean"]
        if version == "0.3.1":
            assert s.input_throughput is None  # 0.3 has no prompt_tokens_per_second
        else:
            assert s.input_throughput == _successful(b, "prompt_tokens_per_second")["mean"]
        for stat, value in _stats(_successful(b, "time_to_first_token_ms")).items():
            assert getattr(s, f"{stat}_ttft_ms") == value, stat
        # Other tools' TPOT is GuideLLM's inter_token_latency, not its time_per_output_token.
        for stat, value in _stats(_successful(b, "inter_token_latency_ms")).items():
            assert getattr(s, f"{stat}_tpot_ms") == value, stat
        # request_latency is in seconds.
        for stat, value in _stats(_successful(b, "request_latency")).items():
            assert getattr(s, f"{stat}_e2e_latency_ms") == pytest.approx(value * 1000, rel=1e-12)
        # No chunk gaps, no peak per second, no client self-check: absent, not 0.
        assert all(getattr(s, f"{st}_itl_ms") is None for st in ("mean", "median", "p99"))
        assert s.max_output_tokens_per_s is None
        assert s.client is None and s.input_token_source is None
        assert s.warmup_requests == 0
    assert run.records == []


def test_guidellms_own_tpot_is_not_imported():
    b = read_json(GUIDELLM["0.8.1"])["benchmarks"][0]
    (s, _) = imported(GUIDELLM["0.8.1"]).summary.levels
    theirs = _successful(b, "time_per_output_token_ms")["mean"]  # includes TTFT: ~21 ms
    assert s.mean_tpot_ms != theirs
    assert s.mean_tpot_ms == _successful(b, "inter_token_latency_ms")["mean"]  # ~20 ms


@pytest.mark.parametrize("version", sorted(GUIDELLM))
def test_target_workload_and_notes(version):
    info = imported(GUIDELLM[version]).summary.run
    assert info.target["url"] == "http://127.0.0.1:18123"
    assert info.target["model"] == "servelab-sim"
    assert info.target["engine"] == "openai"
    assert info.workload["input_len"] == 64 and info.workload["output_len"] == 32
    notes = " ".join(info.notes)
    assert "inter_token_latency_ms is imported as TPOT" in notes
    assert ("includes TTFT" in notes) == (version != "0.3.1")
    assert "first and last token times" in info.notes[0]
    if version != "0.3.1":
        assert info.host["platform"].startswith("Linux")
