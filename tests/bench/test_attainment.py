"""The verdict on one load: the attained share, each SLO metric at that share, the bands,
and when a repeat could reverse it."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.bench.attainment import SloSample, judge, quantile_label, request_block, slo_sample
from servelab.bench.load import LevelSpec, LoadMode
from servelab.bench.metrics import WorkerStats, compute_level
from servelab.bench.records import ErrorKind, RequestRecord
from tests.unit.helpers import level_summary

MS = 1_000_000


def record(
    index: int, ttft_ms: float, e2e_ms: float, *, tokens: int = 11, **fields
) -> RequestRecord:
    values = {
        "index": index,
        "level": 0,
        "warmup": False,
        "worker": 0,
        "t_send_ns": index * 1000 * MS,
        "t_scheduled_ns": index * 1000 * MS,
        "t_end_ns": index * 1000 * MS + int(e2e_ms * MS),
        "ok": True,
        "max_tokens": tokens,
        "chunk_offsets_ns": [int(ttft_ms * MS), int(e2e_ms * MS)],
        "chunk_tokens": [1, tokens - 1],
        "output_tokens": tokens,
        **fields,
    }
    return RequestRecord(**values)


def test_a_request_is_good_when_it_completed_within_every_slo_as_goodput_counts_it():
    slo = {"ttft": 100.0, "tpot": 10.0}
    records = [
        record(0, 50, 150),  # TPOT (150 - 50) / 10 = 10 ms: good
        record(1, 150, 200),  # TTFT over
        record(2, 50, 250),  # TPOT 20 ms: over
        record(3, 0, 0, ok=False, error_kind=ErrorKind.HTTP, chunk_offsets_ns=[]),
        record(4, 10, 20, ok=False, error_kind=ErrorKind.CANCELLED),  # not attempted
        record(5, 10, 20, warmup=True),  # warm-up: not measured
        record(6, 60, 160),
    ]
    sample = slo_sample(records, slo, block=1)
    assert sample.good.tolist() == [True, False, False, False, True]
    assert sample.values_ms["ttft"].tolist() == [50, 150, 50, np.inf, 60]
    spec = LevelSpec(
        index=0, mode=LoadMode.CONCURRENCY, value=1, num_requests=5, duration_s=None, warmup=1
    )
    worker = WorkerStats(worker=0, loop_lag_p99_ns=0, loop_lag_max_ns=0, cpu_s=0.0, wall_s=1.0)
    summary = compute_level(records, level=spec, workers=[worker], slo_ms=slo)
    judged = judge([sample], slo, 0.9)
    assert judged.attained == summary.good_fraction == 0.4
    assert judged.requests == 5 and not judged.meets


def test_the_quantile_is_under_the_slo_exactly_when_that_slo_alone_is_attained():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        values = rng.choice([50.0, 99.0, 100.0, 101.0, 300.0, np.inf], size=n)
        share = float(rng.choice([0.5, 0.9, 0.95, 0.99, 1.0]))
        # one block: no band to draw, the verdict alone
        sample = SloSample(good=values <= 100.0, values_ms={"ttft": values}, block=n)
        judged = judge([sample], {"ttft": 100.0}, share)
        q = judged.quantiles[0].value_ms
        assert judged.meets == (q is not None and q <= 100.0)


def test_the_binding_slo_is_the_nearest_its_bound_and_the_share_counts_all_of_them():
    """Each SLO alone holds for 90% of requests, but not the same 90%: only 80% meet both."""
    ttft = np.array([10.0] * 8 + [500.0, 10.0])
    tpot = np.array([5.0] * 8 + [5.0, 90.0])
    sample = SloSample(
        good=(ttft <= 100) & (tpot <= 50), values_ms={"ttft": ttft, "tpot": tpot}, block=2
    )
    judged = judge([sample], {"ttft": 100.0, "tpot": 50.0}, 0.9)
    assert judged.attained == pytest.approx(0.8) and not judged.meets
    assert [q.value_ms for q in judged.quantiles] == [10.0, 5.0]
    judged = judge([sample], {"ttft": 100.0, "tpot": 6.0}, 0.9)
    assert judged.binding == "tpot"  # 5 / 6 beats 10 / 100


def test_a_share_whose_band_holds_the_attainment_is_within_noise():
    blocks = [1.0, 0.5, 1.0, 1.0, 0.75, 1.0, 0.75, 1.0]
    good = np.concatenate([np.arange(4) < round(4 * b) for b in blocks])
    sample = SloSample(good=good, values_ms={"ttft": np.where(good, 10.0, 900.0)}, block=4)
    judged = judge([sample], {"ttft": 100.0}, 0.9)
    assert judged.attained == pytest.approx(0.875) and not judged.meets
    assert judged.attained_lo is not None and judged.attained_hi is not None
    assert judged.attained_lo < 0.9 <= judged.attained_hi
    assert judged.within_noise and "share's band" in judged.noise


def test_a_steady_level_is_outside_noise_and_its_metric_band_is_drawn():
    values = np.linspace(10.0, 50.0, 40)
    sample = SloSample(good=values <= 100, values_ms={"ttft": values}, block=4)
    judged = judge([sample], {"ttft": 100.0}, 0.9)
    assert judged.meets and not judged.within_noise
    assert (judged.attained_lo, judged.attained_hi) == (1.0, 1.0)
    q = judged.quantiles[0]
    assert q.band_lo_ms is not None and q.band_hi_ms is not None
    assert q.band_lo_ms <= q.value_ms <= q.band_hi_ms < 100


def test_pooled_measurements_are_judged_together():
    one = SloSample(good=np.ones(20, dtype=bool), values_ms={"ttft": np.full(20, 10.0)}, block=4)
    two = SloSample(good=np.zeros(20, dtype=bool), values_ms={"ttft": np.full(20, 900.0)}, block=4)
    judged = judge([one, two], {"ttft": 100.0}, 0.5)
    assert judged.requests == 40 and judged.attained == 0.5 and judged.meets


def test_a_failed_request_is_infinitely_slow_and_its_quantile_is_none():
    good = np.array([True, False, False, False, False])
    values = np.array([10.0, np.inf, np.inf, np.inf, np.inf])
    judged = judge([SloSample(good=good, values_ms={"ttft": values}, block=1)], {"ttft": 100}, 0.9)
    assert judged.quantiles[0].value_ms is None and not judged.meets


def test_quantile_labels_and_blocks():
    assert [quantile_label(a) for a in (0.5, 0.9, 0.99, 0.999, 1.0)] == [
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
    ]
    closed = level_summary(8, 100.0)
    assert request_block(closed) == 8
    opened = closed.model_copy(update={"max_concurrency": None, "concurrency": 3.4})
    assert request_block(opened) == 3
