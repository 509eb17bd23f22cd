"""Conversations against the simulator: sessions of turns over real HTTP on loopback.

The simulator counts a prompt's tokens by words and its replies are words too, so each
turn's prompt is exactly the previous prompt, the reply the server gave, and the new
turn: 32 system + 64 user tokens, then + 16 reply + 64, and so on.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from servelab.bench.conversation import ConversationSpec, TurnRange
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.workload import WorkloadSpec
from tests.integration.test_faults import assert_no_traceback, run_cli

SYSTEM, TURN, REPLY, TURNS = 32, 64, 16, 3


def _workload(think_s: float = 0.0) -> WorkloadSpec:
    return WorkloadSpec(
        dataset="conversation",
        input_len=TURN,
        output_len=REPLY,
        shared_prefix_len=SYSTEM,
        conversation=ConversationSpec(turns=TurnRange(TURNS, TURNS), think_time_s=think_s),
    )


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]


def test_each_turn_resends_the_history_with_the_servers_replies(start_sim, tmp_path: Path):
    sim = start_sim(ttft_ms=10, itl_ms=2)
    config = BenchConfig(
        url=sim.url,
        levels=[4],
        num_requests=24,
        warmup=0,
        workload=_workload(),
        out=tmp_path / "run",
    )
    outcome = run_bench(config)
    (level,) = outcome.summary.levels
    assert level.completed == 24 and level.failed == 0
    records = _records(outcome.run_dir)
    sessions: dict[int, list[dict]] = {}
    for record in records:
        sessions.setdefault(record["session"], []).append(record)
    assert len(sessions) == 24 // TURNS
    for turns in sessions.values():
        turns.sort(key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == list(range(TURNS))
        # the server's own count of each prompt: the history grows by a reply and a turn
        prompts = [r["prompt_tokens"] for r in turns]
        assert prompts == [SYSTEM + TURN + k * (REPLY + TURN) for k in range(TURNS)]
        # each turn waits for the previous reply: sends in order, none overlapping
        for before, after in itertools.pairwise(turns):
            assert after["t_send_ns"] >= before["t_end_ns"]
        # its shared prefix is the previous prompt and reply
        assert [r["shared_tokens"] for r in turns[1:]] == [p + REPLY for p in prompts[:-1]]
    assert level.turns is not None and [t.turn for t in level.turns] == list(range(TURNS))
    assert [t.mean_input_tokens for t in level.turns] == [
        SYSTEM + TURN + k * (REPLY + TURN) for k in range(TURNS)
    ]
    assert level.prefix_cache is not None and level.prefix_cache.ideal_hit_rate is not None
    assert level.prefix_cache.ideal_hit_rate > 0.5


@pytest.mark.timing
def test_think_time_holds_the_session_between_turns(start_sim, tmp_path: Path):
    sim = start_sim(ttft_ms=5, itl_ms=1)
    config = BenchConfig(
        url=sim.url,
        levels=[2],
        num_requests=6,
        warmup=0,
        workload=_workload(think_s=0.2),
        out=tmp_path / "run",
    )
    records = _records(run_bench(config).run_dir)
    gaps = []
    for session in {r["session"] for r in records}:
        turns = sorted((r for r in records if r["session"] == session), key=lambda r: r["turn"])
        gaps += [(b["t_send_ns"] - a["t_end_ns"]) / 1e9 for a, b in itertools.pairwise(turns)]
    # seeded exponential waits of mean 0.2 s; a busy machine only lengthens a gap, so what
    # falls under 0.05 s is a wait left out (gaps of a few ms)
    assert gaps and sum(gaps) / len(gaps) > 0.05


def test_conversations_from_the_cli_and_their_refusals(start_sim, tmp_path: Path):
    sim = start_sim(ttft_ms=5, itl_ms=1)
    args = ["bench", "--url", sim.url, "--dataset", "conversation", "--turns", "2-3"]
    done = run_cli(*args, "--concurrency", "2", "--num-requests", "8", "--out", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["run"]["workload"]["turns"] == "2-3"
    assert summary["levels"][0]["turns"][0]["turn"] == 0
    for refused, message in [
        (["--request-rate", "2"], "closed loop"),
        (["--concurrency", "2", "--turns", "0"], "turns '0'"),
        (["--concurrency", "2", "--think-time", "2"], "not a duration"),
        (["--concurrency", "1", "--multi-turn"], "--multi-turn applies to --dataset sharegpt"),
    ]:
        result = run_cli(*args, *refused, "--out", str(tmp_path / "x"))
        assert result.returncode != 0 and message in result.stderr, result.stderr
        assert_no_traceback(result)


@pytest.mark.timing
def test_sglangs_page_size_from_its_server_info_sizes_the_ideal(start_sim, tmp_path: Path):
    """An SGLang-style engine reports its page size in /server_info, not in /metrics: the
    ideal is counted in its pages of 32, and its counters give the measured rate."""
    sim = start_sim(ttft_ms=5, itl_ms=1, metrics_style="sglang", block_size=32)
    config = BenchConfig(
        url=sim.url,
        metrics_url=sim.url + "/metrics",
        levels=[2],
        num_requests=12,
        warmup=0,
        workload=_workload(),
        out=tmp_path / "r",
    )
    (level,) = run_bench(config).summary.levels
    cache = level.prefix_cache
    assert cache is not None
    assert (cache.block_tokens, cache.block_source) == (32, "the engine's own report")
    assert cache.shareable_tokens % 32 == 0 and cache.ideal_hit_rate is not None
    # SGLang counts cached tokens as a request completes: a short level's last ones fall
    # past the level's last scrape, so its rate reads low, but far from a cache that is off
    assert cache.engine == "sglang" and cache.hit_rate is not None
    assert cache.hit_rate > cache.ideal_hit_rate / 2
