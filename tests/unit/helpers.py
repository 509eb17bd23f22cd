"""Builders of result objects for tests of code that reads summaries."""

from servelab.bench.load import LevelSpec, LoadMode
from servelab.bench.metrics import WorkerStats, compute_level
from servelab.bench.records import RequestRecord
from servelab.bench.results import LevelSummary


def level_summary(concurrency: int, total_tok_s: float, index: int = 0) -> LevelSummary:
    """A level whose total throughput is `total_tok_s` (one request: 1 s, all output)."""
    tokens = round(total_tok_s)
    record = RequestRecord(
        index=0,
        level=index,
        warmup=False,
        worker=0,
        t_send_ns=0,
        t_scheduled_ns=0,
        t_end_ns=1_000_000_000,
        ok=True,
        max_tokens=tokens,
        chunk_offsets_ns=[1_000_000_000],
        chunk_tokens=[tokens],
        output_tokens=tokens,
        prompt_tokens=0,
    )
    spec = LevelSpec(
        index=index,
        mode=LoadMode.CONCURRENCY,
        value=concurrency,
        num_requests=1,
        duration_s=None,
        warmup=0,
    )
    worker = WorkerStats(worker=0, loop_lag_p99_ns=0, loop_lag_max_ns=0, cpu_s=0.0, wall_s=1.0)
    summary = compute_level([record], level=spec, workers=[worker])
    return summary.model_copy(update={"total_throughput": total_tok_s})
