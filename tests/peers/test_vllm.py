"""vLLM bench serve --save-result JSON (c1 default, c8 with --save-detailed)."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.bench.peers.common import STATS
from servelab.core.units import NS_PER_S
from tests.peers.peerfiles import VLLM_C1, VLLM_C8, imported, read_json

_KEYS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e_latency": "e2el"}


@pytest.mark.parametrize(("path", "concurrency"), [(VLLM_C1, 1), (VLLM_C8, 8)])
def test_each_file_is_one_level_with_its_own_numbers(path, concurrency):
    data = read_json(path)
    run = imported(path)
    assert run.tool == "vllm" and run.version is None
    (s,) = run.summary.levels
    assert (s.load_mode, s.max_concurrency, s.request_rate) == ("concurrency", concurrency, None)
    assert data["request_rate"] == "inf"  # a string in the file
    assert s.num_requests == data["num_prompts"]
    for ours, theirs in (
        ("completed", "completed"),
        ("failed", "failed"),
        ("duration", "duration"),
        ("total_input_tokens", "total_input_tokens"),
        ("total_output_tokens", "total_output_tokens"),
        ("request_throughput", "request_throughput"),
        ("output_throughput", "output_throughput"),
        ("total_throughput", "total_token_throughput"),
        ("max_concurrent_requests", "max_concurrent_requests"),
        ("max_output_tokens_per_s", "max_output_tokens_per_s"),
    ):
        assert getattr(s, ours) == data[theirs], ours
    for metric, key in _KEYS.items():
        for stat in STATS:
            theirs = data.get(f"{stat}_{key}_ms")
            if theirs is not None:
                assert getattr(s, f"{stat}_{metric}_ms") == theirs, (stat, metric)
    # No input throughput key, no goodput without --goodput, and the input source unsaid.
    assert s.input_throughput is None
    assert s.request_goodput is None and data["request_goodput"] is None
    assert s.input_token_source is None
    assert s.client is None and s.warmup_requests is None


def test_c1_has_no_e2e_keys_so_its_latencies_give_them():
    data = read_json(VLLM_C1)
    assert "mean_e2el_ms" not in data and "p90_ttft_ms" not in data
    (s,) = imported(VLLM_C1).summary.levels
    e2e_ms = np.asarray(data["latencies"]) * 1000
    assert s.mean_e2e_latency_ms == pytest.approx(float(np.mean(e2e_ms)), rel=1e-12)
    assert s.median_e2e_latency_ms == pytest.approx(float(np.median(e2e_ms)), rel=1e-12)
    assert s.p99_e2e_latency_ms == pytest.approx(float(np.percentile(e2e_ms, 99)), rel=1e-12)
    assert s.concurrency == pytest.approx(sum(data["latencies"]) / data["duration"], rel=1e-12)
    # The percentiles vLLM did not write stay absent.
    assert s.p90_ttft_ms is None and s.p95_tpot_ms is None and s.p90_itl_ms is None
    assert "E2E statistics computed from its per-request latencies" in s.notes


def test_computing_e2e_from_latencies_gives_vllms_own_numbers():
    """The c8 file has both: the rule that fills c1's gap reproduces what vLLM wrote."""
    data = read_json(VLLM_C8)
    e2e_ms = np.asarray(data["latencies"]) * 1000
    assert float(np.mean(e2e_ms)) == pytest.approx(data["mean_e2el_ms"], rel=1e-12)
    assert float(np.std(e2e_ms)) == pytest.approx(data["std_e2el_ms"], rel=1e-12)
    assert float(np.percentile(e2e_ms, 99)) == pytest.approx(data["p99_e2el_ms"], rel=1e-12)


def test_c8_details_become_records_on_vllms_clock():
    data = read_json(VLLM_C8)
    run = imported(VLLM_C8)
    assert len(run.records) == 32
    for r, ttft, gaps, start, latency, out in zip(
        run.records,
        data["ttfts"],
        data["itls"],
        data["start_times"],
        data["latencies"],
        data["output_lens"],
        strict=True,
    ):
        offsets = [ttft]
        for gap in gaps:
            offsets.append(offsets[-1] + gap)
        assert r.chunk_offsets_ns == [round(t * NS_PER_S) for t in offsets]
        assert r.t_send_ns == round(start * NS_PER_S)
        assert r.t_end_ns == r.t_send_ns + round(latency * NS_PER_S)
        assert r.output_tokens == out and r.ok
        assert r.max_tokens == 0  # the file does not say what was asked
    # vLLM's latency is its last chunk: TTFT + the gaps, so the offsets end there.
    span = max(r.t_end_ns for r in run.records) - min(r.t_send_ns for r in run.records)
    assert span / NS_PER_S == pytest.approx(data["duration"], abs=0.01)


def test_target_names_the_model_and_the_client():
    info = imported(VLLM_C8).summary.run
    assert info.target["model"] == "servelab-sim"
    assert info.target["engine"] == "openai"  # backend openai-chat
    assert info.target["api"] == "openai-chat"
    assert info.target["url"] is None  # vLLM does not save the base URL
    assert any("vLLM's TTFT is its first SSE event with choices" in n for n in info.notes)
    assert info.notes[0].startswith(
        f"imported from vLLM bench serve (--save-result JSON) {VLLM_C8.name}"
    )
