"""A level of the run replayed through the simulator's batcher in virtual time.

The same `servelab.sim.batching.Batcher` that the wall-clock simulator steps
(`servelab.sim.steploop`) is stepped here with no clock at all: each step starts where
the last one ended, and an idle engine jumps to the next arrival. The load is the
level's own, request by request:

- closed loop: the level's first N sends at their recorded times, then each completion
  sends the next request at once, as the client did; a level that sent for a set time
  sends until that time, as the client did: fewer requests than it recorded where the
  replay is slower, and where it is faster the recorded requests again in order (the
  client cycles its prompts the same way);
- open loop and trace replay: each request at its recorded send time (what the engine
  got, the client's own lateness included);
- conversations: a session's next turn follows its previous answer by the think time
  the run recorded between them; in closed loop a session holds its slot throughout.

A request reaches the engine `overhead_s` after it is sent (the HTTP server, the
tokenizer and the queue into the scheduler, fitted per run), and its tokens are seen
when their step ends.

Most steps of a closed loop only decode: between one arrival or finish and the next
nothing changes but the context. Those stretches (`Batcher.decode_stretch`) are stepped
without planning each step, to the same times bit for bit, which makes a level's replay
cost its events rather than its tokens times its batch.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from servelab.sim.batching import Batcher, EngineRequest, Phase
from servelab.sim.policy import BatchPolicy
from servelab.sim.stepcost import StepCost
from servelab.twin.records import LevelLoad

__all__ = ["MOST_REPEATS", "EngineLimits", "LevelReplay", "ReplayRequest", "replay_level"]

MOST_REPEATS = 64
"""A level that sent for a set time sends its recorded requests again at most this many
times over: a guard against a cost near zero, far past any gain the twin's doubts span."""


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """The configured limits the replay runs under (None: no such limit)."""

    policy: BatchPolicy
    running_cap: int | None = None
    kv_capacity_tokens: int | None = None
    batch_tokens: int | None = None
    """The step's token budget; None: a whole prompt in one step."""


@dataclass(eq=False, slots=True)
class ReplayRequest:
    """One request to replay, and what happened to it."""

    index: int
    prompt_tokens: int
    """Prompt tokens the engine computes (its prefix-cache hit already taken off)."""
    output_tokens: int
    send_s: float
    """Recorded send time, seconds from the level's first send."""
    session: int | None = None
    turn: int | None = None
    think_s: float = 0.0
    """A later turn: recorded time from the previous turn's last token to its send."""
    sent_s: float | None = None
    first_s: float | None = None
    last_s: float | None = None
    prefill_chunks: list[tuple[float, int]] = field(default_factory=list)
    """(end of the step, prompt tokens) for each chunk prefilled."""
    token_s: list[float] | None = None
    """Every token's time, where the caller asks for them with a list."""
    held: tuple[float, ...] | None = None
    """What the steps it lived through held, summed (steps, decoding requests, their
    context, prompt tokens, steps that prefilled; a step it joined part-way counts by
    the share it waited): its engine time is these times the step cost's terms."""
    held_at_arrival: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class LevelReplay:
    """A replayed level: its requests with their times, and what the engine held."""

    requests: list[ReplayRequest]
    steps: int
    busy_s: float
    decode_seconds: float
    """Decoding requests times the length of their steps, summed: over the level's length,
    the mean decode batch."""
    preemptions: int
    prefill_steps: int = 0
    prefill_tokens: int = 0
    most_prefill: int = 0
    """The most prompt tokens one step prefilled."""
    most_decoding: int = 0
    """The most requests one step decoded."""
    most_held: int = 0
    """The most KV tokens one step held: its decoders' context and the prompt it prefilled."""


def replay_level(
    load: LevelLoad,
    requests: Sequence[ReplayRequest],
    *,
    step_cost: StepCost,
    limits: EngineLimits,
    overhead_s: float = 0.0,
    track_held: bool = True,
) -> LevelReplay:
    """Run the level's requests through a fresh batcher; each request gets its times (and,
    with `track_held`, what the steps it lived through held: the end-to-end fit's input)."""
    batcher: Batcher[ReplayRequest] = Batcher(
        step_cost=step_cost,
        chunked_prefill_size=limits.batch_tokens or _unbounded(requests),
        max_running=limits.running_cap,
        kv_capacity_tokens=limits.kv_capacity_tokens,
        policy=limits.policy,
    )
    for request in requests:
        request.sent_s = request.first_s = request.last_s = request.held = None
        request.prefill_chunks = []
        if request.token_s is not None:
            request.token_s = []
    clients = _Clients(load, requests, overhead_s)
    now, steps, busy, weighted_batch = 0.0, 0, 0.0, 0.0
    prefill_steps, prefill_tokens, most_prefill, most_decoding, most_held = 0, 0, 0, 0, 0
    held: tuple[float, ...] = (0.0,) * 5
    last_held, last_s = held, 0.0
    while True:
        for arrived_s, request in clients.arrived(now):
            if track_held:
                late = now - arrived_s
                share = late / last_s if last_s > 0 and late < last_s else 0.0
                request.held_at_arrival = tuple(
                    h - share * x for h, x in zip(held, last_held, strict=True)
                )
            if batcher.fits(request.prompt_tokens, request.output_tokens):
                batcher.submit(EngineRequest(request.prompt_tokens, request.output_tokens, request))
            else:  # the engine refuses it: it never gets a token
                clients.finished(request, now)
        decode, context, most = batcher.decode_stretch()
        upcoming = clients.next_arrival()
        if most and (upcoming is None or now < upcoming):
            n, taken, ends = len(decode), 0, []
            while taken < most and (upcoming is None or now < upcoming):
                last_s = batcher.decode_step_s(n, context)
                if track_held:
                    last_held = (1.0, n, context, 0, 0.0)
                    held = tuple(h + x for h, x in zip(held, last_held, strict=True))
                most_held = max(most_held, context)
                steps += 1
                busy += last_s
                weighted_batch += n * last_s
                now += last_s
                ends.append(now)
                context += n
                taken += 1
            most_decoding = max(most_decoding, n)
            batcher.skip_decodes(decode, taken)
            for job in decode:
                owner = job.owner
                owner.last_s = now
                if owner.token_s is not None:
                    owner.token_s.extend(ends)
            continue
        step = batcher.plan()
        if step is None:
            if upcoming is None:  # plan() sends nobody: the arrival read above stands
                break
            now = max(now, upcoming)
            last_s = 0.0
            continue
        end = now + step.duration_s
        prefilled = step.prefill_tokens
        if track_held:
            last_held = (
                1.0,
                len(step.decode),
                step.decode_context_tokens,
                prefilled,
                1.0 if prefilled else 0.0,
            )
            held = tuple(h + x for h, x in zip(held, last_held, strict=True))
        last_s = step.duration_s
        if prefilled:
            prefill_steps += 1
            prefill_tokens += prefilled
            most_prefill = max(most_prefill, prefilled)
        most_decoding = max(most_decoding, len(step.decode))
        most_held = max(most_held, step.decode_context_tokens + prefilled)
        for job, chunk in step.prefill:
            job.owner.prefill_chunks.append((end, chunk))
        steps += 1
        busy += step.duration_s
        weighted_batch += len(step.decode) * step.duration_s
        for job in batcher.complete(step):
            owner = job.owner
            if owner.first_s is None:
                owner.first_s = end
            owner.last_s = end
            if owner.token_s is not None:
                owner.token_s.append(end)
            if job.phase is Phase.DONE:
                if track_held:
                    owner.held = tuple(
                        h - x for h, x in zip(held, owner.held_at_arrival, strict=True)
                    )
                clients.finished(owner, end)
        now = end
    return LevelReplay(
        requests=[*requests, *clients.repeats],
        steps=steps,
        busy_s=busy,
        decode_seconds=weighted_batch,
        preemptions=batcher.preemptions,
        prefill_steps=prefill_steps,
        prefill_tokens=prefill_tokens,
        most_prefill=most_prefill,
        most_decoding=most_decoding,
        most_held=most_held,
    )


def _unbounded(requests: Sequence[ReplayRequest]) -> int:
    """No budget: room for the longest prompt beside every request decoding (a budget
    that counts decodes must not chunk a prompt only because it does)."""
    return max((r.prompt_tokens for r in requests), default=1) + len(requests) + 1


class _Clients:
    """The load generator: who is sent when, and who reaches the engine when."""

    def __init__(self, load: LevelLoad, requests: Sequence[ReplayRequest], overhead_s: float):
        self._overhead = overhead_s
        self._until = load.duration_s
        self._order = itertools.count()
        self._heap: list[tuple[float, int, ReplayRequest]] = []
        self.repeats: list[ReplayRequest] = []
        """Recorded requests sent again, where a level that sent for a set time outlasts
        its records."""
        self._next_turn: dict[ReplayRequest, ReplayRequest] = {}
        units: list[ReplayRequest] = []
        by_session: dict[int, list[ReplayRequest]] = {}
        for request in sorted(requests, key=lambda r: r.send_s):
            if request.session is None:
                units.append(request)
            else:
                by_session.setdefault(request.session, []).append(request)
        for turns in by_session.values():
            turns.sort(key=lambda r: (r.turn or 0, r.send_s))
            units.append(turns[0])
            for earlier, later in itertools.pairwise(turns):
                self._next_turn[earlier] = later
        units.sort(key=lambda r: r.send_s)
        closed = load.mode == "concurrency"
        slots = max(int(load.value), 1) if closed else len(units)
        self._waiting_units = deque(units[slots:])
        self._recorded = len(units)
        self._singles = [u for u in units if u.session is None]
        self._closed = closed
        for request in units[:slots]:
            self._send(request, request.send_s)
        if not closed:
            self._waiting_units.clear()

    def _send(self, request: ReplayRequest, at_s: float) -> None:
        request.sent_s = at_s
        heapq.heappush(self._heap, (at_s + self._overhead, next(self._order), request))

    def arrived(self, now_s: float) -> list[tuple[float, ReplayRequest]]:
        """The requests at the engine by now, with when each got there."""
        out = []
        while self._heap and self._heap[0][0] <= now_s:
            at, _, request = heapq.heappop(self._heap)
            out.append((at, request))
        return out

    def next_arrival(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def finished(self, request: ReplayRequest, at_s: float) -> None:
        later = self._next_turn.get(request)
        if later is not None:
            if self._open_at(at_s + later.think_s):
                self._send(later, at_s + later.think_s)
        elif not self._closed or not self._open_at(at_s):
            return
        elif self._waiting_units:
            self._send(self._waiting_units.popleft(), at_s)
        elif self._singles and self._repeats_left(request, at_s):
            source = self._singles[len(self.repeats) % len(self._singles)]
            again = ReplayRequest(
                index=source.index,
                prompt_tokens=source.prompt_tokens,
                output_tokens=source.output_tokens,
                send_s=at_s,
                token_s=None if source.token_s is None else [],
            )
            self.repeats.append(again)
            self._send(again, at_s)

    def _repeats_left(self, request: ReplayRequest, at_s: float) -> bool:
        """Whether a finished request is followed by a recorded one sent again: only in a
        level that sent for a set time, and never after a request that took no time (a
        degenerate cost would send without end) or past `MOST_REPEATS` rounds."""
        if self._until is None or request.sent_s is None or at_s <= request.sent_s:
            return False
        return len(self.repeats) < MOST_REPEATS * self._recorded

    def _open_at(self, at_s: float) -> bool:
        """Whether the level still sends at this time (a level sent for a set time stops)."""
        return self._until is None or at_s < self._until
