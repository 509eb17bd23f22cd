"""Cost and energy per token (bench.cost) against hand computations from summary.json's own
fields: the committed H200 run (its GPU power sampled by NVML), priced here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.bench.cost import cheapest_level, level_cost, priced, resolve_price
from servelab.bench.cost_results import HourlyPrice, Price
from servelab.bench.results import BenchSummary
from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.report.cost import cost_lines
from tests.report.builders import h200_probe
from tests.unit.helpers import level_summary

H200_RUN = Path(__file__).resolve().parents[2] / "benchmarks/gpu/results/h200-report"
GPU_PRICE = HourlyPrice(basis="gpu_hour", usd=3.5, source="test --gpu-hour-price")


def h200() -> tuple[BenchSummary, dict]:
    """The run as servelab reads it, and the same file as plain JSON for the hand sums."""
    text = (H200_RUN / "summary.json").read_text()
    return BenchSummary.model_validate_json(text), json.loads(text)


def test_a_summary_from_before_costs_were_recorded_still_loads():
    summary, raw = h200()
    assert "price" not in raw and all("cost" not in level for level in raw["levels"])
    assert summary.price is None
    assert all(level.cost is None for level in summary.levels)


def test_cost_and_energy_at_concurrency_8_match_a_hand_computation():
    """Level 3 (concurrency 8): 25,008 input + 3,072 output tokens in 15.7119 s, 2,603.67 J
    of GPU energy at a mean 164.56 W; one H200 at $3.50 an hour."""
    summary, raw = h200()
    price = resolve_price(GPU_PRICE, spec=EngineSpec(engine="embedded", device="cuda"))
    assert (price.gpus, price.usd_per_hour) == (1, 3.5)
    cost = level_cost(summary.levels[3], price)
    # by hand: 28,080 tokens / 15.7119 s = 1,787.18 tok/s; $3.50 / 3600 s = $0.00097222/s
    assert cost.usd_per_m_total_tokens == pytest.approx(0.5440, rel=1e-3)
    assert cost.usd_per_m_output_tokens == pytest.approx(4.9725, rel=1e-3)  # 195.52 tok/s
    assert cost.j_per_output_token == pytest.approx(2603.67 / 3072, rel=1e-5)  # 0.84755 J
    assert cost.j_per_total_token == pytest.approx(2603.67 / 28080, rel=1e-5)  # 0.092723 J
    assert cost.total_tokens_per_s_per_mw == pytest.approx(1787.18 / 164.5625e-6, rel=1e-5)
    # and from the file's own fields, every level
    for level, fields in zip(priced(summary, price).levels, raw["levels"], strict=True):
        overall = fields["telemetry"]["gpu"]["overall"]
        tokens = fields["total_input_tokens"] + fields["total_output_tokens"]
        assert level.cost is not None and level.cost.unavailable == {}
        assert level.cost.usd_per_m_total_tokens == pytest.approx(
            3.5 / 3600 / (tokens / fields["duration"]) * 1e6
        )
        assert level.cost.usd_per_m_output_tokens == pytest.approx(
            3.5 / 3600 / fields["output_throughput"] * 1e6
        )
        assert level.cost.j_per_output_token == pytest.approx(
            1 / fields["telemetry"]["gpu"]["tokens_per_joule"]
        )
        assert level.cost.total_tokens_per_s_per_mw == pytest.approx(
            fields["total_throughput"] / overall["power_mean_w"] * 1e6
        )


def test_a_gpu_price_counts_the_spec_then_the_sampled_gpus_then_the_probe():
    tp4 = resolve_price(GPU_PRICE, spec=EngineSpec(engine="vllm", tp=2, pp=2), gpus=[0])
    assert (tp4.gpus, tp4.usd_per_hour, tp4.gpus_source) == (
        4,
        14.0,
        "the engine spec's layout (tp 2, pp 2)",
    )
    sampled = resolve_price(GPU_PRICE, gpus=[0, 1, 2], probe=h200_probe())
    assert (sampled.gpus, sampled.usd_per_hour, sampled.gpus_source) == (3, 10.5, "--gpus 0,1,2")
    probed = resolve_price(GPU_PRICE, probe=h200_probe())
    assert (probed.gpus, probed.gpus_source) == (1, "the probe (GPUs on this machine)")
    # an engine on the CPU holds no GPU, whatever its layout says
    with pytest.raises(ConfigError, match="needs the deployment's GPU count"):
        resolve_price(GPU_PRICE, spec=EngineSpec(engine="embedded", model="tiny"))


def test_a_machine_price_is_the_whole_machine_whatever_its_gpus():
    given = HourlyPrice(basis="machine_hour", usd=12.0, source="test --machine-hour-price")
    price = resolve_price(given, gpus=[0, 1])
    assert (price.usd_per_hour, price.usd_per_machine_hour, price.usd_per_gpu_hour) == (
        12.0,
        12.0,
        None,
    )
    assert price.gpus == 2  # recorded where known, not multiplied
    assert resolve_price(given).gpus is None


def test_without_a_price_or_power_each_part_says_why():
    cost = level_cost(level_summary(4, 1000.0), None)
    assert cost.usd_per_m_total_tokens is None and cost.j_per_output_token is None
    assert cost.unavailable == {
        "price": "no price given (--gpu-hour-price or --machine-hour-price)",
        "energy": "GPU power was not sampled (give --gpus)",
    }


def test_the_cheapest_level_is_one_that_meets_its_slos():
    """The cheapest level overall (64) misses its SLOs; 32 is the cheapest that meets them."""
    price = Price(
        basis="machine_hour",
        usd_per_gpu_hour=None,
        usd_per_machine_hour=36.0,
        gpus=None,
        gpus_source=None,
        price_source="test",
        usd_per_hour=36.0,
    )
    levels = []
    for index, (concurrency, tok_s, good) in enumerate(
        [(8, 500.0, 1.0), (32, 1000.0, 0.95), (64, 2000.0, 0.5)]
    ):
        level = level_summary(concurrency, tok_s, index).model_copy(
            update={"slo_ms": {"ttft": 200.0}, "good_fraction": good}
        )
        levels.append(level.model_copy(update={"cost": level_cost(level, price)}))
    # $36 an hour is $0.01 a second: $10 per million at 1,000 tok/s
    assert levels[1].cost is not None and levels[1].cost.usd_per_m_total_tokens == 10.0
    assert cheapest_level(levels) is levels[1]
    assert cheapest_level(levels, attainment=0.99) is levels[0]
    assert cheapest_level(levels, attainment=0.4) is levels[2]


def test_the_cli_lines_say_no_price_and_the_cost_at_the_knee():
    summary, _ = h200()
    assert cost_lines(summary)[0] == (
        "price: no price given (--gpu-hour-price or --machine-hour-price)"
    )
    price = resolve_price(GPU_PRICE, probe=h200_probe())
    lines = cost_lines(priced(summary, price))
    assert lines[0].startswith("price: $3.50 an hour (1 GPU x $3.50 per GPU-hour")
    # the knee is at 256: 7,811 total tok/s, 855 output
    assert lines[1] == (
        "cost at the knee (concurrency 256): $0.124 per million total tokens, "
        "$1.14 per million output tokens"
    )
    assert lines[2].startswith("energy at the knee (concurrency 256), GPU power only: 0.4296 J")
