"""The KV an engine reads per step, padded to its cache's size: why a larger cache can make
every step slower, which one run with one cache cannot show.

transformers serve 5.24 (`generation/continuous_batching`) with CUDA graphs pads each
step's inputs so that captured graphs can be replayed (`ContinuousBatchProcessor.
prepare_next_batch` -> `maybe_pad_inputs`): the KV positions read become
`pad_to_interval(held, kv_padding_interval_size, max_tokens_read)`, that is
min(ceil(held / 16,384) x 16,384, the pool), with 16,384 the interval's fallback
(`initialization.py` `FALLBACK_DEFAULTS`) and the pool `cache.max_tokens_read`. Without a
flash attention the step then gathers those positions from the cache (`index_select`),
repeats them to every query head (`repeat_kv`) and runs SDPA with a mask over them, for
every layer. A cache under 16,384 tokens is read whole every step; a larger one, in
16,384-token steps. So on one H100 the single-stream step of h200-ref took 7.5 ms with a
cache of about 1,000 tokens and about 16 ms with any cache past 16,384.

Within one run the pool is fixed, so its cost is in the fitted base and cannot be told
apart from it. Where a change moves the pool, the step's cost moves by what the extra
positions cost, which the run does not show; two readings bound it:

- the least: the model's memory traffic per padded position (the gather's read and
  write, the repeat's read and write, SDPA's read of the repeated K and V and the mask
  row) at the GPU's bandwidth, added per position;
- the most: the whole fitted step in proportion to the positions read (every cost of the
  step is attention over padded positions: no part of it stays the same).

The same holds where a change lets steps hold more tokens than any step of the run (a
larger step budget admits more prompts at once): they read positions in 16,384-token
steps the run never read, and every query of the step, a prefill chunk's included,
attends to all of them under the mask. The fit prices a held token on a line through the
run's steps; past the run's largest, the readings are that line, and the step at the
run's largest in proportion to the positions read (`PastPositions`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servelab.model.configs import ModelConfig
from servelab.sim.stepcost import StepCost, WrappedStepCost

__all__ = [
    "KV_PADDING_INTERVAL",
    "QUERY_PADDING_INTERVAL",
    "KvPadding",
    "PastPositions",
    "padded_position_bytes",
]

KV_PADDING_INTERVAL = 64 * 256
"""transformers' `kv_padding_interval_size` fallback: 64 blocks of 256 tokens."""
QUERY_PADDING_INTERVAL = 64
"""transformers' `q_padding_interval_size` fallback: query tokens are padded to 64."""
_BF16 = 2


def padded_position_bytes(config: ModelConfig, *, activation_bytes: int = _BF16) -> float:
    """Bytes one padded KV position costs a step in memory traffic, over every layer: the
    gather reads K and V of the KV heads and writes them, the repeat reads them and writes
    them for every query head, SDPA reads those and one mask row of the padded queries."""
    kv = 2 * config.kv_heads * config.head_dim * activation_bytes
    repeated = 2 * config.heads * config.head_dim * activation_bytes
    mask = QUERY_PADDING_INTERVAL * activation_bytes
    return config.layers * (2 * kv + kv + repeated + repeated + mask)


@dataclass(frozen=True, slots=True)
class KvPadding:
    """An engine that reads min(ceil(held / interval) x interval, pool) KV positions a step,
    and what a padded position costs at the least (ms, from the model's traffic)."""

    pool: int
    """The cache the run had, in tokens: the positions its steps read."""
    least_ms_per_position: float
    interval: int = KV_PADDING_INTERVAL

    def positions(self, held: int, pool: int | None) -> int:
        """KV positions a step reads holding `held` tokens, with a cache of `pool` tokens
        (None: no limit)."""
        padded = max(1, math.ceil(held / self.interval)) * self.interval
        return padded if pool is None else min(padded, pool)

    def reading(self, *, most: bool) -> PaddedReading:
        return PaddedReading(self, most)


@dataclass(frozen=True, slots=True)
class PaddedReading:
    """A shape for a step cost: the fitted cost where the pool is the run's own, and where
    it is not, that cost moved by the positions the other pool makes every step read."""

    padding: KvPadding
    most: bool

    def __call__(self, inner: StepCost) -> StepCost:
        return PaddedStep(inner, self.padding, self.most)


@dataclass(frozen=True, slots=True)
class PaddedStep(WrappedStepCost):
    padding: KvPadding
    most: bool

    def step_s(self, decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        fitted = self.inner.step_s(decode_batch, decode_context_tokens, prefill_tokens)
        pool = self.inner.kv_capacity_tokens
        if pool == self.padding.pool:
            return fitted
        held = decode_context_tokens + prefill_tokens
        before = self.padding.positions(held, self.padding.pool) + QUERY_PADDING_INTERVAL
        after = self.padding.positions(held, pool) + QUERY_PADDING_INTERVAL
        if self.most:
            return fitted * after / before
        return max(fitted + (after - before) * self.padding.least_ms_per_position / 1e3, 0.0)


@dataclass(frozen=True, slots=True)
class PastPositions(WrappedStepCost):
    """The fitted cost up to `held` KV tokens a step (the most a step of the run held);
    past it, the step at `held` in proportion to the positions read, in the run's pool
    (`PaddedStep`, outside this one, moves the pool)."""

    padding: KvPadding
    held: int

    def step_s(self, decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        fitted = self.inner.step_s(decode_batch, decode_context_tokens, prefill_tokens)
        held = decode_context_tokens + prefill_tokens
        if held <= self.held:
            return fitted
        edge = max(self.held, prefill_tokens)
        at_edge = self.inner.step_s(decode_batch, edge - prefill_tokens, prefill_tokens)
        pool = self.padding.pool
        after = self.padding.positions(held, pool) + QUERY_PADDING_INTERVAL
        before = self.padding.positions(edge, pool) + QUERY_PADDING_INTERVAL
        return max(fitted, at_edge * after / before)
