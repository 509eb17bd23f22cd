"""The engine's step cost fitted to the gaps its streams showed, with its uncertainty.

A step's length is taken as linear in what it holds (`servelab.twin.steps.TERMS`): a base
every step pays, a cost per decoding request, per token of their context, per prompt
token prefilled, and a fixed cost of a step that prefills at all (a real engine launches
other kernels, or another graph, for it). The fit is weighted least squares with Huber's
weights, so a stall or a scheduler hiccup in one gap does not pull every term; a term
whose fitted cost is negative has no support in the run and is held at zero.

The uncertainty is a bootstrap over requests: the fit is repeated on requests drawn with
replacement, and each term's spread over the draws is its standard error and its
interval. Terms the run cannot tell apart (every step held the same context per
request, say) come out with wide intervals, which is the honest answer; the replays
carry those draws through to an interval on every replayed metric.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servelab.core.units import MS_PER_S
from servelab.sim.stepcost import LinearStepCost
from servelab.twin.steps import TERMS, StepSamples

__all__ = [
    "HUBER_K",
    "INTERVAL",
    "FittedCost",
    "TermFit",
    "bootstrap",
    "fit_cost",
    "fit_cost_constant",
    "nonnegative_fit",
    "robust_fit",
    "settled",
]

HUBER_K = 1.345
"""Huber's tuning constant: 95% efficiency when the residuals are normal."""
_IRLS_ROUNDS = 8
_SETTLED = 1e-4
"""A round that moves no fitted step by this share of the gaps' robust spread ends the
rounds: a numerical tolerance, far below any term's standard error."""
_MAD_TO_SIGMA = 1.4826
INTERVAL = (5.0, 95.0)
"""Percentiles of the bootstrap draws that bound a term's interval (a 90% interval)."""


@dataclass(frozen=True, slots=True)
class TermFit:
    """One term of the step cost, in ms (per unit of its regressor)."""

    name: str
    value: float
    stderr: float
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class FittedCost:
    """The fitted step cost, its terms with their uncertainty, and the bootstrap draws."""

    terms: tuple[TermFit, ...]
    draws: np.ndarray
    """One row of term values (ms) per bootstrap draw, in TERMS order."""
    samples: int
    requests: int
    residual_ms: float
    """The robust spread (MAD as a standard deviation) of a gap about its fitted step."""

    def value(self, name: str) -> float:
        return next(t.value for t in self.terms if t.name == name)

    def step_cost(
        self, draw: int | None = None, *, kv_capacity_tokens: int | None = None
    ) -> LinearStepCost:
        """The fit as the simulator's step cost; `draw` picks a bootstrap draw."""
        values = [t.value for t in self.terms] if draw is None else list(self.draws[draw])
        base, per_seq, per_context, per_prefill, prefill_step = values
        return LinearStepCost(
            base_ms=base,
            per_seq_ms=per_seq,
            per_context_token_ms=per_context,
            per_prefill_token_ms=per_prefill,
            prefill_step_ms=prefill_step,
            kv_capacity_tokens=kv_capacity_tokens,
        )

    @classmethod
    def from_draws(
        cls,
        point_s: np.ndarray,
        draws_s: np.ndarray,
        *,
        samples: int,
        requests: int,
        residual_ms: float,
    ) -> FittedCost:
        """The terms at `point_s` (seconds, TERMS order) with the spread of `draws_s` (one
        row a draw): standard error, and the INTERVAL percentiles as their interval."""
        draws_ms = draws_s * MS_PER_S
        low, high = np.percentile(draws_ms, INTERVAL, axis=0)
        stderr = draws_ms.std(axis=0, ddof=1) if draws_ms.shape[0] > 1 else np.zeros(len(TERMS))
        return cls(
            terms=tuple(
                TermFit(name, float(v), float(e), float(lo), float(hi))
                for name, v, e, lo, hi in zip(
                    TERMS, point_s * MS_PER_S, stderr, low, high, strict=True
                )
            ),
            draws=draws_ms,
            samples=samples,
            requests=requests,
            residual_ms=residual_ms,
        )


def settled(new: FittedCost, old: FittedCost, yardstick: FittedCost) -> bool:
    """Whether no term moved from `old` to `new` by more than its standard error in
    `yardstick` (the rounds of fitting and replaying stop there)."""
    return not any(
        abs(a.value - b.value) > max(s.stderr, 1e-9)
        for a, b, s in zip(new.terms, old.terms, yardstick.terms, strict=True)
    )


def bootstrap(
    x: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray,
    owner: np.ndarray,
    *,
    resamples: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The robust fit, and its refits on owners drawn with replacement (every row of a
    drawn owner comes along); with no resamples the one draw is the fit itself."""
    point = robust_fit(x, y, weight)
    owners = np.unique(owner)
    by_owner = _rows_by_owner(owner)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        picked = rng.choice(owners, size=owners.size, replace=True)
        rows = np.concatenate([by_owner[o] for o in picked])
        draws.append(robust_fit(x[rows], y[rows], weight[rows]))
    return point, np.array(draws) if draws else point[None, :]


def fit_cost(samples: StepSamples, *, resamples: int = 64, seed: int = 0) -> FittedCost:
    """Fit the terms to the gaps, and bootstrap them over the gaps' requests."""
    if samples.size == 0:
        raise ValueError("no gaps between chunks to fit a step cost to")
    point, draws = bootstrap(
        samples.regressors,
        samples.gap_s,
        samples.weight,
        samples.request,
        resamples=resamples,
        seed=seed,
    )
    residual = samples.gap_s - samples.regressors @ point
    return FittedCost.from_draws(
        point,
        draws,
        samples=samples.size,
        requests=int(np.unique(samples.request).size),
        residual_ms=_mad_sigma(residual) * MS_PER_S,
    )


def fit_cost_constant(step_s: float) -> FittedCost:
    """A starting cost: every step `step_s` long, whatever it holds."""
    values = np.zeros(len(TERMS))
    values[0] = step_s
    return FittedCost.from_draws(values, values[None, :], samples=0, requests=0, residual_ms=0.0)


def _rows_by_owner(owner: np.ndarray) -> dict[int, np.ndarray]:
    order = np.argsort(owner, kind="stable")
    values, starts = np.unique(owner[order], return_index=True)
    bounds = [*starts[1:], owner.size]
    return {int(v): order[s:e] for v, s, e in zip(values, starts, bounds, strict=True)}


def robust_fit(x: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Huber-weighted least squares, terms held at zero where their cost comes out below
    it (the base is a term like the others: a step never takes negative time). The rounds
    stop once no fitted step moves by `_SETTLED` of the gaps' spread: past that a round
    changes no prediction."""
    active = [j for j in range(x.shape[1]) if np.any(x[:, j] != x[0, j]) or j == 0]
    coef = np.zeros(x.shape[1])
    robust = np.ones_like(y)
    fitted: np.ndarray | None = None
    for _ in range(_IRLS_ROUNDS):
        coef = nonnegative_fit(x, y, weight * robust, active)
        now = x @ coef
        residual = y - now
        scale = _mad_sigma(residual)
        if scale <= 0:
            break
        if fitted is not None and np.max(np.abs(now - fitted)) <= _SETTLED * scale:
            break
        fitted = now
        z = np.abs(residual) / (HUBER_K * scale)
        robust = np.where(z <= 1.0, 1.0, 1.0 / np.maximum(z, 1e-12))
    return coef


def nonnegative_fit(x: np.ndarray, y: np.ndarray, w: np.ndarray, active: list[int]) -> np.ndarray:
    """Weighted least squares over the active columns, dropping the most negative term
    until none is negative.

    Each drop solves the same normal equations less a column, so they are formed once:
    the columns scaled to unit weighted norm (the terms' units differ by orders of
    magnitude), and solved by least squares, which leaves a direction the rows cannot
    tell apart at zero as the full solve did."""
    active = list(active)
    root = np.sqrt(w)
    rows = x * root[:, None]
    norm = np.linalg.norm(rows, axis=0)
    norm[norm == 0] = 1.0
    rows /= norm
    gram = rows.T @ rows
    moment = rows.T @ (y * root)
    while True:
        coef = np.zeros(x.shape[1])
        if not active:
            return coef
        picked = np.ix_(active, active)
        solved, *_ = np.linalg.lstsq(gram[picked], moment[active], rcond=None)
        coef[active] = solved / norm[active]
        worst = min(active, key=lambda j: coef[j])
        if coef[worst] >= 0:
            return coef
        active.remove(worst)


def _mad_sigma(values: np.ndarray) -> float:
    if values.size == 0:
        return 0.0
    return float(_MAD_TO_SIGMA * np.median(np.abs(values - np.median(values))))
