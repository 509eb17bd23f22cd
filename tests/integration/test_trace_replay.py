"""`servelab bench --dataset trace:PATH` against the simulator: a Mooncake trace replayed
through the CLI, each request sent at its timestamp with the trace's lengths."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from statistics import median

import pytest

from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.workload import WorkloadSpec
from tests.conftest import SERVELAB
from tests.traces import MOONCAKE

TRACE = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
SHARED_BLOCKS = [0, 1, 0, 1, 1, 0, 2, 1, 1, 2, 0, 1, 0, 2, 3, 3, 2, 3, 4, 4]
"""Leading blocks each request shares with one before it (tests/bench/test_traces.py)."""
NS_PER_MS = 1_000_000


def replay(url: str, out: Path, *options: str) -> tuple[dict, list[dict]]:
    """One replay through the CLI: its summary.json and its measured requests by index."""
    command = [*SERVELAB, "bench", "--url", url, "--dataset", f"trace:{MOONCAKE}"]
    command += ["--out", str(out), "--runs-dir", str(out.parent), "--json", *options]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "complete"
    summary = json.loads((out / "summary.json").read_text())
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    measured = sorted((r for r in rows if not r["warmup"]), key=lambda r: r["index"])
    return summary, measured


def planned_ms(rows: list[dict]) -> list[float]:
    """Each request's planned send time after the level's first, in ms."""
    return [(r["t_scheduled_ns"] - rows[0]["t_scheduled_ns"]) / NS_PER_MS for r in rows]


def schedule_error_ms(rows: list[dict]) -> list[float]:
    """Actual send - planned send, less connection set-up, as the summary counts it."""
    return [
        max(r["t_send_ns"] - r["t_scheduled_ns"] - r["connect_ns"], 0) / NS_PER_MS for r in rows
    ]


def send_span_s(rows: list[dict]) -> float:
    sends = [r["t_send_ns"] for r in rows]
    return (max(sends) - min(sends)) / 1e9


@pytest.mark.timing
def test_a_mooncake_trace_is_sent_at_its_timestamps_with_its_lengths(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=2)
    summary, rows = replay(sim.url, tmp_path / "run", "--trace-speed", "4")
    (level,) = summary["levels"]
    assert (level["load_mode"], level["burstiness"], level["max_concurrency"]) == (
        "request_rate",
        None,
        None,
    )
    assert level["num_requests"] == level["completed"] == len(rows) == len(TRACE)
    # The level's rate is the replay's: arrivals between the first and last, sped up 4x.
    span_s = (TRACE[-1]["timestamp"] - TRACE[0]["timestamp"]) / 1000 / 4
    assert level["request_rate"] == pytest.approx((len(TRACE) - 1) / span_s)
    # Planned at the trace's timestamps divided by the speed, to the nanosecond.
    assert planned_ms(rows) == [t["timestamp"] / 4 for t in TRACE]
    # Sent on time: the schedule error is small, and the summary reports the same numbers.
    errors = schedule_error_ms(rows)
    assert_sent_on_time(rows)
    client = level["client"]
    assert client["max_schedule_lag_ms"] == pytest.approx(max(errors))
    assert client["p99_schedule_lag_ms"] < 25
    # The trace's lengths: exact prompts through the simulator's /tokenize, its outputs.
    assert [r["prompt_tokens"] for r in rows] == [t["input_length"] for t in TRACE]
    assert [r["output_tokens"] for r in rows] == [t["output_length"] for t in TRACE]
    assert [r["shared_tokens"] for r in rows] == [
        min(blocks * 512, t["input_length"]) for blocks, t in zip(SHARED_BLOCKS, TRACE, strict=True)
    ]
    workload = summary["run"]["workload"]
    assert (workload["trace_format"], workload["trace_speed"]) == ("mooncake", 4.0)


@pytest.mark.timing
def test_a_window_replays_its_requests_and_speed_halves_its_duration(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=2)
    inside = [t for t in TRACE if 1000 <= t["timestamp"] < 3000]
    window = ("--trace-window", "1s:3s", "--warmup", "0")
    _, real_time = replay(sim.url, tmp_path / "x1", *window)
    _, twice = replay(sim.url, tmp_path / "x2", *window, "--trace-speed", "2")
    first = inside[0]["timestamp"]
    assert planned_ms(real_time) == [t["timestamp"] - first for t in inside]
    assert planned_ms(twice) == [(t["timestamp"] - first) / 2 for t in inside]
    assert [r["output_tokens"] for r in real_time] == [t["output_length"] for t in inside]
    assert_twice_as_fast(twice, real_time)
    assert_sent_on_time(real_time + twice)


def assert_sent_on_time(rows: list[dict]) -> None:
    """The typical schedule error is under 2 ms."""
    assert median(schedule_error_ms(rows)) < 2


def assert_twice_as_fast(twice: list[dict], real_time: list[dict]) -> None:
    """The replay at speed 2 sends over half the span of the one in real time."""
    # planned exactly 2:1 (above); the window's 1.946 s span makes 0.02 about 39 ms of send
    # lag between the faster replay's first and last request
    assert send_span_s(twice) / send_span_s(real_time) == pytest.approx(0.5, abs=0.02)


def sent(planned_ms: list[float], late_ms: float, connect_ms: float = 0.0) -> list[dict]:
    """Rows of requests sent `late_ms` after their plan, `connect_ms` of it connecting."""
    return [
        {
            "t_scheduled_ns": round(t * NS_PER_MS),
            "t_send_ns": round((t + late_ms) * NS_PER_MS),
            "connect_ns": round(connect_ms * NS_PER_MS),
        }
        for t in planned_ms
    ]


WINDOW_MS = [0.0, 120.0, 700.0, 1100.0, 1946.0]


def test_sends_3_ms_late_are_off_schedule_unless_connecting_took_it():
    """The negative control of the schedule error: 1.5x its 2 ms bound late is caught, and
    the same lateness spent setting up a connection is not the schedule's."""
    with pytest.raises(AssertionError):
        assert_sent_on_time(sent(WINDOW_MS, late_ms=3.0))
    assert_sent_on_time(sent(WINDOW_MS, late_ms=3.0, connect_ms=2.0))
    assert_sent_on_time(sent(WINDOW_MS, late_ms=1.0))


def test_a_faster_replay_drifting_by_60_ms_is_not_twice_as_fast():
    """The negative control of the speed check: the speed-2 replay's sends drift 3% of the
    real-time span (1.5x the 0.02 margin) behind its plan, one within the margin does not."""
    real_time = sent(WINDOW_MS, late_ms=1.0)

    def faster(drift: float) -> list[dict]:
        """Planned at half the window's times, each sent `drift` of its own time late."""
        rows = sent([t / 2 for t in WINDOW_MS], late_ms=1.0)
        for row, t in zip(rows, WINDOW_MS, strict=True):
            row["t_send_ns"] += round(drift * t * NS_PER_MS)
        return rows

    with pytest.raises(AssertionError):
        assert_twice_as_fast(faster(0.03), real_time)
    assert_twice_as_fast(faster(0.01), real_time)


def test_prompts_repeated_across_a_runs_builds_count_as_shared(start_sim, tmp_path):
    """The warm-up and every level are built apart; the run still knows what it sent."""
    sim = start_sim(ttft_ms=2, itl_ms=1)

    def shared(workload: WorkloadSpec, name: str) -> list[list[int]]:
        config = BenchConfig(
            url=sim.url, out=tmp_path / name, workload=workload, levels=[1, 2], num_requests=3
        )
        run_dir = run_bench(config).run_dir
        rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
        return [
            [
                r["shared_tokens"]
                for r in sorted(rows, key=lambda r: r["index"])
                if r["level"] == level and not r["warmup"]
            ]
            for level in (0, 1)
        ]

    # One prompt: the warm-up sent it first, so every measured request repeats it whole.
    assert shared(WorkloadSpec(dataset="fixed", output_len=2), "fixed") == [[5] * 3] * 2
    # A random prefix is drawn per build: each level's first request repeats nothing.
    random = WorkloadSpec(input_len=24, output_len=2, shared_prefix_len=8)
    assert shared(random, "random") == [[0, 8, 8]] * 2
