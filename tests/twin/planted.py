"""A sweep measured on the batcher itself with a planted step cost, written as the client
writes its records: the engine whose every term is known, for the twin's tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from servelab.bench.load import LevelSpec, LoadMode
from servelab.bench.metrics import WorkerStats, compute_level
from servelab.bench.records import RequestRecord
from servelab.bench.results import LevelSummary
from servelab.core.units import NS_PER_S
from servelab.sim.policy import EXACT_RESERVE
from servelab.sim.stepcost import LinearStepCost
from servelab.twin import EngineLimits
from servelab.twin.records import LevelLoad
from servelab.twin.replay import ReplayRequest, replay_level

__all__ = ["LIMITS", "OVERHEAD_S", "PLANTED", "measured_run", "planted_requests"]

PLANTED = LinearStepCost(
    base_ms=6.0,
    per_seq_ms=0.25,
    per_context_token_ms=0.002,
    per_prefill_token_ms=0.015,
    prefill_step_ms=1.5,
)
OVERHEAD_S = 0.003
LIMITS = EngineLimits(EXACT_RESERVE, running_cap=12, batch_tokens=512)


def planted_requests(count: int, seed: int, *, prompt: tuple[int, int], output: tuple[int, int]):
    rng = np.random.default_rng(seed)
    return [
        ReplayRequest(
            index=i,
            prompt_tokens=int(rng.integers(*prompt)),
            output_tokens=int(rng.integers(*output)),
            send_s=0.0,
            token_s=[],
        )
        for i in range(count)
    ]


def measured_run(
    concurrencies: Sequence[int],
    *,
    cost: LinearStepCost = PLANTED,
    limits: EngineLimits = LIMITS,
    prompt: tuple[int, int] = (32, 700),
    output: tuple[int, int] = (8, 80),
) -> tuple[list[LevelSummary], list[dict]]:
    """A sweep 'measured' on the batcher with the planted cost, as summaries and rows."""
    rows: list[dict] = []
    summaries = []
    offset = 0.0
    for index, concurrency in enumerate(concurrencies):
        load = LevelLoad(index, "concurrency", float(concurrency))
        requests = planted_requests(6 * concurrency, index, prompt=prompt, output=output)
        replay_level(load, requests, step_cost=cost, limits=limits, overhead_s=OVERHEAD_S)
        records = [as_record(index, r, offset) for r in requests]
        rows += [r.to_json() for r in records]
        spec = LevelSpec(index, LoadMode.CONCURRENCY, concurrency, len(records), None, 0)
        worker = WorkerStats(worker=0, loop_lag_p99_ns=0, loop_lag_max_ns=0, cpu_s=0.0, wall_s=1.0)
        summaries.append(compute_level(records, level=spec, workers=[worker]))
        offset += max(r.last_s or 0.0 for r in requests) + 1.0
    return summaries, rows


def as_record(level: int, r: ReplayRequest, offset: float) -> RequestRecord:
    assert r.sent_s is not None and r.token_s
    send = round((offset + r.sent_s) * NS_PER_S)
    ends = [round((offset + t) * NS_PER_S) - send for t in r.token_s]
    return RequestRecord(
        index=r.index,
        level=level,
        warmup=False,
        worker=0,
        t_send_ns=send,
        t_scheduled_ns=send,
        t_end_ns=send + ends[-1],
        ok=True,
        max_tokens=r.output_tokens,
        chunk_offsets_ns=ends,
        output_tokens=len(ends),
        prompt_tokens=r.prompt_tokens,
    )
