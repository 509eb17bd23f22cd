"""Continuous batching as an engine's scheduler does it, with no clock and no sockets.

`Batcher.plan()` composes the next step and says how long it takes; `complete(step)`
applies it and names the requests that received a token. The event-loop driver
(`servelab.sim.steploop`) calls the two at absolute step boundaries; tests call them
with a fake clock.

The rules, modelled on SGLang's scheduler with its default first-come-first-served policy:

- Waiting requests are admitted strictly in arrival order (the head blocks the rest)
  while the running set is under `max_running` and the head's KV reservation fits.
- KV: a running request holds its prefilled prompt tokens plus its generated tokens. It
  is admitted only when its prompt plus the share of its output the policy books
  (`servelab.sim.policy`) fits beside what those already running hold and have booked.
  The simulator's own policy books the whole output (`max_tokens`): its outputs always
  run to max_tokens, so that reservation is exact and nothing is ever preempted. A
  policy that books less (vLLM books nothing, SGLang a decaying share) can run out as
  outputs grow: the newest running request is then preempted, goes back to the head of
  the queue, and later prefills its prompt and its generated tokens again.
- With a prefix cache (`servelab.sim.prefix_cache`), a request admitted with a hit starts
  with those tokens prefilled, so only the rest is prefilled (and charged); the blocks it
  shares are counted once, beside the reservations, and a request is admitted when its
  own reservation fits beside those and the blocks running requests pin. Free cached
  blocks fill the rest and are evicted, least recently freed first, when an admitted
  request needs the room. Blocks a step fills are cached when the step is planned:
  first those of the running requests, then each admitted one's, so a request admitted
  later in the same step hits what an earlier one is prefilling, as in vLLM.
- A step decodes one token for every running request whose prefill is done and prefills
  up to `chunked_prefill_size` prompt tokens (less one per decoding request where the
  policy counts decodes in the budget, as vLLM and transformers do): first the rest of
  the request whose prompt did not fit in the previous step, then newly admitted ones.
  So a long prompt spans several steps and at most one request is part-way through its
  prefill (SGLang's rule; vLLM may run several at once).
- At the end of a step each decoding request has its next token, and a request whose
  prefill finished has its first token.
- A prompt of 0 tokens is prefilled as 1 (an engine always runs at least one position).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from servelab.sim.blocks import RequestBlocks
from servelab.sim.policy import EXACT_RESERVE, BatchPolicy
from servelab.sim.prefix_cache import CachedBlock, PrefixCache, held_tokens
from servelab.sim.stepcost import StepCost

__all__ = ["Batcher", "EngineRequest", "Phase", "Step"]

T = TypeVar("T")


class Phase(Enum):
    """Where a request is in the engine."""

    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"
    """Finished its output, or cancelled."""


@dataclass(eq=False, slots=True)
class EngineRequest(Generic[T]):
    """One request as the engine tracks it; `owner` is whatever the caller attaches.

    `blocks` are its block keys for the prefix cache (None: it takes no part in it);
    `cached_tokens` the prompt tokens its hit supplied at admission. A preempted request
    prefills its generated tokens again: `recompute_tokens` of them.
    """

    prompt_tokens: int
    max_tokens: int
    owner: T
    prefilled: int = 0
    generated: int = 0
    phase: Phase = Phase.WAITING
    blocks: RequestBlocks | None = None
    cached_tokens: int = 0
    recompute_tokens: int = 0
    preemptions: int = 0

    def __post_init__(self) -> None:
        self.prompt_tokens = max(self.prompt_tokens, 1)

    @property
    def kv_tokens(self) -> int:
        """KV cache it holds now: prompt tokens prefilled plus tokens generated."""
        return self.prefilled + self.generated - self.recompute_tokens

    @property
    def prefill_target(self) -> int:
        """Tokens to prefill before it decodes: its prompt, and after a preemption the
        tokens it had generated."""
        return self.prompt_tokens + self.recompute_tokens

    @property
    def reserved_tokens(self) -> int:
        """KV cache it will hold at its last token."""
        return self.prompt_tokens + self.max_tokens


@dataclass(frozen=True, slots=True)
class Step(Generic[T]):
    """One planned step: who decodes, who prefills how much, how long it takes, who it
    admitted (their prefill entries come last) and who it preempted to make room."""

    decode: list[EngineRequest[T]]
    prefill: list[tuple[EngineRequest[T], int]]
    decode_context_tokens: int
    duration_s: float
    admitted: list[EngineRequest[T]]
    preempted: tuple[EngineRequest[T], ...] = ()

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens prefilled in this step."""
        return sum(chunk for _, chunk in self.prefill)


class Batcher(Generic[T]):
    """The waiting queue, the running set and the KV cache of one engine."""

    def __init__(
        self,
        *,
        step_cost: StepCost,
        chunked_prefill_size: int,
        max_running: int | None = None,
        kv_capacity_tokens: int | None = None,
        step_overhead_s: float = 0.0,
        prefix_cache: PrefixCache | None = None,
        policy: BatchPolicy = EXACT_RESERVE,
    ) -> None:
        if chunked_prefill_size < 1:
            raise ValueError("chunked_prefill_size must be at least 1")
        self.step_cost = step_cost
        self.chunked_prefill_size = chunked_prefill_size
        self.max_running = max_running
        self.kv_capacity_tokens = kv_capacity_tokens
        self.step_overhead_s = step_overhead_s
        self.prefix_cache = prefix_cache
        self.policy = policy
        self.preemptions = 0
        self._steps_since_preemption = 0
        self._share_start = policy.running_reserve
        self.waiting: deque[EngineRequest[T]] = deque()
        self.running: dict[EngineRequest[T], None] = {}
        """In admission order (a dict for O(1) removal)."""
        self.kv_reserved_tokens = 0
        """What running requests will hold at their last token, less the cached blocks
        they pin (those are the prefix cache's)."""
        self._partial: EngineRequest[T] | None = None

    @property
    def kv_used_tokens(self) -> int:
        """KV cache held now: running requests' own tokens, plus the cached blocks they pin."""
        return held_tokens(self.prefix_cache, ((r.kv_tokens, r.blocks) for r in self.running))

    def fits(self, prompt_tokens: int, max_tokens: int) -> bool:
        """Whether a request of this size could ever run: its KV fits an empty cache."""
        capacity = self.kv_capacity_tokens
        return capacity is None or max(prompt_tokens, 1) + max_tokens <= capacity

    def submit(self, request: EngineRequest[T]) -> None:
        """Queue a request; it is admitted at the start of a later step."""
        if not self.fits(request.prompt_tokens, request.max_tokens):
            raise ValueError(
                f"{request.reserved_tokens} tokens of KV cannot fit in {self.kv_capacity_tokens}"
            )
        request.phase = Phase.WAITING
        self.waiting.append(request)

    def cancel(self, request: EngineRequest[T]) -> None:
        """Take a request out of the engine, wherever it is; a finished one is left alone."""
        if request.phase is Phase.WAITING:
            self.waiting.remove(request)
            request.phase = Phase.DONE
        elif request.phase is Phase.RUNNING:
            self._retire(request)

    def plan(self) -> Step[T] | None:
        """Admit what fits and compose the next step; None when there is nothing to run."""
        if self.prefix_cache is None:
            decode, context, preempted = self._decoders_with_room()
        else:
            preempted = self._make_room()
            decode, context = [], 0
            for request in self.running:
                if request.prefilled == request.prompt_tokens + request.recompute_tokens:
                    decode.append(request)
                    context += request.prompt_tokens + request.generated
                    if request.blocks is not None:  # this step computes its newest token
                        self._settle(request, request.prompt_tokens + request.generated)
        prefill: list[tuple[EngineRequest[T], int]] = []
        budget = self.chunked_prefill_size
        if self.policy.decodes_in_budget:
            budget = max(budget - len(decode), 0)
        partial = self._partial
        if partial is not None and budget > 0:
            chunk = min(partial.prefill_target - partial.prefilled, budget)
            prefill.append((partial, chunk))
            budget -= chunk
            self._settle(partial, partial.prefilled + chunk)
        admitted: list[EngineRequest[T]] = []
        while budget > 0 and self.waiting and self._admit(self.waiting[0]):
            request = self.waiting.popleft()
            admitted.append(request)
            chunk = min(request.prefill_target - request.prefilled, budget)
            prefill.append((request, chunk))
            budget -= chunk
            self._settle(request, request.prefilled + chunk)
        if not decode and not prefill:
            return None
        self._steps_since_preemption += 1
        prefill_tokens = sum(chunk for _, chunk in prefill)
        duration_s = self.step_cost.step_s(len(decode), context, prefill_tokens)
        return Step(
            decode, prefill, context, duration_s + self.step_overhead_s, admitted, preempted
        )

    def decode_stretch(self) -> tuple[list[EngineRequest[T]], int, int]:
        """The next steps that only decode: the decoders, their context now, and how many
        steps in a row decode just them, with nobody finishing, admitted or preempted
        (0 where the next step may do anything else).

        A replay steps through such a stretch with `decode_step_s` and `skip_decodes`
        instead of planning each step: nothing in it changes but the context. Only
        without a prefix cache; a waiting request stops it unless it cannot be admitted
        before someone leaves (the cap is full, or its KV does not fit and the policy's
        share does not decay, so it only grows)."""
        if self.prefix_cache is not None or self._partial is not None or not self.running:
            return [], 0, 0
        decode = list(self.running)
        if any(r.prefilled != r.prefill_target for r in decode):
            return [], 0, 0
        context = sum(r.prompt_tokens + r.generated for r in decode)
        steps = max(min(r.max_tokens - r.generated for r in decode) - 1, 0)
        if self.waiting and not self._waits_for_a_leaver(self.waiting[0]):
            return [], 0, 0
        capacity = self.kv_capacity_tokens
        if capacity is not None and self.policy.preempts and len(decode) > 1:
            steps = min(steps, max((capacity - context) // len(decode), 0))
        return decode, context, steps

    def _waits_for_a_leaver(self, head: EngineRequest[T]) -> bool:
        """Whether the queue's head cannot be admitted until a running request leaves."""
        if self.max_running is not None and len(self.running) >= self.max_running:
            return True
        capacity = self.kv_capacity_tokens
        if capacity is None or self.policy.decay_per_step > 0:
            return False
        own, committed = self._admission_need(head)
        return committed + own > self._admission_room(capacity)

    def decode_step_s(self, decode_batch: int, decode_context_tokens: int) -> float:
        """How long a step that only decodes takes (what `plan` would say)."""
        return self.step_cost.step_s(decode_batch, decode_context_tokens, 0) + self.step_overhead_s

    def skip_decodes(self, decode: list[EngineRequest[T]], steps: int) -> None:
        """Apply `steps` steps of a stretch (`decode_stretch`): each decoder has that many
        more tokens."""
        for request in decode:
            request.generated += steps
        self._steps_since_preemption += steps

    def complete(self, step: Step[T]) -> list[EngineRequest[T]]:
        """Apply a step; the requests that received a token, decoders first.

        A request that reached max_tokens leaves the running set (its phase is DONE);
        requests cancelled while the step ran are skipped.
        """
        tokens: list[EngineRequest[T]] = []
        running = Phase.RUNNING
        for request in step.decode:
            if request.phase is not running:
                continue
            request.generated += 1
            tokens.append(request)
            if request.generated == request.max_tokens:
                self._retire(request)
        for request, chunk in step.prefill:
            if request.phase is not running:
                continue
            request.prefilled += chunk
            if request.prefilled < request.prefill_target:
                self._partial = request
                continue
            if self._partial is request:
                self._partial = None
            request.generated += 1
            tokens.append(request)
            if request.generated >= request.max_tokens:
                self._retire(request)
        return tokens

    def _decoders_with_room(
        self,
    ) -> tuple[list[EngineRequest[T]], int, tuple[EngineRequest[T], ...]]:
        """Without a prefix cache: the decoders and their context, read in the same pass as
        the KV the next step needs, and the preemptions that make room for it (then read
        again). One pass over the running set: it runs every step of a replay."""
        decode: list[EngineRequest[T]] = []
        context, held = 0, 0
        for request in self.running:
            prefilled, generated = request.prefilled, request.generated
            if prefilled == request.prompt_tokens + request.recompute_tokens:
                decode.append(request)
                context += request.prompt_tokens + generated
            else:
                held += prefilled + generated - request.recompute_tokens
        capacity = self.kv_capacity_tokens
        if capacity is None or context + len(decode) + held <= capacity:
            return decode, context, ()
        preempted = self._make_room()
        if not preempted:
            return decode, context, ()
        decode, context, _ = self._decoders_with_room()
        return decode, context, preempted

    def _make_room(self) -> tuple[EngineRequest[T], ...]:
        """Preempt running requests, the policy's victim first, until every decoder's next
        token fits (only a policy that does not book whole outputs can run out)."""
        capacity = self.kv_capacity_tokens
        if capacity is None or not self.policy.preempts:
            return ()
        preempted: list[EngineRequest[T]] = []
        while len(self.running) > 1:
            if self._next_step_tokens() <= capacity:
                break
            victim = self._victim()
            self._preempt(victim)
            preempted.append(victim)
        if preempted:
            self._restart_share()
        return tuple(preempted)

    def _next_step_tokens(self) -> int:
        """The KV the next step needs: what is held now and one token per decoder. One
        plain loop where no prefix cache shares blocks: it runs every step of a replay."""
        if self.prefix_cache is not None:
            growing = sum(1 for r in self.running if r.prefilled == r.prefill_target)
            return self.kv_used_tokens + growing
        total = 0
        for r in self.running:
            prefilled = r.prefilled
            total += prefilled + r.generated - r.recompute_tokens
            if prefilled == r.prompt_tokens + r.recompute_tokens:
                total += 1
        return total

    def _victim(self) -> EngineRequest[T]:
        if self.policy.victim == "fewest_output":
            return min(self.running, key=lambda r: (r.generated, -r.prompt_tokens))
        return next(reversed(self.running))

    def _restart_share(self) -> None:
        """After a preemption: SGLang's estimate of the outputs left, else the start."""
        steps = self.policy.retract_steps
        running = self.running
        if steps is None or not running:
            self._share_start = self.policy.running_reserve
            return
        decoded = sum(r.generated for r in running) + steps * len(running)
        self._share_start = min(1.0, decoded / (sum(r.max_tokens for r in running) + 1))

    def _reserve_ratio(self) -> float:
        return self.policy.running_share(self._share_start, self._steps_since_preemption)

    def _own_commitments(self) -> int:
        """What running requests hold and will need, less the cached blocks they pin:
        the rest of each prefill, and the policy's share of each remaining output."""
        ratio = self._reserve_ratio()
        if self.prefix_cache is None:  # each holds its prompt and output so far, or will
            held, left = 0, 0
            for r in self.running:
                held += r.prompt_tokens + r.generated
                left += r.max_tokens - r.generated
            return round(held + ratio * left)
        size = self.prefix_cache.block_size
        total = 0.0
        for r in self.running:
            pinned = size * len(r.blocks.pinned) if r.blocks is not None else 0
            total += max(r.kv_tokens - pinned, 0) + (r.prefill_target - r.prefilled)
            total += ratio * (r.max_tokens - r.generated)
        return round(total)

    def _admission_need(self, request: EngineRequest[T]) -> tuple[int, int]:
        """The KV a waiting request books for itself, and what running ones have booked
        (before any prefix-cache hit)."""
        if not self.policy.preempts:
            return request.reserved_tokens, self.kv_reserved_tokens
        remaining = request.max_tokens - request.generated
        own = request.prefill_target + round(self.policy.admit_reserve * remaining)
        return own, self._own_commitments()

    def _admission_room(self, capacity: int) -> float:
        return capacity * (1.0 - self.policy.admit_headroom) if self.running else capacity

    def _admit(self, request: EngineRequest[T]) -> bool:
        """Start a waiting request with its prefix-cache hit, if it fits now."""
        if self.max_running is not None and len(self.running) >= self.max_running:
            return False
        cache, blocks = self.prefix_cache, request.blocks
        own, committed = self._admission_need(request)
        shared = 0
        hit: list[CachedBlock] = []
        if cache is not None:
            if blocks is not None:
                hit = cache.match(blocks, request.prompt_tokens)
                own -= cache.block_size * len(hit)
            shared = cache.block_size * (cache.pinned_blocks + cache.free_among(hit))
        capacity = self.kv_capacity_tokens
        if capacity is not None and committed + shared + own > self._admission_room(capacity):
            return False
        if cache is not None and blocks is not None:
            cache.pin(blocks, hit)
            request.cached_tokens = request.prefilled = cache.block_size * len(hit)
        request.phase = Phase.RUNNING
        self.running[request] = None
        self.kv_reserved_tokens += request.reserved_tokens - (
            cache.block_size * len(hit) if cache is not None else 0
        )
        if cache is not None and capacity is not None:  # free cached blocks make way
            cache.shrink_to((capacity - committed - own) // cache.block_size)
        return True

    def _settle(self, request: EngineRequest[T], tokens: int) -> None:
        """Cache the full blocks a step fills; they stop counting as the request's own."""
        if self.prefix_cache is not None and request.blocks is not None:
            added = self.prefix_cache.settle(request.blocks, tokens)
            self.kv_reserved_tokens -= self.prefix_cache.block_size * added

    def _release(self, request: EngineRequest[T]) -> None:
        """Take a running request out of the running set and free its KV."""
        del self.running[request]
        own = request.reserved_tokens
        if self.prefix_cache is not None and request.blocks is not None:
            own -= self.prefix_cache.block_size * len(request.blocks.pinned)
            self.prefix_cache.release(request.blocks)
        self.kv_reserved_tokens -= own
        if self._partial is request:
            self._partial = None

    def _retire(self, request: EngineRequest[T]) -> None:
        self._release(request)
        request.phase = Phase.DONE

    def _preempt(self, request: EngineRequest[T]) -> None:
        """Free a running request's KV and queue it first, to prefill its prompt and the
        tokens it generated again."""
        self._release(request)
        request.recompute_tokens = request.generated
        request.prefilled = request.cached_tokens = 0
        request.preemptions += 1
        request.phase = Phase.WAITING
        if self.policy.requeue_front:
            self.waiting.appendleft(request)
        else:
            self.waiting.append(request)
        self.preemptions += 1
        self._steps_since_preemption = 0
