"""The load generator against the simulator: real HTTP on loopback, known timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.bench.endpoint import Api
from servelab.bench.load import LoadMode
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.workload import WorkloadSpec


def bench(url: str, tmp_path: Path, **overrides) -> tuple:
    workload = overrides.pop("workload", WorkloadSpec(input_len=32, output_len=16))
    config = BenchConfig(url=url, out=tmp_path / "run", workload=workload, **overrides)
    outcome = run_bench(config)
    records = [
        json.loads(line) for line in (outcome.run_dir / "requests.jsonl").read_text().splitlines()
    ]
    return outcome.summary, records


def test_sweep_writes_summary_requests_and_catalog(start_sim, tmp_path):
    sim = start_sim(ttft_ms=20, itl_ms=5)
    summary, records = bench(sim.url, tmp_path, levels=[1, 4], num_requests=8, warmup=2)
    assert summary.status == "complete"
    assert [level.max_concurrency for level in summary.levels] == [1, 4]
    for level in summary.levels:
        assert (level.completed, level.failed, level.warmup_requests) == (8, 0, 2)
        assert level.total_output_tokens == 8 * 16
        assert level.input_token_source == "usage"
        assert level.total_input_tokens == 8 * 32  # exact lengths through the sim's /tokenize
        assert level.max_concurrent_requests <= level.max_concurrency
    assert len(records) == 2 * (8 + 2)
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["schema"] == "servelab.bench/1"
    assert saved["run"]["workload"]["input_len_method"] == "server"
    assert saved["run"]["target"]["model"] == "servelab-sim"
    assert (tmp_path / "catalog.sqlite").exists()


@pytest.mark.timing
def test_open_loop_sends_on_schedule(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=2)
    summary, records = bench(
        sim.url, tmp_path, mode=LoadMode.REQUEST_RATE, levels=[40], num_requests=80, warmup=0
    )
    level = summary.levels[0]
    assert level.request_rate == 40 and level.max_concurrency is None
    assert level.completed == 80
    assert_sent_on_schedule(records)
    assert level.client.p99_schedule_lag_ms < 25
    sends = sorted(r["t_send_ns"] for r in records)
    span_s = (sends[-1] - sends[0]) / 1e9
    # Poisson: 80 arrivals at 40/s. The seeded draw plans its 79 gaps over 2.06 s (38.3/s),
    # so the 35% lets the sends' span stretch by about 1 s or shrink by 0.6 s
    assert 79 / span_s == pytest.approx(40, rel=0.35)


def assert_sent_on_schedule(records: list[dict]) -> None:
    """Sent on time and never drifting: the typical lag is small and does not grow over the
    level (one late send on a busy 2-core machine is noise, not drift)."""
    lags_ms = [
        (r["t_send_ns"] - r["t_scheduled_ns"]) / 1e6
        for r in sorted(records, key=lambda r: r["t_scheduled_ns"])
    ]
    assert sorted(lags_ms)[len(lags_ms) // 2] < 2
    assert sum(lags_ms[-20:]) / 20 < sum(lags_ms[:20]) / 20 + 5


def sends(lags_ms: list[float]) -> list[dict]:
    """Records of sends 25 ms apart, each `lags_ms` after its planned time, out of order."""
    planned = [k * 25_000_000 for k in range(len(lags_ms))]
    rows = [
        {"t_scheduled_ns": t, "t_send_ns": t + round(lag * 1e6)}
        for t, lag in zip(planned, lags_ms, strict=True)
    ]
    return rows[1::2] + rows[::2]  # the check orders them by plan itself


def test_sends_within_the_margins_are_on_schedule():
    """The controls' other half: a 1 ms lag, rising by 2.5 ms at the end, passes."""
    assert_sent_on_schedule(sends([1.0] * 60 + [3.5] * 20))


@pytest.mark.parametrize(
    "lags_ms",
    [
        # 1.5x the bound on the median lag (2 ms), no drift
        pytest.param([3.0] * 80, id="every-send-3-ms-late"),
        # the median at 0.5 ms, but the last 20 sends 7.5 ms behind the first 20 (5 ms bound)
        pytest.param([0.5] * 60 + [8.0] * 20, id="falling-7.5-ms-behind-at-the-end"),
    ],
)
def test_sends_late_or_drifting_past_a_margin_are_off_schedule(lags_ms):
    """The negative control of the open-loop schedule check: each breach is 1.5x one bound
    and within the other, so loosening that bound by 2x lets it through and this fails."""
    with pytest.raises(AssertionError):
        assert_sent_on_schedule(sends(lags_ms))


@pytest.mark.timing
def test_duration_mode_stops_starting_requests(start_sim, tmp_path):
    sim = start_sim(ttft_ms=10, itl_ms=10)
    summary, records = bench(sim.url, tmp_path, levels=[4], duration_s=1.0, warmup=0)
    level = summary.levels[0]
    # 4 streams of 10 + 15 x 10 = 160 ms requests fill 1 s with about 25: 8 is a third of it
    assert level.failed == 0 and level.completed > 8
    first = min(r["t_send_ns"] for r in records)
    # no send after the level's 1 s; the 50 ms past it is not derived from a measured spread
    assert max(r["t_send_ns"] for r in records) - first < 1.0e9 + 5e7
    assert len({r["index"] for r in records}) == len(records)


@pytest.mark.timing
def test_completions_api_and_non_streaming(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=2)
    summary, _ = bench(sim.url, tmp_path / "a", api=Api.COMPLETIONS, num_requests=4, warmup=0)
    assert summary.levels[0].completed == 4 and summary.levels[0].mean_ttft_ms is not None
    summary, _ = bench(sim.url, tmp_path / "b", stream=False, num_requests=4, warmup=0)
    level = summary.levels[0]
    assert level.completed == 4 and level.mean_ttft_ms is None
    assert level.mean_e2e_latency_ms == pytest.approx(5 + 15 * 2, abs=15)


@pytest.mark.timing
def test_reasoning_counts_for_ttft_and_multi_token_chunks_for_itl(start_sim, tmp_path):
    sim = start_sim(ttft_ms=30, itl_ms=10, reasoning_tokens=4, tokens_per_chunk=2)
    summary, records = bench(sim.url, tmp_path, num_requests=4, warmup=0)
    level = summary.levels[0]
    assert level.completed == 4
    assert level.mean_ttft_ms == pytest.approx(30, abs=5)
    assert all(len(r["chunk_offsets_ns"]) == 8 for r in records)  # 16 tokens, 2 per chunk
    assert level.mean_itl_ms == pytest.approx(5, rel=0.2)  # 10 ms per 2-token chunk
    assert level.mean_tpot_ms == pytest.approx(70 / 15, rel=0.2)


def test_missing_usage_falls_back_to_chunk_count(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=2, usage=False)
    summary, records = bench(sim.url, tmp_path, num_requests=4, warmup=0)
    level = summary.levels[0]
    assert level.output_tokens_estimated and level.total_output_tokens == 4 * 16
    assert {r["output_token_source"] for r in records} == {"chunks"}


def test_rejected_pinning_field_is_dropped_once_with_a_note(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=2, reject_field=["ignore_eos"])
    summary, _ = bench(sim.url, tmp_path, num_requests=4, warmup=0)
    assert summary.levels[0].completed == 4 and summary.levels[0].failed == 0
    assert summary.run.target["pinning_fields"] == ["min_tokens"]
    assert any("ignore_eos" in note for note in summary.run.notes)


def test_exact_input_lengths_with_shared_prefix_and_range(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=1)
    workload = WorkloadSpec(input_len=64, output_len=8, range_ratio=0.5, shared_prefix_len=16)
    _, records = bench(sim.url, tmp_path, num_requests=12, warmup=0, workload=workload)
    assert all(r["prompt_tokens"] == r["input_tokens_target"] for r in records)
    lengths = [r["input_tokens_target"] for r in records]
    assert min(lengths) >= 32 and max(lengths) <= 64 and len(set(lengths)) > 1
    assert all(1 <= r["max_tokens"] <= 8 for r in records)


@pytest.mark.timing
def test_several_workers_share_the_load(start_sim, tmp_path):
    sim = start_sim(ttft_ms=10, itl_ms=5)
    summary, records = bench(sim.url, tmp_path, levels=[8], num_requests=32, workers=2, warmup=0)
    level = summary.levels[0]
    assert level.client.workers == 2 and level.completed == 32
    assert {r["worker"] for r in records} == {0, 1}
    assert len({r["index"] for r in records}) == 32
    # each request lasts 10 + 15 x 5 = 85 ms and the first 8 are sent together: all 8
    # overlap unless one of them is sent 85 ms after the others
    assert level.max_concurrent_requests == 8


def test_sharegpt_prompts_and_reply_lengths(start_sim, tmp_path):
    data = [
        {
            "conversations": [
                {"from": "human", "value": "tell me a story about a cat"},
                {"from": "gpt", "value": "once upon a time there was a cat"},
            ]
        },
        {"conversations": [{"from": "human", "value": "hi"}]},  # no reply: skipped
        {
            "conversation": [
                {"role": "user", "content": "what is two plus two exactly"},
                {"role": "assistant", "content": "it is four"},
            ]
        },
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    sim = start_sim(ttft_ms=5, itl_ms=1)
    workload = WorkloadSpec(dataset="sharegpt", path=path)
    _, records = bench(sim.url, tmp_path / "out", num_requests=6, warmup=0, workload=workload)
    assert sorted({(r["input_tokens_target"], r["max_tokens"]) for r in records}) == [
        (6, 3),
        (7, 8),
    ]
    assert all(r["prompt_tokens"] == r["input_tokens_target"] for r in records)


@pytest.mark.timing
def test_fixed_prompt_is_the_single_stream_test(start_sim, tmp_path):
    sim = start_sim(ttft_ms=10, itl_ms=5)
    workload = WorkloadSpec(dataset="fixed", output_len=20)
    summary, records = bench(sim.url, tmp_path, num_requests=3, warmup=0, workload=workload)
    level = summary.levels[0]
    assert {r["input_tokens_target"] for r in records} == {5}  # "Explain quantum ... detail."
    assert level.single_stream_tok_s == pytest.approx(20 / (0.010 + 19 * 0.005), rel=0.1)


def test_whole_request_timeout(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=100)
    summary, _ = bench(sim.url, tmp_path, num_requests=2, warmup=0, timeout_s=0.5)
    assert summary.levels[0].errors == {"timeout": 2}
