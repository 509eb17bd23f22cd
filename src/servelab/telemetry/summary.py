"""Telemetry of one sweep level: what the GPUs and the engine did between two bench stamps.

A pure function over the samples, so a summary can be recomputed from a trace (or a test's
synthetic one) at any time. Means are plain means of the samples inside [t_start, t_end]
(the samplers keep a steady rate, so they are time means too). Counters (energy, tokens)
are read at the level's two ends by linear interpolation between the samples around them;
without an energy counter, energy is the integral of power. A field that cannot be given
is None, with the reason under `unavailable`, so a table can print n/a and say why.

The engine's gauges (running, queued, KV usage, throughput) need MIN_ENGINE_SAMPLES samples
inside the level, from /metrics or else from the log's stats lines: one or two samples of a
short level can catch the engine between steps (0 running at 24 streams), and a mean of two
is no mean. With fewer the level's engine counts are missing, with the reason ("2 samples
of /metrics in this level: too few (3 needed)"), never 0; the token counters are still read
between the samples around the level.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from statistics import fmean
from typing import Literal, TypeVar

import numpy as np
from pydantic import BaseModel, Field

from servelab.core.clock import NS_PER_S
from servelab.core.units import MILLIJOULES_PER_J
from servelab.probe.nvml import clock_event_reason_names
from servelab.telemetry.gpu import GpmSample, GpuSample, GpuTrace, PcieSample
from servelab.telemetry.scrape import EngineSample, EngineTrace

__all__ = [
    "MIN_ENGINE_SAMPLES",
    "NO_GPUS_GIVEN",
    "EngineLevel",
    "GpuLevel",
    "GpuStats",
    "LevelTelemetry",
    "summarize_level",
    "too_few_samples",
]

MIN_ENGINE_SAMPLES = 3
"""Samples of the engine's gauges a level needs: at /metrics' 10 Hz a level of 0.3 s."""

NO_GPUS_GIVEN = "no GPUs were sampled (none given)"
"""The reason a level has no GPU telemetry when the run was given no GPUs to sample."""

EnergySource = Literal["counter", "power", "mixed"]


class GpuStats(BaseModel):
    """One GPU over a level, or all of them together (`gpu` None).

    Together, power, energy and PCIe are sums over the GPUs (the box's draw; % of the sum
    of the limits) and the rest are means over the GPUs.
    """

    gpu: int | None = Field(description="NVML index; None for all GPUs together.")
    uuid: str | None = None
    samples: int = Field(description="10 Hz samples inside the level.")
    power_mean_w: float | None = None
    power_max_w: float | None = Field(
        default=None, description="Together: the highest total of one sampling tick."
    )
    power_limit_w: float | None = Field(default=None, description="The enforced limit, mean.")
    power_mean_pct: float | None = Field(default=None, description="Mean power, % of limit.")
    power_max_pct: float | None = Field(default=None, description="Max power, % of limit.")
    util_mean_pct: float | None = Field(
        default=None, description="NVML utilization: % of time any kernel ran."
    )
    mem_util_mean_pct: float | None = None
    sm_clock_mean_mhz: float | None = None
    pcie_tx_mean_kb_s: float | None = Field(default=None, description="NVML's KB/s.")
    pcie_rx_mean_kb_s: float | None = Field(default=None, description="NVML's KB/s.")
    gpm_sm_util_mean_pct: float | None = Field(
        default=None, description="GPM: % of SMs busy (what NVML utilization is not)."
    )
    gpm_sm_occupancy_mean_pct: float | None = None
    gpm_dram_bw_util_mean_pct: float | None = None
    gpm_tensor_util_mean_pct: float | None = None
    energy_j: float | None = None
    energy_source: EnergySource | None = Field(
        default=None, description="counter: the energy counter; power: power integrated."
    )
    clock_event_reasons: dict[str, float] = Field(
        default_factory=dict, description="Each reason seen: the fraction of samples it was on."
    )
    unavailable: dict[str, str] = Field(
        default_factory=dict,
        description="Why a None field has no value: power, power_limit, utilization, "
        "sm_clock, clock_event_reasons, energy, pcie, gpm.",
    )


class GpuLevel(BaseModel):
    """The GPUs over a level; `available` False (and `reason`) when there is nothing to show."""

    available: bool
    reason: str | None = None
    gpus: list[GpuStats] = Field(default_factory=list)
    overall: GpuStats | None = None
    tokens_per_joule: float | None = Field(
        default=None, description="The level's output tokens over all GPUs' energy."
    )


class EngineLevel(BaseModel):
    """The engine's /metrics over a level, or its log's stats lines where /metrics has no value
    for a field; None fields where neither reports them."""

    available: bool
    reason: str | None = Field(
        default=None, description="Why /metrics gave nothing (the log may still have)."
    )
    engine: str | None = Field(default=None, description="The metric names seen: sglang, vllm.")
    samples: int = Field(default=0, description="/metrics scrapes inside the level.")
    log_samples: int = Field(default=0, description="Stats lines of the log inside the level.")
    sources: dict[str, Literal["metrics", "log"]] = Field(
        default_factory=dict,
        description="Where each of running, queued, kv_usage, gen_throughput came from.",
    )
    running_mean: float | None = None
    running_max: float | None = None
    queued_mean: float | None = None
    queued_max: float | None = None
    kv_usage_mean: float | None = Field(default=None, description="Fraction of the KV cache.")
    kv_usage_max: float | None = None
    gen_throughput_mean: float | None = Field(default=None, description="Output tok/s.")
    prompt_tokens: float | None = Field(default=None, description="The engine's count.")
    generation_tokens: float | None = Field(default=None, description="The engine's count.")
    prefix_cache_queries: float | None = Field(
        default=None, description="Prompt tokens the prefix cache was asked for over the level."
    )
    prefix_cache_hits: float | None = Field(
        default=None, description="Prompt tokens the prefix cache held over the level."
    )

    prefill_tokens_max: float | None = Field(
        default=None,
        description="The largest prefill batch the engine logged in the level: prompt tokens "
        "computed in one step (SGLang's Prefill line `#new-token`).",
    )
    prefill_batches: int = Field(default=0, description="Prefill lines logged in the level.")
    block_tokens: int | None = Field(
        default=None, description="The KV cache's block size, as the engine reports it."
    )
    prefix_caching: bool | None = Field(
        default=None, description="Whether the engine reports its prefix cache on."
    )

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Hits over queries in this level (the counters' growth, not since the start)."""
        if self.prefix_cache_hits is None or not self.prefix_cache_queries:
            return None
        return self.prefix_cache_hits / self.prefix_cache_queries

    @property
    def gauge_samples(self) -> int:
        """The samples the gauges stand on: the fewest of the sources they came from (a level
        /metrics missed but the log's stats lines covered stands on the log's)."""
        counts = {"metrics": self.samples, "log": self.log_samples}
        return min(counts[source] for source in set(self.sources.values()) or {"metrics"})


class LevelTelemetry(BaseModel):
    """GPU and engine telemetry of one sweep level, on the bench clock."""

    t_start_ns: int
    t_end_ns: int
    output_tokens: int | None = None
    gpu: GpuLevel
    engine: EngineLevel


def summarize_level(
    gpu: GpuTrace,
    engine: EngineTrace,
    t_start_ns: int,
    t_end_ns: int,
    output_tokens: int | None = None,
    *,
    log: EngineTrace | None = None,
) -> LevelTelemetry:
    """Summarise the traces over [t_start_ns, t_end_ns] (bench clock, both ends included).

    `log` holds the samples of the engine's stats lines (`telemetry.logstats`): a field
    /metrics has no value for inside the level is taken from them.
    """
    metrics = _engine_level(engine, t_start_ns, t_end_ns)
    return LevelTelemetry(
        t_start_ns=t_start_ns,
        t_end_ns=t_end_ns,
        output_tokens=output_tokens,
        gpu=_gpu_level(gpu, t_start_ns, t_end_ns, output_tokens),
        engine=metrics if log is None else _with_log(metrics, log, t_start_ns, t_end_ns),
    )


_S = TypeVar("_S", GpuSample, GpmSample, PcieSample, EngineSample)
_G = TypeVar("_G", GpuSample, GpmSample, PcieSample)


def _window(samples: Sequence[_S], t0: int, t1: int, *, margin: int = 0) -> list[_S]:
    """The samples stamped in [t0, t1] (sorted by time), plus `margin` on each side."""
    lo = bisect_left(samples, t0, key=lambda sample: sample.t_ns)
    hi = bisect_right(samples, t1, key=lambda sample: sample.t_ns)
    return list(samples[max(lo - margin, 0) : hi + margin])


def _mean(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return fmean(present) if present else None


def _max(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return max(present) if present else None


def _pct(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else 100 * part / whole


def _counter_delta(points: Sequence[tuple[int, float]], t0: int, t1: int) -> float | None:
    """A counter's rise over [t0, t1], read between its samples (clamped to their span)."""
    if len(points) < 2:
        return None
    times = np.array([t - t0 for t, _ in points], dtype=np.float64)
    values = np.array([value for _, value in points], dtype=np.float64)
    return float(np.interp(t1 - t0, times, values) - np.interp(0.0, times, values))


def _integral_s(points: Sequence[tuple[int, float]], t0: int, t1: int) -> float | None:
    """The integral over [t0, t1] (value x seconds) of the line through the samples."""
    if len(points) < 2:
        return None
    lo, hi = max(t0, points[0][0]), min(t1, points[-1][0])
    if hi <= lo:
        return None
    times = np.array([t - lo for t, _ in points], dtype=np.float64)
    values = np.array([value for _, value in points], dtype=np.float64)
    inner = times[(times > 0) & (times < hi - lo)]
    grid = np.concatenate(([0.0], inner, [float(hi - lo)]))
    level = np.interp(grid, times, values)
    return float(np.sum((level[1:] + level[:-1]) / 2 * np.diff(grid))) / NS_PER_S


def _energy(
    samples: Sequence[GpuSample], t0: int, t1: int
) -> tuple[float | None, EnergySource | None]:
    """Joules over the level from the counter, else from integrated power."""
    around = _window(samples, t0, t1, margin=1)
    counter = [(s.t_ns, float(s.energy_mj)) for s in around if s.energy_mj is not None]
    delta_mj = _counter_delta(counter, t0, t1)
    if delta_mj is not None and delta_mj >= 0:  # negative: the driver reloaded
        return delta_mj / MILLIJOULES_PER_J, "counter"
    joules = _integral_s([(s.t_ns, s.power_w) for s in around if s.power_w is not None], t0, t1)
    return (joules, "power") if joules is not None else (None, None)


def _reason_fractions(masks: Sequence[int]) -> dict[str, float]:
    counts: dict[str, int] = defaultdict(int)
    for mask in masks:
        for name in clock_event_reason_names(mask):
            counts[name] += 1
    return {name: count / len(masks) for name, count in counts.items()}


def _gpu_stats(
    index: int,
    uuid: str | None,
    samples: Sequence[GpuSample],
    gpm: Sequence[GpmSample],
    pcie: Sequence[PcieSample],
    reasons: dict[str, str],
    t0: int,
    t1: int,
) -> GpuStats | None:
    inside = _window(samples, t0, t1)
    if not inside:
        return None
    power = [s.power_w for s in inside]
    limit = _mean(s.power_limit_w for s in inside)
    masks = [s.clock_event_mask for s in inside if s.clock_event_mask is not None]
    gpm_inside = [s.values for s in _window(gpm, t0, t1)]
    pcie_inside = _window(pcie, t0, t1)
    energy_j, source = _energy(samples, t0, t1)
    stats = GpuStats(
        gpu=index,
        uuid=uuid,
        samples=len(inside),
        power_mean_w=_mean(power),
        power_max_w=_max(power),
        power_limit_w=limit,
        power_mean_pct=_pct(_mean(power), limit),
        power_max_pct=_pct(_max(power), limit),
        util_mean_pct=_mean(s.util_pct for s in inside),
        mem_util_mean_pct=_mean(s.mem_util_pct for s in inside),
        sm_clock_mean_mhz=_mean(s.sm_clock_mhz for s in inside),
        pcie_tx_mean_kb_s=_mean(s.tx_kb_s for s in pcie_inside),
        pcie_rx_mean_kb_s=_mean(s.rx_kb_s for s in pcie_inside),
        gpm_sm_util_mean_pct=_mean(v.sm_util_pct for v in gpm_inside),
        gpm_sm_occupancy_mean_pct=_mean(v.sm_occupancy_pct for v in gpm_inside),
        gpm_dram_bw_util_mean_pct=_mean(v.dram_bw_util_pct for v in gpm_inside),
        gpm_tensor_util_mean_pct=_mean(v.tensor_util_pct for v in gpm_inside),
        energy_j=energy_j,
        energy_source=source,
        clock_event_reasons=_reason_fractions(masks),
    )
    explained = {
        "gpm": "no GPM sample inside the level (shorter than GPM's interval)",
        "pcie": "no PCIe sample inside the level (shorter than PCIe's interval)",
        "energy": "too few samples around the level",
    } | reasons  # NVML's own reason first
    stats.unavailable = {
        name: explained[name]
        for name, missing in _missing(stats).items()
        if missing and name in explained
    }
    return stats


def _missing(stats: GpuStats) -> dict[str, bool]:
    """Which reportable fields have no value."""
    return {
        "power": stats.power_mean_w is None,
        "power_limit": stats.power_limit_w is None,
        "utilization": stats.util_mean_pct is None,
        "sm_clock": stats.sm_clock_mean_mhz is None,
        "clock_event_reasons": not stats.clock_event_reasons,
        "energy": stats.energy_j is None,
        "pcie": stats.pcie_tx_mean_kb_s is None and stats.pcie_rx_mean_kb_s is None,
        "gpm": stats.gpm_sm_util_mean_pct is None
        and stats.gpm_dram_bw_util_mean_pct is None
        and stats.gpm_tensor_util_mean_pct is None,
    }


def _sum_all(values: Sequence[float | None]) -> float | None:
    """A sum over GPUs, or None when one GPU has no value: a partial sum would mislead."""
    if not values or any(value is None for value in values):
        return None
    return sum(value for value in values if value is not None)


def _overall(stats: list[GpuStats], samples: Sequence[GpuSample], t0: int, t1: int) -> GpuStats:
    def mean_of(get: Callable[[GpuStats], float | None]) -> float | None:
        return _mean(get(s) for s in stats)

    ticks: dict[int, list[float | None]] = defaultdict(list)
    for sample in _window(samples, t0, t1):
        ticks[sample.tick].append(sample.power_w)
    complete = [values for values in ticks.values() if len(values) == len(stats)]
    power_max = _max(_sum_all(values) for values in complete)
    power_mean = _sum_all([s.power_mean_w for s in stats])
    limit = _sum_all([s.power_limit_w for s in stats])
    energy = _sum_all([s.energy_j for s in stats])
    sources = {s.energy_source for s in stats}
    summarised = {s.gpu for s in stats}
    masks = [
        s.clock_event_mask
        for s in _window(samples, t0, t1)
        if s.clock_event_mask is not None and s.gpu in summarised
    ]
    together = GpuStats(
        gpu=None,
        samples=sum(s.samples for s in stats),
        power_mean_w=power_mean,
        power_max_w=power_max,
        power_limit_w=limit,
        power_mean_pct=_pct(power_mean, limit),
        power_max_pct=_pct(power_max, limit),
        util_mean_pct=mean_of(lambda s: s.util_mean_pct),
        mem_util_mean_pct=mean_of(lambda s: s.mem_util_mean_pct),
        sm_clock_mean_mhz=mean_of(lambda s: s.sm_clock_mean_mhz),
        pcie_tx_mean_kb_s=_sum_all([s.pcie_tx_mean_kb_s for s in stats]),
        pcie_rx_mean_kb_s=_sum_all([s.pcie_rx_mean_kb_s for s in stats]),
        gpm_sm_util_mean_pct=mean_of(lambda s: s.gpm_sm_util_mean_pct),
        gpm_sm_occupancy_mean_pct=mean_of(lambda s: s.gpm_sm_occupancy_mean_pct),
        gpm_dram_bw_util_mean_pct=mean_of(lambda s: s.gpm_dram_bw_util_mean_pct),
        gpm_tensor_util_mean_pct=mean_of(lambda s: s.gpm_tensor_util_mean_pct),
        energy_j=energy,
        energy_source=(sources.pop() if len(sources) == 1 else "mixed")
        if energy is not None
        else None,
        clock_event_reasons=_reason_fractions(masks) if masks else {},
    )
    together.unavailable = {
        name: next(f"GPU {s.gpu}: {s.unavailable[name]}" for s in stats if name in s.unavailable)
        for name, missing in _missing(together).items()
        if missing and any(name in s.unavailable for s in stats)
    }
    return together


def _by_gpu(samples: Iterable[_G]) -> dict[int, list[_G]]:
    split: dict[int, list[_G]] = defaultdict(list)
    for sample in samples:
        split[sample.gpu].append(sample)
    return split


def _gpu_level(trace: GpuTrace, t0: int, t1: int, output_tokens: int | None) -> GpuLevel:
    if trace.reason is not None:
        return GpuLevel(available=False, reason=trace.reason)
    if not trace.gpus:
        return GpuLevel(available=False, reason=NO_GPUS_GIVEN)
    samples, gpm, pcie = _by_gpu(trace.samples), _by_gpu(trace.gpm), _by_gpu(trace.pcie)
    stats = [
        stat
        for info in trace.gpus
        if (
            stat := _gpu_stats(
                info.index,
                info.uuid,
                samples.get(info.index, []),
                gpm.get(info.index, []),
                pcie.get(info.index, []),
                trace.unavailable.get(info.index, {}),
                t0,
                t1,
            )
        )
        is not None
    ]
    if not stats:
        return GpuLevel(available=False, reason="no GPU sample inside the level")
    overall = _overall(stats, trace.samples, t0, t1)
    energy = overall.energy_j
    return GpuLevel(
        available=True,
        gpus=stats,
        overall=overall,
        tokens_per_joule=output_tokens / energy if output_tokens is not None and energy else None,
    )


_GAUGES = ("running", "queued", "kv_usage", "gen_throughput")


def _gauges(samples: Sequence[EngineSample]) -> dict[str, float | None]:
    """Mean (and max, for all but throughput) of each gauge, by EngineLevel field name."""
    values: dict[str, float | None] = {}
    for name in _GAUGES:
        series = [getattr(sample, name) for sample in samples]
        values[f"{name}_mean"] = _mean(series)
        if name != "gen_throughput":
            values[f"{name}_max"] = _max(series)
    return values


def too_few_samples(count: int, what: str = "/metrics") -> str:
    """Why a level's engine counts are missing: `count` samples of `what`, too few."""
    noun = "sample" if count == 1 else "samples"
    return f"{count} {noun} of {what} in this level: too few ({MIN_ENGINE_SAMPLES} needed)"


def _with_log(level: EngineLevel, log: EngineTrace, t0: int, t1: int) -> EngineLevel:
    """`level` with the gauges it lacks taken from the log's stats lines inside [t0, t1]."""
    inside = _window(log.samples, t0, t1)
    if not inside:
        return level
    prefills = [s.prefill_tokens for s in inside if s.prefill_tokens is not None]
    if prefills:
        level = level.model_copy(
            update={"prefill_tokens_max": max(prefills), "prefill_batches": len(prefills)}
        )
    if len(inside) < MIN_ENGINE_SAMPLES:
        short = too_few_samples(len(inside), "the engine log's stats lines")
        update: dict[str, object] = {"log_samples": len(inside)}
        if not level.available:
            update["reason"] = f"{level.reason}; {short}" if level.reason else short
        return level.model_copy(update=update)
    from_log = _gauges(inside)
    update = {"log_samples": len(inside)}
    sources = dict(level.sources)
    for name in _GAUGES:
        if getattr(level, f"{name}_mean") is None and from_log[f"{name}_mean"] is not None:
            update |= {key: v for key, v in from_log.items() if key.startswith(f"{name}_")}
            sources[name] = "log"
    if len(sources) == len(level.sources):
        return level.model_copy(update=update)
    engine = level.engine or next((s.engine for s in inside if s.engine is not None), None)
    return level.model_copy(
        update={**update, "available": True, "engine": engine, "sources": sources}
    )


def _engine_level(trace: EngineTrace, t0: int, t1: int) -> EngineLevel:
    if trace.reason is not None:
        return EngineLevel(available=False, reason=trace.reason)
    if trace.url is None:
        return EngineLevel(available=False, reason="no /metrics URL was given")
    inside = _window(trace.samples, t0, t1)
    if not inside:
        return EngineLevel(available=False, reason="no /metrics scrape inside the level")
    engine = next((s.engine for s in inside if s.engine is not None), None)
    if engine is None:
        return EngineLevel(
            available=False,
            reason=f"{trace.url} has no SGLang or vLLM metrics",
            samples=len(inside),
        )
    around = _window(trace.samples, t0, t1, margin=1)
    enough = len(inside) >= MIN_ENGINE_SAMPLES
    gauges = _gauges(inside) if enough else {}
    level = EngineLevel(
        available=enough,
        reason=None if enough else too_few_samples(len(inside)),
        engine=engine,
        samples=len(inside),
        sources={name: "metrics" for name in _GAUGES if gauges.get(f"{name}_mean") is not None},
        prompt_tokens=_counter_delta(_series(around, "prompt_tokens_total"), t0, t1),
        generation_tokens=_counter_delta(_series(around, "generation_tokens_total"), t0, t1),
        prefix_cache_queries=_counter_delta(_series(around, "prefix_queries_total"), t0, t1),
        prefix_cache_hits=_counter_delta(_series(around, "prefix_hits_total"), t0, t1),
        block_tokens=next((x.block_tokens for x in around if x.block_tokens), None),
        prefix_caching=next(
            (x.prefix_caching for x in around if x.prefix_caching is not None), None
        ),
    )
    return level.model_copy(update=gauges)


def _series(samples: Sequence[EngineSample], counter: str) -> list[tuple[int, float]]:
    """(time, value) of one counter over the samples that carry it."""
    return [
        (sample.t_ns, value)
        for sample in samples
        if (value := getattr(sample, counter)) is not None
    ]
