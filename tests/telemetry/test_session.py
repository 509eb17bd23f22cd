"""TelemetrySession: both samplers into a run folder, summaries per level, a clean stop."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import aiohttp
import pytest

import servelab.telemetry as telemetry
from servelab.core.errors import ConfigError
from servelab.sim import SimConfig, start
from servelab.telemetry import (
    METRICS_FILE,
    TELEMETRY_FILE,
    TelemetrySession,
    level_telemetry,
)

from .fakes import FakeGpuReader

FAST = {"interval_s": 0.02, "gpm_interval_s": 0.1, "pcie_interval_s": 0.1}


def _telemetry_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("servelab-telemetry")]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.timing
def test_gpus_and_metrics_into_the_run_folder_and_a_level_summary(tmp_path):
    reader = FakeGpuReader((300.0, 300.0))

    async def scenario():
        sim = await start(SimConfig(port=0, profile="linear", max_running_requests=2))
        session = TelemetrySession(
            tmp_path, gpus=[0, 1], metrics_url=sim.url, reader=reader,
            scrape_interval_s=0.1, **FAST,
        )  # fmt: skip
        session.start()
        assert sorted(_telemetry_threads()) == [
            "servelab-telemetry-gpu",
            "servelab-telemetry-metrics",
            "servelab-telemetry-pcie",
        ]
        body = {"model": "m", "messages": [{"role": "user", "content": "a b c"}], "max_tokens": 40}
        try:
            await asyncio.sleep(0.15)
            t_start = time.perf_counter_ns()
            async with aiohttp.ClientSession(base_url=sim.url) as http:

                async def one() -> None:
                    async with http.post("/v1/chat/completions", json=body) as resp:
                        await resp.read()

                await asyncio.gather(*(one() for _ in range(4)))
            t_end = time.perf_counter_ns()
            summary = level_telemetry(session, t_start, t_end, output_tokens=160)
        finally:
            await asyncio.to_thread(session.stop)
            await sim.stop()
        return session, summary, (t_end - t_start) / 1e9

    session, summary, seconds = asyncio.run(scenario())
    assert _telemetry_threads() == []
    assert session.errors == []
    assert not reader.closed  # a reader given is the caller's to close

    gpu = summary.gpu
    assert gpu.available and [stats.gpu for stats in gpu.gpus] == [0, 1]
    assert gpu.overall.power_mean_w == 600 and gpu.overall.power_mean_pct == 60
    # the fake counters grow at exactly 600 W: only a sample's stamp against its read of a
    # counter can differ; 5% of the ~0.8 s load (two waves of 40 steps of 10 ms) is 40 ms
    assert gpu.overall.energy_j == pytest.approx(600 * seconds, rel=0.05)
    assert gpu.tokens_per_joule == pytest.approx(160 / gpu.overall.energy_j)
    assert gpu.overall.gpm_sm_util_mean_pct == 45
    engine = summary.engine
    assert engine.available and engine.engine == "sglang"
    assert engine.running_max == 2 and engine.queued_max >= 1

    gpu_rows = _rows(tmp_path / TELEMETRY_FILE)
    kinds = [row["kind"] for row in gpu_rows]
    assert kinds[0] == "start" and kinds[-1] == "stop"
    assert {"gpu", "gpm", "pcie"} <= set(kinds)
    assert gpu_rows[-1]["errors"] == {}
    metric_rows = _rows(tmp_path / METRICS_FILE)
    assert [metric_rows[0]["kind"], metric_rows[-1]["kind"]] == ["start", "stop"]
    assert all(row["t_ns"] >= metric_rows[0]["t_ns"] for row in metric_rows)


def test_without_nvml_the_gpu_side_is_unavailable_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.setattr(
        telemetry, "open_gpu_reader", lambda: (None, "libnvidia-ml.so.1 could not be loaded")
    )
    with TelemetrySession(tmp_path, gpus=[0]) as session:
        summary = level_telemetry(session, 0, time.perf_counter_ns(), 10)
    assert not summary.gpu.available
    assert summary.gpu.reason == "libnvidia-ml.so.1 could not be loaded"
    assert not summary.engine.available
    assert _telemetry_threads() == []


def test_a_reader_the_session_opened_is_closed(tmp_path, monkeypatch):
    reader = FakeGpuReader()
    monkeypatch.setattr(telemetry, "open_gpu_reader", lambda: (reader, None))
    with TelemetrySession(tmp_path, gpus=[1], **FAST) as session:
        time.sleep(0.1)
        summary = level_telemetry(session, 0, time.perf_counter_ns(), None)
    assert reader.closed
    assert [stats.gpu for stats in summary.gpu.gpus] == [1]


def test_a_folder_that_cannot_be_written_is_recorded_and_sampling_goes_on(tmp_path):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    with TelemetrySession(blocked, gpus=[0], reader=FakeGpuReader(), **FAST) as session:
        time.sleep(0.1)
        summary = level_telemetry(session, 0, time.perf_counter_ns(), None)
    assert summary.gpu.available and summary.gpu.gpus[0].samples >= 3
    (line,) = session.errors
    assert line.startswith("telemetry files not written:")


def test_a_sampler_error_stays_in_the_session(tmp_path):
    reader = FakeGpuReader(broken={"sm_clock_mhz"})
    with TelemetrySession(tmp_path, gpus=[0], reader=reader, **FAST) as session:
        time.sleep(0.1)
    assert any(
        line.startswith("gpu: RuntimeError: sm_clock_mhz is broken") for line in session.errors
    )
    assert _rows(tmp_path / TELEMETRY_FILE)[-1]["errors"]
    assert _telemetry_threads() == []


def test_an_empty_session_starts_and_stops(tmp_path):
    session = TelemetrySession(tmp_path)
    session.stop()  # before start: nothing to do
    with session:
        pass
    session.stop()  # twice: nothing more
    summary = level_telemetry(session, 0, 1, None)
    assert summary.gpu.reason == "no GPUs were sampled (none given)"
    assert summary.engine.reason == "no /metrics URL was given"


def test_a_bad_metrics_url_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match="not an http"):
        TelemetrySession(tmp_path, metrics_url="localhost:8000")
    assert _telemetry_threads() == []
