"""Planted corruption: answers that arrive on time but are wrong, for quality probes.

Faults (`servelab.sim.faults`) break the transport; corruption breaks the content while
the timing, the chunk count and the HTTP exchange stay as they would be. One kind is
planted per simulator (`SimConfig.corruption`) and hits a seeded share of generation
requests (`corruption_rate`, 1 by default: every one). Its own `random.Random`, seeded
apart from the faults', draws one number per accepted generation request in arrival
order, so planting corruption moves no fault. A simulator with corruption planted
answers every request on the quality path (the greedy text of
`servelab.sim.tokenmodel`), so clean and corrupted answers differ only by the corruption.
"""

from __future__ import annotations

import random
from enum import StrEnum

__all__ = ["AFTER_TOKENS_KINDS", "Corruption", "CorruptionPicker"]


class Corruption(StrEnum):
    """The corruptions the simulator plants; each says what a client sees."""

    NONE = "none"
    NAN_LOGPROBS = "nan-logprobs"
    """Logprobs are NaN from output token `corrupt_after_tokens` on (the token and all its
    top logprobs). Written as vLLM writes them: `null` in streamed chunks (pydantic's
    model_dump_json, as orjson here); a non-streamed answer with NaN logprobs is vLLM's
    HTTP 500 `Internal Server Error` (starlette's JSONResponse refuses NaN). The text is
    unchanged; a request that asks for no logprobs sees nothing."""
    WRONG_TOKEN = "wrong-token"
    """Output token `corrupt_after_tokens` is the runner-up instead of the argmax, and the
    rest the greedy continuation of that changed context: the answer departs from the
    reference there. Its logprobs stay those of the model, so teacher forcing still
    reproduces them."""
    REASONING_ONLY = "reasoning-only"
    """Chat: the whole answer goes out as reasoning_content and content is empty (null
    in a non-streamed message), as when a reasoning parser never sees the end of the
    thinking. Completions are unaffected."""
    NO_FINISH_REASON = "no-finish-reason"
    """The last chunk (or the non-streamed choice) has finish_reason null; the stream
    still ends with its usage and [DONE]."""
    USAGE_OVERCOUNT = "usage-overcount"
    """usage.completion_tokens (and total_tokens) count twice the tokens sent."""


AFTER_TOKENS_KINDS = frozenset((Corruption.NAN_LOGPROBS, Corruption.WRONG_TOKEN))
"""The kinds that strike at an output token, the one `corrupt_after_tokens` names."""


class CorruptionPicker:
    """Decides, request by request, whether the planted corruption hits it."""

    def __init__(self, kind: Corruption, *, rate: float, seed: int, worker: int = 0) -> None:
        self._kind = kind
        self._rate = rate
        self._rng = random.Random(f"corruption-{seed}-{worker}")

    @property
    def planted(self) -> bool:
        """Whether any corruption is planted (then every request takes the quality path)."""
        return self._kind is not Corruption.NONE

    def pick(self) -> Corruption:
        """The next accepted generation request's corruption (NONE: a clean answer)."""
        if self._kind is Corruption.NONE:
            return Corruption.NONE
        return self._kind if self._rng.random() < self._rate else Corruption.NONE
