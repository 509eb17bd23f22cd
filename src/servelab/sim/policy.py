"""How an engine admits requests, shares a step's tokens and makes room: the knobs of
`Batcher` that differ between engines, each read from the engine's own scheduler.

- `running_reserve`: the share of a running request's remaining output the scheduler
  counts as taken when it decides whether a new request fits; `admit_reserve` the share
  of the new request's own. 1 and 1 book every output whole, so the cache never runs out
  under running requests (the simulator's own policy: its outputs always run to
  max_tokens). Less, and it can: a request is then preempted (`victim`), its KV freed,
  and it is queued again (`requeue_front`) to prefill its prompt and its generated
  tokens anew (vLLM's recompute preemption, SGLang's retraction, transformers' soft
  reset).
- `reserve_floor`: SGLang's running share is a ratio that falls by a fixed step per
  engine step from `running_reserve` to this floor, and after a retraction starts again
  from an estimate of the outputs left (`sglang.srt` new_token_ratio).
- `admit_headroom`: the share of the cache that must stay free for a new request to be
  admitted (transformers' safety margin).
- `decodes_in_budget`: whether each decoding request takes one token of the step's
  budget (vLLM's `max_num_batched_tokens`, transformers' `max_batch_tokens`), or the
  budget is for prompt tokens alone (SGLang's `chunked_prefill_size`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ENGINE_POLICIES", "EXACT_RESERVE", "BatchPolicy", "policy_for"]

Victim = Literal["newest", "fewest_output"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPolicy:
    """An engine's admission, budget and preemption rules."""

    name: str
    running_reserve: float = 1.0
    admit_reserve: float = 1.0
    reserve_floor: float | None = None
    """Where the running share decays to; None: it stays at running_reserve."""
    reserve_decay_steps: int = 0
    """Engine steps the running share takes to fall from running_reserve to the floor."""
    retract_steps: int | None = None
    """After a preemption the running share restarts at (tokens the remaining requests
    decoded + this many each) / (their max tokens): SGLang's estimate; None: at
    running_reserve."""
    admit_headroom: float = 0.0
    decodes_in_budget: bool = False
    victim: Victim = "newest"
    requeue_front: bool = True

    def __post_init__(self) -> None:
        for name in ("running_reserve", "admit_reserve", "admit_headroom"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1")
        floor = self.reserve_floor
        if floor is not None and not 0.0 <= floor <= self.running_reserve:
            raise ValueError("reserve_floor must be between 0 and running_reserve")

    @property
    def preempts(self) -> bool:
        """Whether the cache can run out under running requests (outputs not booked whole)."""
        return self.running_reserve < 1.0 or self.admit_reserve < 1.0

    @property
    def decay_per_step(self) -> float:
        floor = self.reserve_floor
        if floor is None or self.reserve_decay_steps <= 0:
            return 0.0
        return (self.running_reserve - floor) / self.reserve_decay_steps

    def running_share(self, start: float, steps: int) -> float:
        """The running share `steps` steps after it was set to `start`."""
        floor = self.reserve_floor if self.reserve_floor is not None else start
        return max(start - self.decay_per_step * steps, min(floor, start))


EXACT_RESERVE = BatchPolicy(name="exact")
"""The simulator's own: every output booked whole, prompt tokens alone in the budget."""

ENGINE_POLICIES: dict[str, BatchPolicy] = {
    "sim": EXACT_RESERVE,
    # vllm/v1/core/sched/scheduler.py (0.13 to 0.34): running requests (decodes, unfinished
    # prefills) are scheduled first from max_num_batched_tokens, waiting ones from what is
    # left; kv_cache_manager.allocate_slots allocates blocks for the tokens scheduled now
    # (from 0.19 the whole prompt must fit at admission), nothing for the output; when it
    # fails, self.running.pop() (the newest) is preempted, freed, and prepended to the
    # waiting queue with num_computed_tokens = 0 (recompute).
    "vllm": BatchPolicy(
        name="vllm", running_reserve=0.0, admit_reserve=0.0, decodes_in_budget=True
    ),
    # sglang/srt/managers/schedule_policy.py PrefillAdder: a new request needs its prompt
    # and its whole max_new_tokens (clipped at 4096) beside the running requests' remaining
    # outputs times new_token_ratio, which starts at 0.7 and falls to 0.7 * 0.14 over 600
    # decode steps; retract_decode frees the requests with the fewest output tokens
    # (ties: the longest prompt), appends them to the back of the waiting queue and sets
    # the ratio from what the remaining requests have left. chunked_prefill_size is prompt
    # tokens only, one request in a chunked prefill at a time.
    "sglang": BatchPolicy(
        name="sglang",
        running_reserve=0.7,
        admit_reserve=1.0,
        reserve_floor=0.7 * 0.14,
        reserve_decay_steps=600,
        retract_steps=20,
        victim="fewest_output",
        requeue_front=False,
    ),
    # transformers/generation/continuous_batching/scheduler.py FIFOScheduler (5.x):
    # decoding requests first, then prompt chunks, from max_batch_tokens; blocks are
    # allocated as tokens arrive; no new prefill is admitted below 15% free cache
    # (safety_margin, 0.2 before 5.25); out of blocks, the newest starved request is
    # soft-reset (prompt plus generated tokens, back of the waiting queue).
    "transformers": BatchPolicy(
        name="transformers",
        running_reserve=0.0,
        admit_reserve=0.0,
        admit_headroom=0.15,
        decodes_in_budget=True,
        requeue_front=False,
    ),
}
ENGINE_POLICIES["embedded"] = ENGINE_POLICIES["transformers"]


def policy_for(engine: str | None) -> BatchPolicy:
    """The policy of an engine by its adapter name (`sim` and unknown engines book exactly)."""
    return ENGINE_POLICIES.get(engine or "", EXACT_RESERVE)
