"""quality.json documents made by the probe's own `evaluate_quality` from synthetic passes,
for the diagnose and report tests: drift planted as one bf16 rounding of every forced
logprob (what a change of dtype does), broken outputs as one planted quality error."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from servelab.bench.quality.evaluate import evaluate_quality, reference_label
from servelab.bench.quality.probes import make_probes
from servelab.bench.quality.results import QualityPass, QualityResult
from tests.quality.helpers import N_PROBES, N_TOKENS, make_pass, reference_logprobs

REFERENCE_RUN = "ref-run"
SEED = 39
BF16_UNIT_ROUNDOFF = 2.0**-9
DIVERGING = frozenset(range(10))
"""Probes whose greedy answer leaves the reference's at token DIVERGE_AT when `diverge`."""
DIVERGE_AT = 3


def bf16_moved(logprobs: np.ndarray, seed: int) -> np.ndarray:
    """Each logprob moved by one bf16 rounding of itself, up or down."""
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=logprobs.shape)
    return logprobs * (1 + BF16_UNIT_ROUNDOFF * signs)


def diverging_ids(probe: int) -> list[int]:
    ids = [100 + k for k in range(N_TOKENS)]
    if probe in DIVERGING:
        ids[DIVERGE_AT:] = [900 + k for k in range(N_TOKENS - DIVERGE_AT)]
    return ids


def quality_result(
    *,
    moved: Iterable[str] = (),
    error: tuple[str, str] | None = None,
    reference: bool = False,
    logprobs: bool = True,
    diverge: bool = False,
) -> QualityResult:
    """This run's quality.json. `moved` names the comparisons whose candidate moves
    (determinism, batch_invariance, configuration); `error` is (pass, kind) planted on one
    probe; `reference` adds a reference run (REFERENCE_RUN) and its comparison;
    `logprobs=False` leaves greedy divergence as the primary metric; `diverge` makes ten
    probes' greedy answers part from the reference at token 3 in the moved passes."""
    lp = reference_logprobs()
    moved = set(moved)
    own = "before" if logprobs else "none"
    label = reference_label(REFERENCE_RUN)

    def build(name: str, values: np.ndarray, *, on: str = own, ids: bool = False) -> QualityPass:
        planted = (7, error[1]) if error is not None and error[0] == name else None
        chosen: Callable[[int], list[int]] | None = diverging_ids if ids else None
        return make_pass(name, values, forced_on=on, ids=chosen, error=planted)

    before = build("before", lp, ids=diverge and "configuration" in moved)
    if reference:
        theirs = bf16_moved(lp, 11) if "configuration" in moved else lp
        scored = build("before", theirs, on=label if logprobs else "none")
        before.forced.append(scored.forced[0])
    after_ids = diverge and ("determinism" in moved or "configuration" in moved)
    after = build("after", bf16_moved(lp, 12) if "determinism" in moved else lp, ids=after_ids)
    loaded_ids = diverge and ("batch_invariance" in moved or "configuration" in moved)
    loaded = build(
        "loaded", bf16_moved(lp, 13) if "batch_invariance" in moved else lp, ids=loaded_ids
    )
    probes = make_probes(N_PROBES, seed=SEED)
    ref_result = (
        evaluate_quality(
            probes=probes,
            seed=SEED,
            engine="vllm",
            passes=[make_pass("before", lp), make_pass("after", lp)],
            logprobs_available=True,
            forced_method="prompt_logprobs",
        )
        if reference
        else None
    )
    return evaluate_quality(
        probes=probes,
        seed=SEED,
        engine="vllm",
        passes=[before, loaded, after],
        logprobs_available=logprobs,
        logprobs_reason=None if logprobs else "HTTP 400: logprobs are not supported",
        forced_method="prompt_logprobs" if logprobs else None,
        reference=ref_result,
        reference_run=REFERENCE_RUN if reference else None,
    )
