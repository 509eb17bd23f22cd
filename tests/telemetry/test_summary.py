"""Level summaries computed by hand on synthetic samples.

Two GPUs sampled every 100 ms from 0 to 2 s, the level is [0.5 s, 1.5 s] (ticks 5 to 15,
11 samples each):
- GPU 0: 200 W of a 400 W limit, an energy counter at exactly 200 W, SwPowerCap on even
  ticks (6, 8, 10, 12, 14: 5 of 11), GPM samples every 0.5 s with SM utilization 40, 60,
  80 inside the level, PCIe once a second (only the 1 s sample is inside).
- GPU 1: 100 W before 1 s and 300 W from 1 s (5 samples, then 6), no energy counter and
  no GPM (NVML's reasons recorded).
"""

from __future__ import annotations

import pytest

from servelab.telemetry.gpu import GpmSample, GpmValues, GpuInfo, GpuSample, GpuTrace, PcieSample
from servelab.telemetry.scrape import EngineSample, EngineTrace
from servelab.telemetry.summary import summarize_level

MS = 1_000_000
S = 1000 * MS
NO_GPM = "GPM is not supported on this GPU (it needs Hopper or newer)"


def _gpu_trace() -> GpuTrace:
    samples: list[GpuSample] = []
    for tick in range(21):
        t_ns = tick * 100 * MS
        samples.append(
            GpuSample(
                t_ns=t_ns,
                tick=tick,
                gpu=0,
                power_w=200.0,
                power_limit_w=400.0,
                util_pct=100,
                mem_util_pct=30,
                sm_clock_mhz=1500,
                mem_clock_mhz=2600,
                clock_event_mask=0x4 if tick % 2 == 0 else 0,
                energy_mj=5_000_000 + 200 * t_ns // MS,  # 200 W = 200 mJ per ms
            )
        )
        samples.append(
            GpuSample(
                t_ns=t_ns,
                tick=tick,
                gpu=1,
                power_w=100.0 if tick < 10 else 300.0,
                power_limit_w=400.0,
                util_pct=50,
                mem_util_pct=10,
                sm_clock_mhz=1000,
                mem_clock_mhz=2600,
                clock_event_mask=0,
                energy_mj=None,
            )
        )
    gpm = [
        GpmSample(
            t_ns=k * 500 * MS, gpu=0, window_ns=500 * MS, values=GpmValues(v, 50.0, 70.0, v / 2)
        )
        for k, v in ((1, 40.0), (2, 60.0), (3, 80.0), (4, 99.0))
    ]
    pcie = [PcieSample(t_ns=k * S, gpu=0, tx_kb_s=1000 * (k + 1), rx_kb_s=10) for k in range(3)]
    return GpuTrace(
        gpus=[GpuInfo(0, "GPU-a", "H200"), GpuInfo(1, "GPU-b", "H200")],
        samples=samples,
        gpm=gpm,
        pcie=pcie,
        unavailable={1: {"energy": "Not Supported", "gpm": NO_GPM, "pcie": "Not Supported"}},
    )


def _engine_trace() -> EngineTrace:
    samples = [
        EngineSample(
            t_ns=k * 500 * MS,
            engine="vllm",
            running=float(k + 1),
            queued=float(max(k - 1, 0)),
            kv_usage=0.1 * (k + 1),
            gen_throughput=10.0 * (k + 1),
            prompt_tokens_total=50.0 * k,
            generation_tokens_total=100.0 * k,  # 200 tok/s
        )
        for k in range(5)
    ]
    return EngineTrace(url="http://127.0.0.1:8000/metrics", samples=samples)


def test_per_gpu_power_utilization_clocks_and_reasons():
    level = summarize_level(_gpu_trace(), _engine_trace(), 500 * MS, 1500 * MS, 820)
    gpu0, gpu1 = level.gpu.gpus
    assert (gpu0.gpu, gpu0.uuid, gpu0.samples) == (0, "GPU-a", 11)
    assert gpu0.power_mean_w == 200 and gpu0.power_max_w == 200
    assert gpu0.power_limit_w == 400
    assert gpu0.power_mean_pct == 50 and gpu0.power_max_pct == 50
    assert (gpu0.util_mean_pct, gpu0.mem_util_mean_pct, gpu0.sm_clock_mean_mhz) == (100, 30, 1500)
    assert gpu0.clock_event_reasons == {"SwPowerCap": pytest.approx(5 / 11)}
    assert gpu1.power_mean_w == pytest.approx((5 * 100 + 6 * 300) / 11)
    assert gpu1.power_max_w == 300 and gpu1.power_max_pct == 75
    assert gpu1.clock_event_reasons == {}


def test_gpm_and_pcie_inside_the_level_or_the_reason():
    level = summarize_level(_gpu_trace(), _engine_trace(), 500 * MS, 1500 * MS, 820)
    gpu0, gpu1 = level.gpu.gpus
    assert gpu0.gpm_sm_util_mean_pct == 60  # 40, 60, 80
    assert gpu0.gpm_tensor_util_mean_pct == 30
    assert (gpu0.gpm_sm_occupancy_mean_pct, gpu0.gpm_dram_bw_util_mean_pct) == (50, 70)
    assert gpu0.pcie_tx_mean_kb_s == 2000 and gpu0.pcie_rx_mean_kb_s == 10
    assert gpu0.unavailable == {}
    assert gpu1.gpm_sm_util_mean_pct is None and gpu1.pcie_tx_mean_kb_s is None
    assert gpu1.unavailable == {"gpm": NO_GPM, "pcie": "Not Supported"}  # energy: from power


def test_energy_from_the_counter_or_integrated_power_and_tokens_per_joule():
    level = summarize_level(_gpu_trace(), _engine_trace(), 500 * MS, 1500 * MS, 820)
    gpu0, gpu1 = level.gpu.gpus
    assert (gpu0.energy_j, gpu0.energy_source) == (pytest.approx(200.0), "counter")
    # 100 W for 0.4 s, a ramp to 300 W over 0.1 s (20 J), 300 W for 0.5 s
    assert (gpu1.energy_j, gpu1.energy_source) == (pytest.approx(40 + 20 + 150), "power")
    overall = level.gpu.overall
    assert overall.energy_j == pytest.approx(410.0) and overall.energy_source == "mixed"
    assert level.gpu.tokens_per_joule == pytest.approx(2.0)


def test_counter_read_between_samples_at_the_level_ends():
    level = summarize_level(_gpu_trace(), EngineTrace(), 550 * MS, 1250 * MS, None)
    gpu0 = level.gpu.gpus[0]
    assert gpu0.energy_j == pytest.approx(200 * 0.7)
    assert level.gpu.tokens_per_joule is None  # no token count given


def test_all_gpus_together():
    level = summarize_level(_gpu_trace(), _engine_trace(), 500 * MS, 1500 * MS, 820)
    overall = level.gpu.overall
    assert overall.gpu is None and overall.samples == 22
    assert overall.power_mean_w == pytest.approx(200 + 2300 / 11)  # the box's draw
    assert overall.power_limit_w == 800
    assert overall.power_mean_pct == pytest.approx(100 * (200 + 2300 / 11) / 800)
    assert overall.power_max_w == 500  # ticks 10 to 15: 200 + 300
    assert overall.power_max_pct == 62.5
    assert overall.util_mean_pct == 75 and overall.sm_clock_mean_mhz == 1250
    assert overall.gpm_sm_util_mean_pct == 60  # the GPUs that have GPM
    assert overall.pcie_tx_mean_kb_s is None  # a sum missing one GPU would mislead
    assert overall.clock_event_reasons == {"SwPowerCap": pytest.approx(5 / 22)}
    assert overall.unavailable == {"pcie": "GPU 1: Not Supported"}


def test_engine_means_maxima_and_token_counts():
    engine = summarize_level(_gpu_trace(), _engine_trace(), 500 * MS, 1500 * MS).engine
    assert engine.available and engine.engine == "vllm" and engine.samples == 3
    assert (engine.running_mean, engine.running_max) == (3, 4)  # 2, 3, 4
    assert (engine.queued_mean, engine.queued_max) == (1, 2)  # 0, 1, 2
    assert (engine.kv_usage_mean, engine.kv_usage_max) == (pytest.approx(0.3), pytest.approx(0.4))
    assert engine.gen_throughput_mean == 30
    assert engine.generation_tokens == 200 and engine.prompt_tokens == 100
    between = summarize_level(GpuTrace(), _engine_trace(), 600 * MS, 1400 * MS).engine
    assert between.samples == 1 and between.generation_tokens == pytest.approx(160)


def test_nothing_to_show_says_why():
    level = summarize_level(GpuTrace(), EngineTrace(), 0, S)
    assert not level.gpu.available and level.gpu.reason == "no GPUs were sampled (none given)"
    assert not level.engine.available and level.engine.reason == "no /metrics URL was given"
    outside = summarize_level(_gpu_trace(), _engine_trace(), 5 * S, 6 * S)
    assert outside.gpu.reason == "no GPU sample inside the level"
    assert outside.engine.reason == "no /metrics scrape inside the level"
    unknown = EngineTrace(
        url="http://h/metrics",
        samples=[EngineSample(S, None, None, None, None, None, None, None)],
    )
    engine = summarize_level(GpuTrace(), unknown, 0, 2 * S).engine
    assert engine.reason == "http://h/metrics has no SGLang or vLLM metrics"


def test_the_summary_is_json_ready():
    level = summarize_level(_gpu_trace(), _engine_trace(), 500 * MS, 1500 * MS, 820)
    document = level.model_dump(mode="json")
    assert document["gpu"]["overall"]["energy_j"] == pytest.approx(410.0)
    assert document["engine"]["running_max"] == 4


def _two_idle_scrapes(source: str = "metrics") -> EngineTrace:
    """Two samples that caught the engine between steps: 0 running, 0 waiting."""
    samples = [
        EngineSample(k * 400 * MS, "vllm", 0.0, 0.0, 0.0, 0.0, 10.0 * k, 20.0 * k, source=source)  # type: ignore[arg-type]
        for k in (1, 2)
    ]
    return EngineTrace(url="http://127.0.0.1:8000/metrics", samples=samples)


def test_fewer_than_three_scrapes_are_missing_evidence_never_zero():
    engine = summarize_level(GpuTrace(), _two_idle_scrapes(), 0, S).engine
    assert not engine.available and engine.samples == 2
    assert engine.reason == "2 samples of /metrics in this level: too few (3 needed)"
    assert engine.running_max is None and engine.running_mean is None
    assert engine.queued_max is None and engine.kv_usage_max is None
    assert engine.generation_tokens is not None  # counters are read between samples


def test_fewer_than_three_stats_lines_of_the_log_are_too_few_as_well():
    log = _two_idle_scrapes("log")
    engine = summarize_level(GpuTrace(), EngineTrace(), 0, S, log=log).engine
    assert not engine.available and engine.log_samples == 2
    assert engine.running_max is None
    assert engine.reason is not None and "too few" in engine.reason


def test_the_largest_prefill_batch_the_log_gave_is_kept_per_level():
    """SGLang's Prefill lines carry the batch's computed tokens: the level keeps the
    largest and how many such lines fell inside it (lines outside it are not counted)."""
    samples = [
        EngineSample(
            k * 300 * MS,
            "sglang",
            4.0,
            2.0,
            0.3,
            None,
            None,
            None,
            source="log",
            prefill_tokens=float(tokens),
        )
        for k, tokens in ((1, 512), (2, 2048), (3, 1024), (40, 8192))
    ]
    engine = summarize_level(
        GpuTrace(), EngineTrace(), 0, S, log=EngineTrace(samples=samples)
    ).engine
    assert engine.prefill_tokens_max == 2048 and engine.prefill_batches == 3
