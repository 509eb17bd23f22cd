"""One step cost fitted on the gaps of several runs of one engine.

Runs of a study that differ only in the limits the twin replays (running cap, step budget,
KV cache) ran the same engine, model and kernels: their steps are samples of one cost.
Each run alone sees the steps its limits allowed (chunks of its own budget, batches up to
its own cap); pooled, the fit sees every step any of them had, so a prediction for one
reaches past fewer of them. Each run's gaps keep the placement its own fit settled on;
the bootstrap draws whole requests of every run, so the interval is the pooled fit's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from servelab.twin.fit import fit_cost
from servelab.twin.model import Twin
from servelab.twin.steps import StepSamples

__all__ = ["pooled_samples", "refit_jointly"]


def pooled_samples(parts: Sequence[StepSamples]) -> StepSamples:
    """The gaps of several runs as one set: each run's requests numbered apart from the
    others', so the bootstrap keeps every request's gaps together."""
    offset, requests = 0, []
    for part in parts:
        requests.append(part.request + offset)
        offset += int(part.request.max()) + 1 if part.size else 0
    return StepSamples(
        gap_s=np.concatenate([p.gap_s for p in parts]),
        regressors=np.concatenate([p.regressors for p in parts]),
        weight=np.concatenate([p.weight for p in parts]),
        request=np.concatenate(requests),
    )


def refit_jointly(
    target: Twin, others: Sequence[Twin], *, resamples: int = 48, seed: int = 0
) -> Twin:
    """`target` with its cost refitted on its own gaps and those of `others` (runs of the
    same engine under other limits); `target` as it was where fewer than two of them were
    fitted to gaps (a run whose answers came whole has none to pool)."""
    fitted = [t for t in (target, *others) if t.samples is not None and t.samples.size]
    if target.samples is None or len(fitted) < 2:
        return target
    samples = pooled_samples([t.samples for t in fitted if t.samples is not None])
    cost = fit_cost(samples, resamples=resamples, seed=seed)
    seen = _seen(fitted)
    note = (
        f"refitted on the gaps of {len(fitted)} runs of this engine under other limits "
        f"({samples.size:,} gaps of {cost.requests:,} requests): steps of up to "
        f"{seen[0]:,} prompt tokens, {seen[1]} decoding requests and {seen[2]:,} KV tokens "
        "held were seen"
    )
    fit = target.result.fit.model_copy(
        update={
            "samples": cost.samples,
            "requests": cost.requests,
            "residual_ms": cost.residual_ms,
            "notes": [*target.result.fit.notes, note],
        }
    )
    result = target.result.model_copy(update={"fit": fit})
    return replace(target, result=result, cost=cost, samples=samples, seen=seen, _memo={})


def _seen(twins: Sequence[Twin]) -> tuple[int, int, int]:
    """The most prompt tokens, requests decoding and KV tokens held in one step, replayed
    over each run at its own limits."""
    prefill, decoding, held = 0, 0, 0
    for twin in twins:
        for level in twin.replay(with_draws=False).values():
            prefill = max(prefill, level.most_prefill)
            decoding = max(decoding, level.most_decoding)
            held = max(held, level.most_held)
    return prefill, decoding, held
