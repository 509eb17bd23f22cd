"""What each token costs: dollars from a given hourly price, joules from sampled GPU power.

Pure arithmetic over a level's own fields, so summary.json can be checked by hand and a
report can price an old run (or price it again at another rate) without re-measuring:

    usd_per_m_total_tokens  = usd_per_hour / 3600 / total_throughput  x 1e6
    usd_per_m_output_tokens = usd_per_hour / 3600 / output_throughput x 1e6
    j_per_output_token      = GPU energy over the level / total_output_tokens
    j_per_total_token       = GPU energy over the level / (input + output tokens)
    total_tokens_per_s_per_mw = total_throughput / (mean GPU power in W / 1e6)

`usd_per_hour` is a machine's price, or a GPU's price times the GPUs the deployment
holds (`resolve_price`). Energy and power are the sampled GPUs' only (NVML): the host,
its fans and the network are not in them.
"""

from __future__ import annotations

from collections.abc import Sequence

from servelab.bench.capacity import DEFAULT_ATTAINMENT
from servelab.bench.cost_results import CostPart, HourlyPrice, LevelCost, Price
from servelab.bench.results import BenchSummary, LevelSummary
from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.engines.spec import computes_on_cpu
from servelab.probe.report import ProbeReport
from servelab.telemetry.summary import NO_GPUS_GIVEN

__all__ = [
    "NO_PRICE",
    "S_PER_HOUR",
    "TOKENS_PER_M",
    "W_PER_MW",
    "cheapest_level",
    "level_cost",
    "meets_slo",
    "price_over",
    "priced",
    "resolve_price",
]

S_PER_HOUR = 3600.0
TOKENS_PER_M = 1e6
W_PER_MW = 1e6
NO_PRICE = "no price given (--gpu-hour-price or --machine-hour-price)"
_NOT_SAMPLED = "GPU power was not sampled (give --gpus)"


def level_cost(level: LevelSummary, price: Price | None) -> LevelCost:
    """The level's cost per million tokens at `price`, and its GPU energy per token."""
    unavailable: dict[CostPart, str] = {}
    total, output = level.total_throughput, level.output_throughput
    usd_total = usd_output = None
    if price is None:
        unavailable["price"] = NO_PRICE
    elif not output:
        unavailable["price"] = "no tokens completed at this level"
    else:
        usd_per_s = price.usd_per_hour / S_PER_HOUR
        usd_output = usd_per_s / output * TOKENS_PER_M
        if total:
            usd_total = usd_per_s / total * TOKENS_PER_M
        else:  # an imported run whose file gave no input tokens
            unavailable["price"] = "no total throughput: priced per output token only"
    gpu = level.telemetry.gpu if level.telemetry is not None else None
    overall = gpu.overall if gpu is not None and gpu.available else None
    energy = overall.energy_j if overall is not None else None
    power = overall.power_mean_w if overall is not None else None
    tokens = level.total_input_tokens + level.total_output_tokens
    if overall is None:
        reason = gpu.reason if gpu is not None else None
        unavailable["energy"] = (
            _NOT_SAMPLED if reason in (None, NO_GPUS_GIVEN) else f"GPU power not sampled: {reason}"
        )
    elif energy is None or power is None:
        unavailable["energy"] = overall.unavailable.get("energy") or overall.unavailable.get(
            "power", "the GPUs gave no energy or power reading"
        )
    elif not level.total_output_tokens:
        unavailable["energy"] = "no tokens completed at this level"
    return LevelCost(
        usd_per_m_total_tokens=usd_total,
        usd_per_m_output_tokens=usd_output,
        gpu_energy_j=energy,
        j_per_output_token=(
            energy / level.total_output_tokens if energy and level.total_output_tokens else None
        ),
        j_per_total_token=energy / tokens if energy and tokens else None,
        total_tokens_per_s_per_mw=total / (power / W_PER_MW) if total and power else None,
        unavailable=unavailable,
    )


def priced(summary: BenchSummary, price: Price | None) -> BenchSummary:
    """`summary` with `price` recorded and every level's cost computed at it."""
    levels = [
        level.model_copy(update={"cost": level_cost(level, price)}) for level in summary.levels
    ]
    return summary.model_copy(update={"price": price, "levels": levels})


def meets_slo(level: LevelSummary, attainment: float = DEFAULT_ATTAINMENT) -> bool:
    """Whether at least `attainment` of the level's attempted requests met every SLO (the
    capacity search's rule, bench.attainment); False for a level run without SLOs."""
    return bool(level.slo_ms) and (level.good_fraction or 0.0) >= attainment


def cheapest_level(
    levels: Sequence[LevelSummary], *, attainment: float = DEFAULT_ATTAINMENT
) -> LevelSummary | None:
    """The level with the lowest USD per million total tokens among those that meet their
    SLOs; None where none does or none is priced."""
    meeting = [
        level
        for level in levels
        if meets_slo(level, attainment)
        and level.cost is not None
        and level.cost.usd_per_m_total_tokens is not None
    ]
    return min(meeting, key=_usd_total, default=None)


def resolve_price(
    given: HourlyPrice,
    *,
    spec: EngineSpec | None = None,
    gpus: Sequence[int] = (),
    probe: ProbeReport | None = None,
) -> Price:
    """`given` with the GPU count it multiplies: the launched spec's layout, else the GPUs
    sampled (--gpus), else the GPUs the probe found. A GPU price with no count from any of
    them is a ConfigError; a machine price records the count where one is known."""
    count, source = _gpu_count(spec, gpus, probe) or (None, None)
    return price_over(given, count, source)


def price_over(given: HourlyPrice, gpus: int | None, gpus_source: str | None) -> Price:
    """`given` over `gpus` GPUs (from `gpus_source`); a GPU price without them is a
    ConfigError."""
    per_gpu = given.basis == "gpu_hour"
    if per_gpu and gpus is None:
        raise ConfigError(
            f"{given.source} needs the deployment's GPU count, and no engine spec, --gpus or "
            "probe gave one",
            hint="give --gpus (the engine's GPUs), or price the whole machine with "
            "--machine-hour-price",
        )
    return Price(
        basis=given.basis,
        usd_per_gpu_hour=given.usd if per_gpu else None,
        usd_per_machine_hour=None if per_gpu else given.usd,
        gpus=gpus,
        gpus_source=gpus_source,
        price_source=given.source,
        usd_per_hour=given.usd * gpus if per_gpu and gpus is not None else given.usd,
    )


def _gpu_count(
    spec: EngineSpec | None, gpus: Sequence[int], probe: ProbeReport | None
) -> tuple[int, str] | None:
    if spec is not None and not computes_on_cpu(spec):
        layout = ", ".join(f"{name} {size}" for name, size in spec.layout.items() if size > 1)
        return spec.gpus_needed, f"the engine spec's layout ({layout or 'one GPU'})"
    if gpus:
        return len(gpus), "--gpus " + ",".join(str(g) for g in gpus)
    if probe is not None and probe.gpus is not None and probe.gpus.gpus:
        return len(probe.gpus.gpus), "the probe (GPUs on this machine)"
    return None


def _usd_total(level: LevelSummary) -> float:
    assert level.cost is not None and level.cost.usd_per_m_total_tokens is not None
    return level.cost.usd_per_m_total_tokens
