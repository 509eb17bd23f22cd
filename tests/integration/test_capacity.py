"""`servelab run --capacity` against the simulator, whose running-request cap and fixed
timing put the SLO's boundary where a hand derivation says."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from servelab.bench.capacity import CapacityPlan
from servelab.bench.load import LoadMode
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.workload import WorkloadSpec
from servelab.report.cost import usd_text
from tests.conftest import SERVELAB


def run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVELAB, "run", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.timing
def test_closed_loop_capacity_is_the_running_request_cap(start_sim, tmp_path: Path):
    """Cap C = 3 running requests; fixed timing: TTFT 20 ms, then 15 more tokens 30 ms
    apart, so a request holds its slot for S = 20 + 15 x 30 = 470 ms. SLO: TTFT <= 100 ms
    for 90% of requests (a margin of 80 ms over the 20 ms a request waits for nothing).

    - N <= 3 concurrent: every request finds a free slot at once, TTFT = 20 ms: 100% meet.
    - N = 4: one client more than slots; a queued request waits for a slot to free, at most
      S. Little's law (throughput at most C / S) puts the mean wait at W >= (N - C) / C x S
      = 157 ms. If a share p of requests wait over w0 = 80 ms (so miss the SLO), then
      W <= p S + (1 - p) w0, so p >= (W - w0) / (S - w0) = 0.20: at most 80% meet, under
      90%. More clients only queue more.

    So 1, 2 meet, 4 fails, the bisection's 3 meets: capacity 3, boundary 3 / 4."""
    sim = start_sim(ttft_ms=20, itl_ms=30, max_running_requests=3)
    out = tmp_path / "run"
    done = run(
        "--url",
        sim.url,
        "--slo",
        "ttft=100ms",
        "--capacity",
        "--input-len",
        "16",
        "--output-len",
        "16",
        "--out",
        str(out),
        "--runs-dir",
        str(tmp_path),
        "--json",
        "--machine-hour-price",
        "6",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    capacity = summary["capacity"]
    assert (capacity["status"], capacity["capacity"]) == ("found", 3), capacity["explanation"]
    assert (capacity["held"]["load"], capacity["failed"]["load"]) == (3, 4)
    loads = [level["load"] for level in capacity["levels"]]
    assert loads[:4] == [1, 2, 4, 3]
    assert set(loads[4:]) <= {3, 4}  # only the boundary is ever measured again
    assert capacity["failed"]["judged"]["attained"] < 0.9
    assert capacity["held"]["judged"]["attained"] >= 0.9
    assert summary["sweep_stop"]["reason"] == "capacity"
    # every level is kept: in summary.json's levels and, request by request, in requests.jsonl
    assert [level["max_concurrency"] for level in summary["levels"]] == loads
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert {row["level"] for row in rows} == set(range(len(loads)))
    assert "capacity: next 4 concurrent (double" in done.stderr  # the progress lines
    headline = (out / "report.md").read_text().split("\n- ")[1]
    assert headline.startswith("✅ Capacity: 3 concurrent at TTFT p90 ")
    assert "≤ 100 ms; 4 fails (TTFT p90 " in headline
    # what a million tokens cost at the capacity: $6 an hour over that level's own tok/s
    held = summary["levels"][capacity["held"]["level"]]
    usd = held["cost"]["usd_per_m_total_tokens"]
    assert usd == pytest.approx(6 / 3600 / held["total_throughput"] * 1e6)
    assert (
        f"- Cost at the capacity under the SLO (concurrency 3): {usd_text(usd)} per million "
        "total tokens" in (out / "report.md").read_text()
    )


@pytest.mark.timing
def test_open_loop_capacity_lies_between_the_stable_and_the_unstable_rate(
    start_sim, tmp_path: Path
):
    """Cap C = 2; fixed timing: TTFT 25 ms, 15 more tokens 5 ms apart, so a request holds a
    slot for S = 100 ms and the server completes at most C / S = 20 requests/s. SLO: TTFT
    <= 525 ms for 90%: a request may queue behind 10 others (10 x S / C = 500 ms).

    - 16 req/s (utilisation 0.8): ten requests queued at once is rare over a level of 48
      arrivals that starts empty: it meets.
    - 32 req/s: the queue grows by 32 - 20 = 12 requests/s, so the k-th arrival (at k / 32
      s) waits about k x 12 / 32 x 50 ms = k x 19 ms, over 500 ms from k = 27: about 44% of
      48 miss the SLO; it fails.

    So the search doubles 16 -> 32 and bisects in [16, 32): its capacity lies there.
    (Where exactly depends on the level's length: a queue that grows has not grown far
    after 48 arrivals.)"""
    sim = start_sim(ttft_ms=25, itl_ms=5, max_running_requests=2)
    plan = CapacityPlan(
        slo_ms={"ttft": 525.0},
        mode=LoadMode.REQUEST_RATE,
        start=16.0,
        max_load=64.0,
        tolerance=0.25,
    )
    config = BenchConfig(
        url=sim.url,
        mode=LoadMode.REQUEST_RATE,
        num_requests=48,
        warmup=0,
        workload=WorkloadSpec(input_len=16, output_len=16),
        slo_ms=plan.slo_ms,
        capacity=plan,
        out=tmp_path / "run",
        runs_root=tmp_path,
    )
    summary = run_bench(config).summary
    capacity = summary.capacity
    assert capacity is not None and capacity.status == "found", capacity
    assert [lv.load for lv in capacity.levels][:2] == [16, 32]
    assert capacity.capacity is not None and 16 <= capacity.capacity < 32
    assert capacity.failed is not None and capacity.failed.load <= 32
    assert [level.request_rate for level in summary.levels] == [lv.load for lv in capacity.levels]
    assert capacity.explanation.startswith(f"capacity: {capacity.capacity:g} req/s at TTFT p90")


@pytest.mark.timing
def test_open_loop_from_the_cli_stops_at_the_largest_rate_allowed(start_sim, tmp_path: Path):
    """No cap, fixed timing: every request's TTFT is 10 ms whatever the rate, so 1, 2 and 4
    req/s all meet TTFT <= 200 ms and the search ends at --max-request-rate 4."""
    sim = start_sim(ttft_ms=10, itl_ms=2)
    out = tmp_path / "run"
    done = run(
        "--url",
        sim.url,
        "--request-rate",
        "auto",
        "--max-request-rate",
        "4",
        "--slo",
        "ttft=200ms",
        "--capacity",
        "--attainment",
        "0.99",
        "--dataset",
        "fixed",
        "--output-len",
        "8",
        "--num-requests",
        "8",
        "--out",
        str(out),
        "--runs-dir",
        str(tmp_path),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    capacity = summary["capacity"]
    # attainment 0.99 of 8 requests: all 8 at each level must meet, each with 190 ms to spare
    assert (capacity["status"], capacity["capacity"]) == ("at_max", 4)
    assert capacity["attainment"] == 0.99 and capacity["mode"] == "request_rate"
    assert [level["request_rate"] for level in summary["levels"]][:3] == [1, 2, 4]
    assert summary["run"]["workload"]["dataset"] == "fixed"
    assert capacity["explanation"].startswith("capacity: at least 4 req/s at TTFT p99 ")


@pytest.mark.timing
def test_ctrl_c_keeps_every_verdict_reached_and_reports_them(start_sim, tmp_path: Path):
    """Interrupted in its third level, the search keeps the two verdicts it reached in
    summary.json (status searching) and the report says so."""
    sim = start_sim(ttft_ms=20, itl_ms=30, max_running_requests=3)
    out = tmp_path / "run"
    args = ["--url", sim.url, "--slo", "ttft=100ms", "--capacity", "--output-len", "16"]
    with (tmp_path / "stderr.txt").open("w") as stderr:
        process = subprocess.Popen(
            [*SERVELAB, "run", *args, "--out", str(out), "--runs-dir", str(tmp_path)],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            _wait_for_verdicts(out / "summary.json", 2)
        finally:
            process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 130
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    capacity = summary["capacity"]
    assert capacity["status"] == "searching"
    assert [level["load"] for level in capacity["levels"]][:2] == [1, 2]
    # 1 and 2 meet (TTFT 20 ms against 100 ms: test_closed_loop_capacity_is_the_running_
    # request_cap's derivation), and the signal comes before 4's verdict (it polls every
    # 0.1 s, 4 lasts seconds)
    assert capacity["capacity"] == max(level["load"] for level in capacity["levels"])
    headline = (out / "report.md").read_text().split("\n- ")[1]
    assert headline.startswith("⚠️ Capacity: ") and "(search not finished)" in headline


def _wait_for_verdicts(path: Path, count: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            capacity = json.loads(path.read_text()).get("capacity") or {}
        except (OSError, ValueError):
            capacity = {}
        if len(capacity.get("levels", [])) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} verdicts were written")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--capacity"], "error: --capacity searches the highest load that meets an SLO"),
        (
            ["--capacity", "--slo", "ttft=2s", "--attainment", "1.5"],
            "error: --attainment must be above 0 and at most 1, got 1.5",
        ),
        (
            ["--capacity", "--slo", "ttft=2s", "--attainment", "0"],
            "error: --attainment must be above 0 and at most 1, got 0",
        ),
        (["--request-rate", "auto"], "error: --request-rate auto searches the capacity"),
    ],
)
def test_bad_capacity_options_are_one_line_and_exit_2(tmp_path: Path, args, message):
    done = run("--url", "http://127.0.0.1:9", "--runs-dir", str(tmp_path), *args, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), done.stderr
    assert not any(tmp_path.iterdir())
