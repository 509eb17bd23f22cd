"""`run`, `run --capacity`, `tune` and trace replay with their load from the two-node Ray
cluster (tests/cluster/conftest.py), against the simulator, as a user types them."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from servelab.bench.traces import load_replay
from tests.conftest import SERVELAB
from tests.traces import MOONCAKE

MS = 1e6


def servelab(ray_cluster, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVELAB, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **ray_cluster.env},
    )


def _both_nodes_sent(level: dict) -> bool:
    nodes = level["client"]["nodes"]
    return len(nodes) == 2 and all(n["requests"] > 0 and not n["lost"] for n in nodes)


@pytest.mark.timing
def test_run_searches_capacity_with_the_load_from_the_cluster(ray_cluster, start_sim, tmp_path):
    """The capacity test of tests/integration (a cap of 3, TTFT <= 100 ms: capacity 3,
    4 fails), its load now from workers on both nodes, joined through Ray Client."""
    sim = start_sim(ttft_ms=20, itl_ms=30, max_running_requests=3)
    out = tmp_path / "run"
    done = servelab(
        ray_cluster,
        *("run", "--url", sim.url, "--slo", "ttft=100ms", "--capacity"),
        *("--input-len", "16", "--output-len", "16", "--json"),
        *("--cluster", ray_cluster.client_address),
        *("--out", str(out), "--runs-dir", str(tmp_path)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    capacity = summary["capacity"]
    assert (capacity["status"], capacity["capacity"]) == ("found", 3), capacity["explanation"]
    assert capacity["failed"]["load"] == 4
    # from concurrency 2 on, each node holds at least one of the streams
    spread = [level for level in summary["levels"] if level["max_concurrency"] >= 2]
    assert spread and all(_both_nodes_sent(level) for level in spread)
    assert summary["run"]["load"]["cluster"] == ray_cluster.client_address


def test_every_tune_trial_draws_its_load_from_the_cluster(ray_cluster, tmp_path):
    space = {
        "study": "cluster",
        "base": {"engine": "sim", "options": {"ttft_ms": 10, "itl_ms": 5}, "startup_timeout_s": 60},
        "space": {"options.itl_ms": [5, 10]},
        "workload": {"input_len": 16, "output_len": 8},
        "load": {"concurrency": [4], "num_requests": 16, "warmup": 0},
        "objective": "output_throughput@4",
        "trials": 2,
    }
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    out = tmp_path / "study"
    done = servelab(
        ray_cluster,
        *("tune", "run", str(path), "--cluster", "auto", "--workers-per-node", "1"),
        *("--out", str(out), "--runs-dir", str(tmp_path / "runs")),
        timeout=400,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = sorted((out / "trials").glob("*/summary.json"))
    assert len(summaries) == 2
    for file in summaries:
        (level,) = json.loads(file.read_text())["levels"]
        assert level["completed"] == 16 and _both_nodes_sent(level), level["client"]


@pytest.mark.timing
def test_a_trace_replays_at_its_timestamps_from_both_nodes(ray_cluster, start_sim, tmp_path):
    """The Mooncake fixture's 20 requests over 3.8 s, each sent by some node at its
    timestamp: the planned times are the trace's, within the nodes' clock error."""
    sim = start_sim(ttft_ms=5, itl_ms=1)
    out = tmp_path / "run"
    done = servelab(
        ray_cluster,
        *("bench", "--url", sim.url, "--dataset", f"trace:{MOONCAKE}", "--warmup", "0"),
        *("--cluster", "auto", "--workers-per-node", "1", "--json"),
        *("--out", str(out), "--runs-dir", str(tmp_path / "runs")),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (level,) = json.loads(done.stdout)["levels"]
    assert level["completed"] == 20 and _both_nodes_sent(level), level["client"]
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    planned = load_replay(MOONCAKE, speed=1.0, window=(None, None)).arrivals_ns
    first = min(r["t_scheduled_ns"] for r in rows)
    error_ns = max(n["clock_error_ms"] for n in level["client"]["nodes"]) * MS + 1_000
    for row in rows:
        assert abs(row["t_scheduled_ns"] - first - planned[row["index"]]) <= 2 * error_ns
    assert all(n["p99_schedule_lag_ms"] < 100 for n in level["client"]["nodes"])
