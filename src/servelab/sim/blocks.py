"""A request's tokens as a chain of full-block keys: what the prefix cache matches on.

Block i's key hashes its `block_size` tokens together with block i-1's key, so two
sequences share block i's key only when their first (i + 1) x block_size tokens are
equal: only shared prefixes match, as in vLLM's and SGLang's caches. The tokens are the
simulator's units (`servelab.sim.parsing`: the prompt's words, or the ids a client sent)
followed by one unit per output token, so a later turn that repeats an answer matches it
too. Keys are computed only as far as they are asked for: a prompt that misses at its
first block costs one hash. They are Python's 64-bit hashes, salted per process (each
simulator process has its own cache): two different prefixes share a key about once in
2^64 pairs (vLLM hashes with SHA-256 by default to rule that out across tenants).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servelab.sim.prefix_cache import CachedBlock

__all__ = ["RequestBlocks"]

_ROOT_KEY = 0
"""The key before a sequence's first block."""


class RequestBlocks:
    """One request's block keys, and what it holds in the prefix cache.

    `pinned` are the cached blocks the request uses (its hit, then those it computed and
    cached), in sequence order; `settled` counts its leading blocks already matched or
    offered to the cache.
    """

    __slots__ = ("_keys", "_output", "_units", "block_size", "pinned", "settled")

    def __init__(
        self, units: Sequence[Hashable], output_unit: Hashable, *, block_size: int
    ) -> None:
        if block_size < 1:
            raise ValueError("block_size must be at least 1")
        self.block_size = block_size
        self._units = units
        self._output = output_unit
        self._keys: list[int] = []
        self.pinned: list[CachedBlock] = []
        self.settled = 0

    def key(self, index: int) -> int:
        """The key of block `index` (0-based); blocks past the prompt hold output tokens."""
        keys = self._keys
        if index >= len(keys):
            self._extend(index + 1)
        return keys[index]

    def keys(self, start: int, stop: int) -> list[int]:
        """The keys of blocks `start` to `stop - 1`."""
        if stop > len(self._keys):
            self._extend(stop)
        return self._keys[start:stop]

    def _extend(self, count: int) -> None:
        """Compute the keys of the first `count` blocks."""
        keys, size, units, output = self._keys, self.block_size, self._units, self._output
        key = keys[-1] if keys else _ROOT_KEY
        for start in range(len(keys) * size, count * size, size):
            tokens = units[start : start + size]
            if len(tokens) < size:
                tokens = [*tokens, *[output] * (size - len(tokens))]
            key = hash((key, *tokens))
            keys.append(key)
