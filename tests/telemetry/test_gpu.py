"""The NVML sampler on a fake NVML: rates, cadences, energy, and what it cannot read."""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from typing import Any

import pytest

from servelab.core.errors import ConfigError
from servelab.telemetry import gpu as gpu_module
from servelab.telemetry.gpu import GpuSample, GpuSampler, GpuTrace, resolve_gpus
from servelab.telemetry.scrape import EngineTrace
from servelab.telemetry.summary import summarize_level

from .fakes import FakeGpuReader

NO_GPM = "GPM is not supported on this GPU (it needs Hopper or newer)"


def _run(reader: FakeGpuReader, seconds: float, **intervals: float):
    """Sample both fake GPUs for `seconds`; the rows written, the trace, and the sampler."""
    rows: list[dict[str, Any]] = []
    sampler = GpuSampler(reader, [0, 1], sink=rows.extend, **intervals)
    sampler.start()
    time.sleep(seconds)
    assert sampler.stop(timeout_s=2.0)
    return rows, sampler.trace(), sampler


FAST = {"interval_s": 0.01, "gpm_interval_s": 0.02, "pcie_interval_s": 0.05}


@pytest.fixture(scope="module")
def default_rates():
    """One run at the real cadences (10 Hz, GPM 2 Hz, PCIe 1 Hz); PCIe reads block 20 ms."""
    reader = FakeGpuReader((250.0, 400.0), pcie_block_s=0.02)
    rows, trace, sampler = _run(reader, 1.25)
    return reader, rows, trace, sampler


@pytest.mark.timing
def test_power_clocks_and_energy_at_10_hz_while_pcie_blocks(default_rates):
    _, rows, trace, sampler = default_rates
    at_10_hz_for_1_25_s(trace.samples)
    gpu0 = [sample for sample in trace.samples if sample.gpu == 0]
    first = gpu0[0]
    assert (first.power_w, first.power_limit_w) == (250.0, 500.0)
    assert (first.util_pct, first.mem_util_pct) == (100, 40)
    assert (first.sm_clock_mhz, first.mem_clock_mhz) == (1980, 2619)
    assert first.clock_event_mask == 0x4 and first.energy_mj is not None
    assert sampler.errors.lines() == []
    gpu_rows = [row for row in rows if row["kind"] == "gpu"]
    assert gpu_rows[0] | {"t_ns": 0} == {
        "kind": "gpu",
        "t_ns": 0,
        "tick": 0,
        "gpu": 0,
        "power_w": 250.0,
        "power_limit_w": 500.0,
        "util_pct": 100,
        "mem_util_pct": 40,
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "clock_event_reasons": ["SwPowerCap"],
        "energy_mj": first.energy_mj,
    }
    assert rows[0]["kind"] == "start"
    assert rows[0]["gpus"] == [
        {"gpu": 0, "uuid": "GPU-0000-fake-aaaa", "name": "Fake H200"},
        {"gpu": 1, "uuid": "GPU-0001-fake-bbbb", "name": "Fake H200"},
    ]


def at_10_hz_for_1_25_s(samples: list[GpuSample]) -> None:
    """The cadence of a 1.25 s run at the default 10 Hz: its tick count and GPU 0's gaps."""
    ticks = {sample.tick for sample in samples}
    # ticks at 0, 0.1, ... 1.2 s of the 1.25 s run: 13; two late ones or one more at the stop
    assert 11 <= len(ticks) <= 14
    gpu0 = [sample for sample in samples if sample.gpu == 0]
    gaps_ms = [(b.t_ns - a.t_ns) / 1e6 for a, b in itertools.pairwise(gpu0)]
    assert 90 < statistics.median(gaps_ms) < 110  # 80 ms of PCIe reads per second don't slow it


def sampled_at(times_ms: list[float]) -> list[GpuSample]:
    """Samples of both GPUs, one tick at each of `times_ms`."""
    return [
        GpuSample(round(t * 1e6), tick, gpu, 250.0, 500.0, 100, 40, 1980, 2619, 0x4, 0)
        for tick, t in enumerate(times_ms)
        for gpu in (0, 1)
    ]


def test_a_sampler_skipping_ticks_or_ticking_slowly_is_off_its_cadence():
    """The negative control of the cadence check, on a 1.25 s run. Dropping every fourth
    tick leaves 10 (1.5x the 2-tick margin under 13): its median gap is still 100 ms, so
    only the count sees it. Ticking every 115 ms (1.5x the 10 ms margin) leaves 11 ticks:
    only the gaps see it. Loosening either margin by 2x would let its breach through."""
    every_100 = [100.0 * k for k in range(13)]
    with pytest.raises(AssertionError, match="len"):
        at_10_hz_for_1_25_s(sampled_at([t for k, t in enumerate(every_100) if k % 4 != 3]))
    with pytest.raises(AssertionError, match="median"):
        at_10_hz_for_1_25_s(sampled_at([115.0 * k for k in range(11)]))
    at_10_hz_for_1_25_s(sampled_at(every_100))
    at_10_hz_for_1_25_s(sampled_at([105.0 * k for k in range(12)]))  # within the margins


@pytest.mark.timing
def test_pcie_once_a_second_off_the_fast_path(default_rates):
    reader, rows, trace, _ = default_rates
    for gpu in (0, 1):
        pcie = [sample for sample in trace.pcie if sample.gpu == gpu]
        assert len(pcie) == 2  # at 0 s and 1 s: the next is due 0.75 s after the 1.25 s stop
        assert 0.9 < (pcie[1].t_ns - pcie[0].t_ns) / 1e9 < 1.1
        assert (pcie[0].tx_kb_s, pcie[0].rx_kb_s) == (1000 * (gpu + 1), 2000 * (gpu + 1))
    assert len(reader.calls["pcie_kb_s"]) == 4
    assert sum(row["kind"] == "pcie" for row in rows) == 4
    left = [t for t in threading.enumerate() if t.name.startswith("servelab-telemetry")]
    assert left == []


@pytest.mark.timing
def test_gpm_every_half_second_over_its_window(default_rates):
    _, rows, trace, _ = default_rates
    gpm0 = [sample for sample in trace.gpm if sample.gpu == 0]
    # samples at 0, 0.5 and 1.0 s: two windows; the next is due 0.25 s after the 1.25 s stop
    assert len(gpm0) == 2
    assert all(0.45 < sample.window_ns / 1e9 < 0.6 for sample in gpm0)
    row = next(row for row in rows if row["kind"] == "gpm")
    assert {key: row[key] for key in row if key.endswith("_pct")} == {
        "sm_util_pct": 45.0,
        "sm_occupancy_pct": 30.0,
        "dram_bw_util_pct": 60.0,
        "tensor_util_pct": 20.0,
    }


@pytest.mark.timing
def test_energy_counter_gives_joules_and_tokens_per_joule(default_rates):
    _, _, trace, _ = default_rates
    gpu0 = [sample for sample in trace.samples if sample.gpu == 0]
    t0, t1 = gpu0[2].t_ns, gpu0[-3].t_ns
    level = summarize_level(trace, EngineTrace(), t0, t1, output_tokens=1000)
    seconds = (t1 - t0) / 1e9
    stats = {stat.gpu: stat for stat in level.gpu.gpus}
    assert stats[0].energy_source == "counter"
    # the fake counter grows at exactly its power: only a sample's stamp against its read of
    # the counter can differ; 1% of the ~0.8 s between ticks 2 and -3 is about 8 ms
    assert stats[0].energy_j == pytest.approx(250 * seconds, rel=0.01)
    assert stats[1].energy_j == pytest.approx(400 * seconds, rel=0.01)
    assert level.gpu.overall.energy_j == pytest.approx(650 * seconds, rel=0.01)
    assert level.gpu.tokens_per_joule == pytest.approx(1000 / (650 * seconds), rel=0.01)
    assert stats[1].power_mean_pct == pytest.approx(80.0)
    assert stats[0].clock_event_reasons == {"SwPowerCap": 1.0}
    assert stats[0].gpm_sm_util_mean_pct == 45.0


def test_gpm_unsupported_is_na_with_its_reason_recorded_once():
    reader = FakeGpuReader(gpm_reason=NO_GPM)
    rows, trace, _ = _run(reader, 0.2, **FAST)
    notes = [row for row in rows if row["kind"] == "unavailable"]
    assert [(row["gpu"], row["field"], row["reason"]) for row in notes] == [
        (0, "gpm", NO_GPM),
        (1, "gpm", NO_GPM),
    ]
    assert trace.gpm == [] and reader.calls["gpm_metrics"] == []
    level = summarize_level(trace, EngineTrace(), trace.samples[0].t_ns, trace.samples[-1].t_ns)
    for stats in [*level.gpu.gpus, level.gpu.overall]:
        assert stats.gpm_sm_util_mean_pct is None and stats.gpm_tensor_util_mean_pct is None
    assert level.gpu.gpus[0].unavailable == {"gpm": NO_GPM}
    assert level.gpu.overall.unavailable == {"gpm": f"GPU 0: {NO_GPM}"}


@pytest.mark.timing
def test_a_field_nvml_cannot_read_is_none_its_reason_once_and_energy_from_power():
    reader = FakeGpuReader(
        fail={"energy_mj": "Not Supported", "pcie_kb_s": "Insufficient Permissions"}
    )
    rows, trace, sampler = _run(reader, 0.3, **FAST)
    notes = [
        (row["gpu"], row["field"], row["reason"]) for row in rows if row["kind"] == "unavailable"
    ]
    assert sorted(notes) == [
        (0, "energy", "Not Supported"),
        (0, "pcie", "Insufficient Permissions"),
        (1, "energy", "Not Supported"),
        (1, "pcie", "Insufficient Permissions"),
    ]
    # still asked, NVML may answer later: two GPUs every 10 ms for 0.3 s ask about 60 times
    assert len(reader.calls["energy_mj"]) > 10
    assert all(sample.energy_mj is None for sample in trace.samples)
    assert trace.unavailable[0] == {"energy": "Not Supported", "pcie": "Insufficient Permissions"}
    t0, t1 = trace.samples[4].t_ns, trace.samples[-4].t_ns
    level = summarize_level(trace, EngineTrace(), t0, t1)
    stats = level.gpu.gpus[0]
    assert stats.energy_source == "power"
    assert stats.energy_j == pytest.approx(250 * (t1 - t0) / 1e9, rel=1e-6)
    assert stats.pcie_tx_mean_kb_s is None
    assert stats.unavailable == {"pcie": "Insufficient Permissions"}
    assert sampler.errors.lines() == []


@pytest.mark.timing
def test_an_unexpected_error_is_recorded_not_raised_and_sampling_goes_on():
    reader = FakeGpuReader(broken={"utilization_pct"})
    _, trace, sampler = _run(reader, 0.2, **FAST)
    assert trace.samples == []
    (line,) = sampler.errors.lines()
    assert line.startswith("gpu: RuntimeError: utilization_pct is broken (x")
    # asked at least once a tick: about 20 ticks of 10 ms in 0.2 s
    assert len(reader.calls["utilization_pct"]) > 5
    assert len(trace.pcie) >= 2  # the other thread is unaffected: 4 ticks of 50 ms, 2 GPUs


def test_no_gpu_trace_says_why():
    level = summarize_level(GpuTrace(reason="NVML did not initialise"), EngineTrace(), 0, 1)
    assert not level.gpu.available and level.gpu.reason == "NVML did not initialise"
    assert level.gpu.tokens_per_joule is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("0", [0]),
        ("1,0", [1, 0]),
        (" 0 , 1 ", [0, 1]),
        ("GPU-0001-fake-bbbb", [1]),
        ("gpu-0001-FAKE-bbbb,0", [1, 0]),
        ("0000-fake-aaaa", [0]),
    ],
)
def test_resolve_gpus_takes_indices_and_uuids(spec, expected):
    assert resolve_gpus(spec, FakeGpuReader()) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("2", "unknown GPU '2' in --gpus (NVML sees 2 GPU(s): indices 0 to 1)"),
        ("GPU-nope", "unknown GPU 'GPU-nope' in --gpus (no GPU has that UUID; nvidia-smi -L)"),
        ("0,GPU-0000-fake-aaaa", "GPU 'GPU-0000-fake-aaaa' is given twice in --gpus"),
        ("0,,1", "--gpus '0,,1' has an empty entry"),
        ("", "--gpus '' has an empty entry"),
        ("-1", "unknown GPU '-1' in --gpus"),
    ],
)
def test_resolve_gpus_refuses_unknown_gpus_in_one_line(spec, message):
    with pytest.raises(ConfigError) as caught:
        resolve_gpus(spec, FakeGpuReader())
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_resolve_gpus_without_nvml_says_why(monkeypatch):
    monkeypatch.setattr(
        gpu_module, "open_gpu_reader", lambda: (None, "libnvidia-ml.so.1 could not be loaded")
    )
    with pytest.raises(ConfigError, match="--gpus needs NVML, which is not available: libnvidia"):
        resolve_gpus("0")


def test_resolve_gpus_closes_the_nvml_it_opened(monkeypatch):
    reader = FakeGpuReader()
    monkeypatch.setattr(gpu_module, "open_gpu_reader", lambda: (reader, None))
    assert resolve_gpus("1") == [1]
    assert reader.closed
