"""Telemetry beside the load: the engine's /metrics scraped on the bench clock."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import servelab.telemetry.gpu as telemetry_gpu
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.workload import WorkloadSpec
from servelab.cli import app
from tests.sessions import session_left
from tests.telemetry.fakes import FakeGpuReader

SERVELAB = [sys.executable, "-m", "servelab"]


def test_the_engines_queue_is_seen_per_level(start_sim, tmp_path: Path):
    sim = start_sim(step_base_ms=20, max_running_requests=2)
    config = BenchConfig(
        url=sim.url,
        levels=[1, 6],
        num_requests=12,
        warmup=0,
        workload=WorkloadSpec(input_len=16, output_len=40),
        out=tmp_path / "run",
        metrics_url=sim.url,
    )
    levels = run_bench(config).summary.levels
    alone, queued = (level.telemetry for level in levels)
    assert alone is not None and queued is not None
    assert alone.engine.available and alone.engine.engine == "sglang"
    # One stream: the engine never holds more than its one request. A scrape may catch it
    # waiting between its arrival and the next step (up to one 20 ms step of a request of
    # 40 steps: at most 1/40 of the time, more only when the machine delays the step
    # loop), so it is rarely queued: a mean under half, where six streams on a cap of two
    # keep four waiting.
    assert alone.engine.running_max == 1 and alone.engine.queued_max in (0, 1)
    assert alone.engine.queued_mean is not None and alone.engine.queued_mean < 0.5
    assert queued.engine.running_max == 2
    assert queued.engine.queued_mean is not None and queued.engine.queued_mean > 1
    assert not queued.gpu.available  # no --gpus
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert rows[0]["kind"] == "start" and rows[-1]["kind"] == "stop"
    assert sum(row["kind"] == "metrics" for row in rows) >= 2


def test_gpus_without_nvml_is_one_line(monkeypatch: pytest.MonkeyPatch):
    reason = "libnvidia-ml.so.1 could not be loaded (no NVIDIA driver here)"
    monkeypatch.setattr(telemetry_gpu, "open_gpu_reader", lambda: (None, reason))
    result = CliRunner().invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--gpus", "0"])
    assert result.exit_code == 2
    assert result.stderr == f"error: --gpus needs NVML, which is not available: {reason}\n"


def test_gpus_beyond_what_nvml_sees_is_one_line(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(telemetry_gpu, "open_gpu_reader", lambda: (FakeGpuReader((250, 250)), None))
    result = CliRunner().invoke(app, ["bench", "--url", "http://127.0.0.1:9", "--gpus", "2"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: unknown GPU '2' in --gpus (NVML sees 2 GPU(s): indices 0 to 1)\n"
    )


def test_bench_launches_an_engine_from_a_spec_and_stops_it(tmp_path: Path):
    spec = tmp_path / "sim.yaml"
    spec.write_text(
        "engine: sim\n"
        "served_name: simmy\n"
        "knobs: {max_running_requests: 2}\n"
        'extra_args: ["--step-base-ms", "20"]\n'
    )
    out = tmp_path / "run"
    result = subprocess.run(
        [
            *SERVELAB,
            *("bench", "--engine", str(spec), "--concurrency", "4", "--num-requests", "8"),
            *("--output-len", "100", "--warmup", "0", "--out", str(out)),
            *("--runs-dir", str(tmp_path / "runs")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["target"]["model"] == "simmy"
    (level,) = summary["levels"]
    assert level["completed"] == 8
    assert level["telemetry"]["engine"]["running_max"] == 2
    events = json.loads((out / "engine_events.json").read_text())
    assert [e["kind"] for e in events["events"]] == ["engine_ready"]
    first = (out / "engine.log").read_text().splitlines()[0]
    assert first.split(" ", 2)[0].endswith("Z")  # UTC stamp, then the bench clock
    assert session_left(summary["engine"]["pid"]) == []  # it led its session: all of it ended
