"""The `not_greedy` check: at temperature 0 an engine must emit its own most likely token.

Teacher forcing scores the reference's tokens through the prompt (prefill), so a fault
confined to decoding, a sampler that picks another token, leaves every forced logprob as
it was. The free-running answer shows it by itself: each emitted token comes with its own
logprob and the position's top logprobs, and a greedy token is the best of them. A token
below its position's best by more than GREEDY_TOLERANCE_NATS was not the engine's argmax.

The check needs the best of the position among the top logprobs whatever the token
emitted: vLLM lists the sampled token and then the top k, the simulator the sampled token
first and then the top k without it, and vLLM's chat `top_logprobs` keeps the first k of
that list (only the sampled token itself when k is 1). Asking for TOP_LOGPROBS = 2 puts
the position's best in every one of those lists.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["GREEDY_TOLERANCE_NATS", "TOP_LOGPROBS", "NotGreedy", "not_greedy"]

TOP_LOGPROBS = 2
"""Top logprobs asked per generated token (`logprobs: 2` on completions, `top_logprobs: 2`
on chat): with the sampled token listed first, 2 is the fewest that still holds the
position's best when the sampled token is not it."""

GREEDY_TOLERANCE_NATS = 2.0**-16
"""≈ 1.5e-5 nats: how far an emitted token's logprob may sit under its position's best
top logprob before it is `not_greedy`. Engines take the greedy token as the argmax of the
logits and report logprobs as a float32 log-softmax of the same logits, x_i - logsumexp(x);
subtracting one constant is monotone under rounding, so from one tensor an argmax's logprob
ties or beats every other exactly (an exact tie is never an error). Where the two come
from different computations (another kernel, another summation order of the logsumexp),
each reported value carries a few float32 roundings of a number under 2^4 in magnitude
(|logprob| <= ln(vocabulary), under 16 nats below 2^23 tokens), half an ulp there being
2^-21: four roundings on each of the two values sum to 2^-18. The tolerance is four times
that. Wrong tokens sit a logit gap below the best (tenths of a nat for a runner-up), and a
gap under 2^-16 is a near-tie that any rounding could flip. An engine that reported bf16
logprobs (half an ulp 2^-5 at 16 nats) would exceed it on honest tokens; those we speak
compute them in float32."""


@dataclass(frozen=True, slots=True)
class NotGreedy:
    """The emitted tokens that were not their position's best."""

    tokens: int
    """How many."""
    first: int
    """Index of the first."""
    first_gap_nats: float
    """How far the first sits under its position's best, in nats."""


def not_greedy(
    logprobs: Sequence[float],
    tops: Sequence[Sequence[float] | None],
    *,
    tolerance: float = GREEDY_TOLERANCE_NATS,
) -> NotGreedy | None:
    """Emitted tokens whose `logprobs[i]` is below max(`tops[i]`) by more than `tolerance`;
    None where there is none. Positions without top logprobs (None or empty) and
    non-finite values are skipped: nan_logprob judges those."""
    gaps: list[tuple[int, float]] = []
    for i, (chosen, top) in enumerate(zip(logprobs, tops, strict=False)):
        finite = [v for v in top or () if math.isfinite(v)]
        if finite and math.isfinite(chosen) and max(finite) - chosen > tolerance:
            gaps.append((i, max(finite) - chosen))
    if not gaps:
        return None
    return NotGreedy(tokens=len(gaps), first=gaps[0][0], first_gap_nats=gaps[0][1])
