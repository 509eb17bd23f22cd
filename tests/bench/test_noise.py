"""The noise band needs several blocks: a level of one block (or a few) has no band."""

from __future__ import annotations

import math
import random

import pytest

from servelab.bench.noise import (
    MIN_BLOCKS,
    level_sample,
    metric_statistic,
    no_band_reason,
    rate_statistic,
    ratio_band,
)
from servelab.tune.kernels import decide
from tests.unit.helpers import level_summary


def _records(n: int, *, e2e_ms: float, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows, t = [], 0
    for i in range(n):
        e2e = e2e_ms * (1 + rng.uniform(-0.05, 0.05))
        rows.append(
            {
                "index": i,
                "level": 0,
                "warmup": False,
                "ok": True,
                "t_send_ns": t,
                "t_end_ns": t + int(e2e * 1e6),
                "chunk_offsets_ns": [int(e2e * 1e5), int(e2e * 1e6)],
                "output_tokens": 32,
                "prompt_tokens": 64,
            }
        )
        t += 1000
    return rows


def _sample(concurrency: int, n: int, *, seed: int, total: float = 100.0):
    sample = level_sample(level_summary(concurrency, total), _records(n, e2e_ms=100.0, seed=seed))
    assert sample is not None
    return sample


def test_a_level_no_larger_than_its_concurrency_has_no_band():
    """64 requests at concurrency 64: one block, every resample is the whole level."""
    a, b = _sample(64, 64, seed=1), _sample(64, 64, seed=2, total=103.0)
    assert a.blocks == 1
    band = ratio_band(a, b, rate_statistic("total_throughput"))
    assert band.why_none == "no band: one block of 64 requests"
    assert math.isnan(band.lo) and math.isnan(band.hi) and not band.excludes_one()
    assert band.ratio == pytest.approx(1.03)


def test_a_level_of_fewer_than_five_blocks_has_no_band():
    a, b = _sample(8, 32, seed=1), _sample(8, 40, seed=2)
    assert (a.blocks, b.blocks, MIN_BLOCKS) == (4, 5, 5)
    assert no_band_reason(a, b) == "no band: only 4 blocks of 8 requests"
    assert math.isnan(ratio_band(a, b, rate_statistic("total_throughput")).lo)


def test_five_blocks_draw_a_band():
    a, b = _sample(8, 40, seed=1), _sample(8, 40, seed=2)
    assert no_band_reason(a, b) is None
    band = ratio_band(a, b, rate_statistic("total_throughput"))
    assert band.why_none is None and band.lo < 1 < band.hi


def test_kernel_acceptance_says_no_band_for_one_block():
    a_level, b_level = level_summary(64, 100.0), level_summary(64, 200.0)
    decision = decide(
        [a_level], _records(64, e2e_ms=100.0, seed=1), [b_level], _records(64, e2e_ms=50, seed=2)
    )
    (level,) = decision.levels
    assert not decision.keep and not level.passed
    assert level.reason == "no band: one block of 64 requests"
    assert level.band_lo is None and level.band_hi is None


def test_a_level_whose_answers_came_whole_has_no_tpot_ratio_and_no_crash():
    """Answers that arrive in one chunk have a TPOT of 0: a resample of mostly such requests
    has no ratio, and the band says so instead of dividing by zero."""
    whole = _records(40, e2e_ms=100.0, seed=1)
    for row in whole:
        row["chunk_offsets_ns"] = [row["t_end_ns"] - row["t_send_ns"]] * 2
    a = level_sample(level_summary(8, 100.0), whole)
    b = _sample(8, 40, seed=2)
    assert a is not None
    band = ratio_band(a, b, metric_statistic("median_tpot_ms"))
    assert math.isnan(band.ratio) and not band.drawn
    assert band.why_none == "no band: too few requests with that statistic"
