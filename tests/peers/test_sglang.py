"""SGLang bench_serving JSONL, both key generations, against the files' own numbers."""

from __future__ import annotations

import math

import pytest

from servelab.bench.peers.common import METRICS, STATS
from servelab.core.units import NS_PER_S
from tests.peers.peerfiles import SGLANG_NEW, SGLANG_OLD, imported, read_lines


def test_current_keys_are_copied_level_by_level():
    lines = read_lines(SGLANG_NEW)
    run = imported(SGLANG_NEW)
    assert (run.tool, run.version, run.generation) == ("sglang", None, "0.2.12+ keys")
    assert [s.max_concurrency for s in run.summary.levels] == [1, 8]
    for s, line in zip(run.summary.levels, lines, strict=True):
        assert s.load_mode == "concurrency" and s.request_rate is None
        assert math.isinf(line["request_rate"])  # Infinity in the file: closed loop
        for key in (
            "completed",
            "duration",
            "total_input_tokens",
            "total_output_tokens",
            "request_throughput",
            "input_throughput",
            "output_throughput",
            "total_throughput",
            "concurrency",
            "max_concurrent_requests",
            "max_output_tokens_per_s",
        ):
            assert getattr(s, key) == line[key], key
        for metric in METRICS:
            for stat in STATS:
                key = f"{stat}_{metric}_ms"
                assert getattr(s, key) == line[key], key
        assert s.input_token_source == "workload"
        assert s.output_tokens_estimated is False


def test_what_the_file_lacks_is_none_not_zero():
    c1, c8 = imported(SGLANG_NEW).summary.levels
    # c=1 was run without --output-details: no request count, so no failed count either.
    assert c1.failed is None and c1.num_requests is None
    assert c8.failed == 0 and c8.num_requests == 32  # its errors array: 32 "" entries
    for s in (c1, c8):
        assert s.warmup_requests is None
        assert s.client is None
        assert s.telemetry is None
        assert s.request_goodput is None and s.slo_ms is None
        assert s.chunk_tokens_estimated is None


def test_c8_details_become_records_faithful_to_ttfts_and_itls():
    line = read_lines(SGLANG_NEW)[1]
    run = imported(SGLANG_NEW)
    assert {r.level for r in run.records} == {1}
    assert len(run.records) == 32
    for r, ttft, gaps, out, inp in zip(
        run.records,
        line["ttfts"],
        line["itls"],
        line["output_lens"],
        line["input_lens"],
        strict=True,
    ):
        assert r.ok and r.t_send_ns == 0  # no send times in the file
        offsets = [ttft]
        for gap in gaps:
            offsets.append(offsets[-1] + gap)
        assert r.chunk_offsets_ns == [round(t * NS_PER_S) for t in offsets]
        assert r.t_end_ns == r.chunk_offsets_ns[-1]
        assert (r.output_tokens, r.prompt_tokens) == (out, inp)
        assert r.max_tokens == 32  # random dataset, range ratio 1.0: every request asked 32
    # The records' E2E is the last text chunk; SGLang's own ends at [DONE], microseconds on.
    e2e_ms = [r.chunk_offsets_ns[-1] / 1e6 for r in run.records]
    assert sum(e2e_ms) / len(e2e_ms) == pytest.approx(line["mean_e2e_latency_ms"], abs=0.05)
    notes = " ".join(run.summary.run.notes)
    assert "level 1's 32 requests rebuilt" in notes and "t_send_ns is 0" in notes


def test_old_keys_map_with_ms_and_no_counts():
    lines = read_lines(SGLANG_OLD)
    run = imported(SGLANG_OLD)
    assert run.generation == "0.2.11-and-older keys"
    levels = run.summary.levels
    assert [(s.load_mode, s.request_rate, s.max_concurrency) for s in levels] == [
        ("request_rate", 2.0, None),
        ("request_rate", 8.0, None),
    ]
    for s, line in zip(levels, lines, strict=True):
        assert s.duration == line["benchmark_duration"]
        assert s.total_input_tokens == line["total_input"]
        assert s.total_output_tokens == line["total_output"]
        assert s.output_throughput == line["output_token_throughput"]
        assert s.median_ttft_ms == line["median_ttft"]  # ms, without a unit in the name
        assert s.median_itl_ms == line["median_itl"]
        assert s.mean_e2e_latency_ms == line["mean_e2e_latency"]
        assert s.median_e2e_latency_ms == line["median_e2e_latency"]
        for absent in (
            "completed",
            "failed",
            "num_requests",
            "request_throughput",
            "input_throughput",
            "total_throughput",
            "concurrency",
            "max_concurrent_requests",
            "max_output_tokens_per_s",
            "mean_ttft_ms",
            "p99_ttft_ms",
            "mean_tpot_ms",
            "median_tpot_ms",
            "p99_e2e_latency_ms",
        ):
            assert getattr(s, absent) is None, absent
    assert run.records == []
    notes = " ".join(run.summary.run.notes)
    assert "requested output lengths" in notes and "first gap" in notes


def test_the_run_says_it_was_imported_and_from_what():
    run = imported(SGLANG_NEW)
    info = run.summary.run
    assert run.summary.status == "complete"
    assert info.command == ["servelab", "import", str(SGLANG_NEW)]
    assert info.target["engine"] == "sglang"  # backend sglang-oai-chat
    assert info.target["backend"] == "sglang-oai-chat"
    assert info.target["tool"] == "sglang"
    assert info.target["source_file"] == SGLANG_NEW.name
    assert info.workload["input_len"] == 64 and info.workload["output_len"] == 32
    first = info.notes[0]
    assert first.startswith(f"imported from SGLang bench_serving (0.2.12+ keys) {SGLANG_NEW.name}")
    assert "no per-request records for level 0: no noise band, no distributions" in first
    assert "failed (level 0)" in first
    # The 0.2.11 file's backend is vllm (its OpenAI completions client).
    assert imported(SGLANG_OLD).summary.run.target["engine"] == "vllm"
