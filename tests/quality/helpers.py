"""Passes built by hand, for the comparison and verdict tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from servelab.bench.quality.results import ForcedReading, ForcedSet, ProbeReading, QualityPass

N_PROBES = 32
N_TOKENS = 16


def reference_logprobs(n_probes: int = N_PROBES, n_tokens: int = N_TOKENS) -> np.ndarray:
    """Plausible greedy logprobs: between -3 and 0 nats."""
    return -np.random.default_rng(1).uniform(0.0, 3.0, size=(n_probes, n_tokens))


def make_pass(
    name: str,
    logprobs: np.ndarray,
    *,
    forced_on: str = "before",
    ids: Callable[[int], list[int]] | None = None,
    error: tuple[int, str] | None = None,
) -> QualityPass:
    """A pass whose greedy ids are `ids(probe)` (default 100+k) and whose forced logprobs
    on `forced_on` are `logprobs`; `error` plants (probe, kind) on one reading."""
    readings, forced = [], []
    for i, row in enumerate(logprobs):
        token_ids = ids(i) if ids else [100 + k for k in range(len(row))]
        bad = error is not None and error[0] == i
        readings.append(
            ProbeReading(
                probe_id=f"p{i:03d}",
                ok=not bad,
                error_kind=error[1] if bad and error else None,  # type: ignore[arg-type]
                text="".join(f" w{t}" for t in token_ids),
                token_ids=token_ids,
                tokens=[f" w{t}" for t in token_ids],
                token_source="ids",
                logprobs=[float(v) for v in row],
                finish_reason="length",
                completion_tokens=len(token_ids),
                latency_ms=1.0,
            )
        )
        forced.append(
            ForcedReading(
                probe_id=f"p{i:03d}",
                ok=True,
                logprobs=[float(v) for v in row],
                top1=[True] * len(row),
            )
        )
    errors = {error[1]: 1} if error else {}
    return QualityPass(
        name=name,
        concurrency=4,
        loaded=name == "loaded",
        wall_s=1.5,
        readings=readings,
        forced=[ForcedSet(on=forced_on, method="prompt_logprobs", readings=forced, wall_s=0.5)],
        errors=errors,
    )
