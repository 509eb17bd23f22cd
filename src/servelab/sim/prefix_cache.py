"""The prefix cache: full KV blocks by key, shared by the requests whose prompts begin alike.

Modelled on vLLM v1's block pool (vllm/v1/core/block_pool.py, kv_cache_manager.py):

- A new request reuses its longest run of leading blocks found in the cache, but never
  its last prompt token: that token is always computed, since its logits give the first
  output token (vLLM's `max_cache_hit_length = num_tokens - 1`). So a prompt of N tokens
  can hit at most (N - 1) // block_size blocks.
- A block is cached when the step that fills it is planned, as vLLM caches the blocks
  a step will fill when it schedules the step, so a request admitted later in the same
  step already hits them; output tokens fill blocks too, but the last one sampled is
  never computed. (Fixed timing caches a prompt's blocks when its request starts, its
  output's when it ends.)
- A block is pinned while any running request uses it. When the last one ends it becomes
  free but stays cached; free blocks are evicted least recently freed first, and a
  request frees its blocks from its last to its first, so a prefix's tail goes before
  its head. A hit on a free block pins it again.
- A block a request computed while another copy of it was already cached is not cached
  twice: it stays the request's own and is freed with it (vLLM keeps such a duplicate
  under the same hash until it is evicted; either copy serves a hit).

`max_blocks` bounds the blocks kept; the batching engine also evicts free blocks to make
room for the requests it admits (`servelab.sim.batching`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from servelab.sim.blocks import RequestBlocks

__all__ = ["CachedBlock", "PrefixCache", "held_tokens"]


@dataclass(eq=False, slots=True)
class CachedBlock:
    """One cached block and how many running requests use it."""

    key: int
    refs: int = 0


class PrefixCache:
    """Cached blocks by key: pinned ones, and free ones in eviction order."""

    def __init__(self, *, block_size: int, max_blocks: int) -> None:
        if block_size < 1:
            raise ValueError("block_size must be at least 1")
        self.block_size = block_size
        self.max_blocks = max_blocks
        self.evicted_blocks = 0
        self._blocks: dict[int, CachedBlock] = {}
        self._free: OrderedDict[int, CachedBlock] = OrderedDict()
        """Blocks no running request uses, the next one to evict first."""

    @property
    def blocks(self) -> int:
        """Blocks cached now, pinned or free."""
        return len(self._blocks)

    @property
    def pinned_blocks(self) -> int:
        """Blocks some running request uses."""
        return len(self._blocks) - len(self._free)

    def match(self, request: RequestBlocks, prompt_tokens: int) -> list[CachedBlock]:
        """The blocks a new request would reuse: its longest cached run of leading blocks
        that leaves its last prompt token to compute."""
        hit: list[CachedBlock] = []
        for index in range((prompt_tokens - 1) // self.block_size):
            block = self._blocks.get(request.key(index))
            if block is None:
                break
            hit.append(block)
        return hit

    def free_among(self, blocks: Iterable[CachedBlock]) -> int:
        """How many of these blocks no running request uses (pinning them takes room)."""
        return sum(1 for block in blocks if block.refs == 0)

    def pin(self, request: RequestBlocks, hit: list[CachedBlock]) -> None:
        """Give a newly admitted request its hit (from `match`): pinned, and settled."""
        for block in hit:
            self._use(block)
        request.pinned.extend(hit)
        request.settled = len(hit)

    def settle(self, request: RequestBlocks, tokens: int) -> int:
        """Cache the full blocks among the request's first `tokens` tokens that are not yet
        settled; the number it pins now that it did not before."""
        full = tokens // self.block_size
        if full <= request.settled:
            return 0
        cached, pinned = self._blocks, request.pinned
        added = 0
        for key in request.keys(request.settled, full):
            if key in cached:
                continue  # another request's copy: this one stays the request's own
            block = cached[key] = CachedBlock(key, refs=1)
            pinned.append(block)
            added += 1
        request.settled = full
        if added:
            self.shrink_to(self.max_blocks)
        return added

    def release(self, request: RequestBlocks) -> None:
        """Unpin every block the request uses, its last block first."""
        for block in reversed(request.pinned):
            block.refs -= 1
            if block.refs == 0:
                self._free[block.key] = block
        request.pinned.clear()
        self.shrink_to(self.max_blocks)

    def shrink_to(self, limit: int) -> None:
        """Evict free blocks, least recently freed first, until at most `limit` remain or
        every block left is pinned."""
        while len(self._blocks) > limit and self._free:
            key, _ = self._free.popitem(last=False)
            del self._blocks[key]
            self.evicted_blocks += 1

    def _use(self, block: CachedBlock) -> None:
        if block.refs == 0:
            del self._free[block.key]
        block.refs += 1


def held_tokens(
    cache: PrefixCache | None, running: Iterable[tuple[int, RequestBlocks | None]]
) -> int:
    """KV held by running requests, each given as (its tokens, its blocks): the tokens
    each holds alone, plus the cached blocks they pin, counted once however many share
    them. A block cached when its step was planned counts before that step computes it."""
    if cache is None:
        return sum(tokens for tokens, _ in running)
    size = cache.block_size
    own = sum(
        max(tokens - (size * len(blocks.pinned) if blocks is not None else 0), 0)
        for tokens, blocks in running
    )
    return own + size * cache.pinned_blocks
