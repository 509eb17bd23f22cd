"""What each observed step held, read back from the requests' own streams.

A gap between two chunks of one stream is the length of the engine step (or steps) that
made the later chunk's tokens; a sample is a window of a few such gaps, whose length per
token is the mean step of the window. Every request of the run is the client's, so what a step
held is read from the same records:

- decoding requests: those between their first and last chunk at the gap's middle (a
  request decodes from the step after its first token to the step of its last);
- their context: each one's prompt plus the tokens it had received by then;
- prompt tokens prefilled: the chunks of prefill whose step ended with the gap, that is
  within half the gap of its end (a step's tokens reach the client one after another,
  so a new request's first token may trail the decoders' by a little). Where each prompt's
  chunks ran is not visible to a client: `PrefillPlacement` says it, first from the
  step budget (the last chunk in the step that ended with the first token, the others
  one step apart before it), then from the replay (`servelab.twin.build`).

Every sum is a sorted prefix sum and a binary search, so a run of a million gaps costs
well under a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servelab.twin.records import RequestTimeline

__all__ = ["PrefillPlacement", "StepSamples", "budget_placement", "step_samples"]

TERMS = ("base", "per_seq", "per_context_token", "per_prefill_token", "prefill_step")
"""The step cost's terms, in the order of the regressors' columns."""

MAX_GAPS_PER_REQUEST = 256
"""Windows kept from one stream, evenly spaced: a long output adds samples of the same
steps its neighbours already give, and only the fit's time grows with them."""
WINDOW_CHUNKS = 2
"""Gaps per sample. A server that falls behind sends two steps' tokens at once (a gap of
about nothing, then one of two steps): a window's length per token is right where each
gap alone is wrong. What the window's steps held is summed gap by gap, so on a stream
with no bursts the window changes nothing."""


@dataclass(frozen=True, slots=True)
class PrefillPlacement:
    """Where each request's prompt was prefilled: (seconds before its first token, tokens)
    per chunk, by the request's position in the timeline list."""

    chunks: tuple[tuple[tuple[float, int], ...], ...]


@dataclass(frozen=True, slots=True)
class StepSamples:
    """One row per observed gap: its length per token, what the step held, and whose."""

    gap_s: np.ndarray
    regressors: np.ndarray
    """Columns in TERMS order: 1, decoding requests, their context tokens, prompt tokens
    prefilled, 1 when anything was prefilled."""
    weight: np.ndarray
    """1 / decoding requests: every decoder of a step sees the same gap, so each step
    counts about once."""
    request: np.ndarray
    """The gap's request, by position in the timelines (the bootstrap resamples these)."""

    @property
    def size(self) -> int:
        return int(self.gap_s.size)

    def median_gap_s(self) -> float:
        return float(np.median(self.gap_s)) if self.size else 0.0


def budget_placement(
    requests: Sequence[RequestTimeline],
    prompt_work: Sequence[int],
    *,
    budget: int | None,
    step_s: float,
) -> PrefillPlacement:
    """Each prompt in chunks of the step budget: the last ending with the first token, the
    others one step (`step_s`) apart before it. No budget: the whole prompt in one step."""
    chunks = []
    for work in prompt_work:
        size = budget if budget and budget > 0 else max(work, 1)
        count = max(-(-work // size), 1)
        last = work - size * (count - 1)
        chunks.append(((0.0, last), *((i * step_s, size) for i in range(1, count))))
    return PrefillPlacement(tuple(chunks))


def step_samples(requests: Sequence[RequestTimeline], placement: PrefillPlacement) -> StepSamples:
    """The gaps of every stream with what their steps held."""
    first = np.array([r.first_s for r in requests])
    last = np.array([r.last_s for r in requests])
    prompts = np.array([r.prompt_tokens for r in requests], dtype=float)
    order_first, order_last = np.sort(first), np.argsort(last)
    last_sorted = last[order_last]
    prompt_by_first = np.concatenate([[0.0], np.cumsum(prompts[np.argsort(first)])])
    prompt_by_last = np.concatenate([[0.0], np.cumsum(prompts[order_last])])
    output = np.array([r.chunk_tokens.sum() for r in requests], dtype=float)
    output_by_last = np.concatenate([[0.0], np.cumsum(output[order_last])])
    token_times = np.concatenate([r.chunk_s for r in requests])
    token_counts = np.concatenate([r.chunk_tokens for r in requests]).astype(float)
    token_order = np.argsort(token_times)
    token_times = token_times[token_order]
    token_cum = np.concatenate([[0.0], np.cumsum(token_counts[token_order])])
    prefill_times, prefill_cum = _prefill_events(requests, placement)

    starts, ends, counts, owners, windows = _gaps(requests)
    mid = (starts + ends) / 2
    started = np.searchsorted(order_first, mid, side="left")
    ended = np.searchsorted(last_sorted, mid, side="right")
    decoding = (started - ended).astype(float)
    context = (
        prompt_by_first[started]
        - prompt_by_last[ended]
        + token_cum[np.searchsorted(token_times, mid, side="left")]
        - output_by_last[ended]
    )
    shift = (ends - starts) / np.maximum(counts, 1.0) / 2
    lower = np.searchsorted(prefill_times, starts + shift, side="right")
    upper = np.searchsorted(prefill_times, ends + shift, side="right")
    held = np.column_stack(
        [
            counts,
            decoding * counts,
            context * counts,
            prefill_cum[upper] - prefill_cum[lower],
            np.minimum(upper - lower, counts),
        ]
    )
    if not windows.size:
        empty = np.empty(0)
        return StepSamples(empty, np.empty((0, len(TERMS))), empty, np.empty(0, dtype=int))
    first_of = np.flatnonzero(np.r_[True, windows[1:] != windows[:-1]])
    tokens = np.add.reduceat(counts, first_of)
    length = np.add.reduceat(ends - starts, first_of)
    regressors = np.add.reduceat(held, first_of, axis=0) / np.maximum(tokens, 1.0)[:, None]
    owner = owners[first_of]
    keep = (tokens > 0) & (regressors[:, 1] >= 1) & _evenly(owner)
    return StepSamples(
        gap_s=length[keep] / tokens[keep],
        regressors=regressors[keep],
        weight=1.0 / regressors[keep, 1],
        request=owner[keep],
    )


def _evenly(owner: np.ndarray) -> np.ndarray:
    """At most MAX_GAPS_PER_REQUEST windows of each request, evenly spaced."""
    keep = np.ones(owner.size, dtype=bool)
    _, first, count = np.unique(owner, return_index=True, return_counts=True)
    for start, n in zip(first, count, strict=True):
        if n > MAX_GAPS_PER_REQUEST:
            pick = np.linspace(0, n - 1, MAX_GAPS_PER_REQUEST).astype(int)
            keep[start : start + n] = False
            keep[start + pick] = True
    return keep


def _gaps(
    requests: Sequence[RequestTimeline],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, tokens, request, window) of every gap before a chunk carrying tokens,
    in order within each request; a chunk of none carries its gap into the next one, and
    each run of WINDOW_CHUNKS gaps of a request shares a window number."""
    starts, ends, counts, owners, windows = [], [], [], [], []
    window = 0
    for position, request in enumerate(requests):
        times, tokens = request.chunk_s, request.chunk_tokens
        chunk_ends = np.flatnonzero(tokens[1:] > 0) + 1
        if chunk_ends.size == 0:
            continue
        previous = np.concatenate([[0], chunk_ends[:-1]])
        starts.append(times[previous])
        ends.append(times[chunk_ends])
        counts.append(tokens[chunk_ends].astype(float))
        owners.append(np.full(chunk_ends.size, position))
        windows.append(window + np.arange(chunk_ends.size) // WINDOW_CHUNKS)
        window += -(-chunk_ends.size // WINDOW_CHUNKS)
    if not starts:
        empty = np.empty(0)
        none = np.empty(0, dtype=int)
        return empty, empty, empty, none, none
    return (
        np.concatenate(starts),
        np.concatenate(ends),
        np.concatenate(counts),
        np.concatenate(owners),
        np.concatenate(windows),
    )


def _prefill_events(
    requests: Sequence[RequestTimeline], placement: PrefillPlacement
) -> tuple[np.ndarray, np.ndarray]:
    """Every prefill chunk as (the end of its step, tokens), sorted, with a prefix sum."""
    times, tokens = [], []
    for request, chunks in zip(requests, placement.chunks, strict=True):
        for before_s, count in chunks:
            times.append(request.first_s - before_s)
            tokens.append(count)
    order = np.argsort(times)
    return (
        np.asarray(times, dtype=float)[order],
        np.concatenate([[0.0], np.cumsum(np.asarray(tokens, dtype=float)[order])]),
    )
