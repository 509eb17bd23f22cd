"""`batch_token_budget`: the engine's per-step token budget spreads the prefills over many steps.

An engine puts at most B tokens into one scheduler step (`max_batch_tokens`: vLLM
`--max-num-batched-tokens`, SGLang `--max-prefill-tokens`, transformers serve
`--cb-max-batch-tokens`). One step then holds floor(B / P) whole prompts of P tokens, and a
prompt longer than B takes ceil(P / B) steps (chunked prefill). The step model:

- n prompts arriving together (a closed loop of requests of one size sends them in waves:
  they start together and finish together) are prefilled ceil(k P / B) steps after they
  arrive, the k-th in line; the median request, k = ceil(n / 2), after
  s(n) = ceil(ceil(n / 2) P / B) steps. n is the level's concurrency, at most a configured
  running cap (the engine admits no more prompts at once).
- a step lasts about one decode step, the level's mean TPOT: every step emits one token of
  each running request, including the steps that carry prefill chunks;
- so median TTFT(c) = TTFT(lightest) + (s(c) - s(lightest)) x TPOT(c).

What shows it, independently:

- the sweep: median TTFT grows with concurrency by about the steps the model predicts,
  while TPOT stays near the lightest level's (decode is not what slows);
- the configuration: B, read from the engine's command or log, below P x n, the tokens of
  the prompts that arrive together (B >= P x n holds them all in one step: the budget
  cannot bind there, and such a level is never read as it);
- the engine's counts: requests waiting while the budget binds.

Nothing is said without a configured budget (an engine's default is not guessed), nor
without streamed TTFTs (a non-streamed run's first token is its last). The action is a
budget that holds the prefills at the knee (or the best level) in one step, bounded; its
gain is the same step model at the new budget, with the model's prefill time for the
extra tokens per step where the model is known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from servelab.diagnose.actions import knob_action
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import (
    Action,
    Evidence,
    ExpectedGain,
    Finding,
    FindingKind,
    Severity,
    Tally,
)
from servelab.diagnose.rules.running_cap import CAP_MATCH
from servelab.diagnose.signals import MIN_QUEUED_MEAN, fmt, held_back, too_few_scrapes

__all__ = [
    "CRITICAL_GAIN",
    "DECODE_FLAT_RATIO",
    "MAX_BUDGET_TOKENS",
    "MAX_RAISE",
    "MIN_COST_STEPS",
    "STEP_AGREE_HIGH",
    "STEP_AGREE_LOW",
    "TTFT_GROWTH_MIN",
    "rule",
]

STEP_AGREE_LOW = 0.5
"""The measured rise of median TTFT over the lightest level's is at least half the rise
the step model predicts. Less means the prompts did not wait for the budget: the engine
prefilled at least twice the budget per step, or the requests did not arrive together (a
steady closed loop whose arrivals the decodes spread out, where the budget keeps up)."""
STEP_AGREE_HIGH = 3.0
"""... and at most three times it. TPOT is a decode step, and a step that also carries B
prefill tokens lasts longer; an engine whose budget also counts the running decodes'
tokens (vLLM: one per running request) leaves the prompts less than B per step. Together
these lengthen the wait to about twice the prediction; a wait longer still is a queue of
another kind, for whole requests to finish (a running cap, a full KV cache), which
running_request_cap and kv_capacity read."""
DECODE_FLAT_RATIO = 1.5
"""TPOT at the level at most this many times the lightest level's (times the growth the
model expects of a memory-bound decode at the two batches, where the model is known). A
memory-bound decode step reads the weights once for the whole batch, so more requests
lengthen it only by their KV reads; a decode that is itself the limit lengthens the step
with the batch, up to doubling TPOT per doubling of the load. Half again is well below
one such doubling and above a memory-bound decode's gentle growth."""
TTFT_GROWTH_MIN = 1.5
"""Median TTFT at the level at least this many times the lightest level's: a smaller
rise is within TTFT's spread under load (scheduling jitter, the client's timing) and
costs too little to act on."""
MAX_RAISE = 8
"""The suggested budget is at most eight times (three doublings of) the current one. The
step model is read at the measured budget; a step carrying many times more prefill
tokens lasts longer than the decode step it assumes and stalls the running decodes for
it, so the change goes in steps that the next run (a tune trial) can check."""
MAX_BUDGET_TOKENS = 16384
"""The suggested budget is at most this: SGLang's own default `--max-prefill-tokens` and
vLLM's largest default (offline use on GPUs of 70 GiB or more). A step of that many prompt
tokens is compute-bound on any GPU, so a larger one only lengthens each decode stall; a
budget already there is not raised, and the rule says nothing (the prefills' compute, not
the step count, is then the wait: prefill_compute)."""
CRITICAL_GAIN = 2.0
"""A budget that binds at the knee (or the best level) and whose raise is predicted to at
least halve the median TTFT there is critical: it sets the latency of the operating point."""

MIN_COST_STEPS = 2
"""The run's own prefill cost per token is read only where the lightest level's prompt took
at least two steps: a prompt of one step has a TTFT that is as much the network and the
server's handling as steps."""

_WEIGHTS = {"sweep": 0.5, "config": 0.4, "metrics": 0.3}


@dataclass(frozen=True)
class _Reading:
    """One level read against the step model: what it predicts and what was measured."""

    level: LevelFacts
    prompts: float
    steps: int
    predicted_ms: float
    measured_ms: float
    growth: float
    agreement: float
    tpot_ratio: float
    tpot_allowed: float
    step_ms: float
    """A step of the level while prompts wait for it: its TPOT, or a step that carries a
    prompt chunk (`_chunk_step_ms`) where that is longer."""
    decode_material: bool = True
    """TPOT grew by a material part of a step: by half the lightest level's step or more."""
    admission_held: bool = False
    """The engine's counts show requests kept waiting below its running cap: the steps,
    full of prefill chunks, were longer than a decode step because prompts filled them."""

    @property
    def why_not(self) -> str | None:
        """Why this level is not read as the budget binding; None when it is."""
        slowed = self.tpot_ratio > self.tpot_allowed and self.decode_material
        if slowed and not self.admission_held:
            return f"TPOT {self.tpot_ratio:.3g}x the lightest level's: decode slowed as well"
        if self.growth < TTFT_GROWTH_MIN:
            return f"median TTFT only {self.growth:.3g}x the lightest level's"
        if self.agreement < STEP_AGREE_LOW:
            return "TTFT rose much less than the steps predict: the budget kept up"
        if self.agreement > STEP_AGREE_HIGH:
            return "TTFT rose much more than the steps predict: a wait of another kind"
        return None


def rule(facts: RunFacts) -> list[Finding]:
    conf = facts.engine.max_batch_tokens
    if conf is None or conf.value <= 0:
        return []
    budget = conf.value
    streamed = [lv for lv in facts.closed if lv.summary.median_ttft_ms and lv.tpot_ms]
    if len(streamed) < 2:
        return []
    light = streamed[0]
    reads = [r for lv in streamed[1:] if (r := _read(facts, light, lv, budget)) is not None]
    about = [r for r in reads if r.why_not is None]
    if not about:
        return []
    target = _target(facts, about)
    prompt = target.level.input_tokens
    new = _new_budget(budget, prompt, target.prompts)
    if new <= budget:
        return []
    gain = _gain(facts, light, target, budget, new)
    if gain is None:
        return []
    tally = Tally()
    tally.add("sweep", _WEIGHTS["sweep"], [e for r in about for e in _sweep_evidence(light, r)])
    tally.add("config", _WEIGHTS["config"], _config_evidence(conf.value, conf.source, target))
    queued = _queued(about) + _full_prefills(about, budget)
    tally.add("metrics", _WEIGHTS["metrics"], queued)
    for r in reads:
        if r.why_not is not None:
            tally.note(_against(r))
    counted = [r for r in about if r.level.engine is not None]
    if counted and not queued:
        tally.note(
            Evidence(
                what="waiting requests (mean) where the budget binds: none",
                value=0,
                unit="requests",
                source=", ".join(f"engine metrics level {r.level.level}" for r in counted),
                supports=False,
            )
        )
    operating = target.level is _operating(facts)
    severity = Severity.CRITICAL if operating and gain.factor >= CRITICAL_GAIN else Severity.WARNING
    return [
        Finding(
            kind=FindingKind.BATCH_TOKEN_BUDGET,
            title=f"a step holds {budget:,} tokens: prompts of {prompt:,.0f} tokens queue for "
            f"it, median TTFT {target.growth:.3g}x at {target.level.label}",
            severity=severity,
            confidence=tally.confidence,
            evidence=tally.evidence,
            explanation=_explanation(budget, conf.source, target),
            actions=_actions(facts, budget, new),
            expected_gain=gain,
            missing=_missing(facts, [r.level for r in about], new),
            levels=[r.level.level for r in about],
            impact=max(0.0, 1 - 1 / gain.factor),
        )
    ]


def _steps(prompts: float, tokens: float, budget: int) -> int:
    """Steps until the median of `prompts` prompts of `tokens` tokens, arriving together,
    has its prefill done."""
    return math.ceil(math.ceil(prompts / 2) * tokens / budget)


def _prompts(facts: RunFacts, lv: LevelFacts) -> float:
    """Prompts arriving at the engine together: the concurrency, at most a running cap."""
    cap = facts.engine.running_cap
    return min(lv.load, float(cap.value)) if cap is not None and cap.value > 0 else lv.load


def _read(facts: RunFacts, light: LevelFacts, lv: LevelFacts, budget: int) -> _Reading | None:
    """The level against the step model; None where the budget cannot bind (B >= P x n) or
    the model predicts its median request no extra step."""
    prompts = _prompts(facts, lv)
    if budget >= lv.input_tokens * prompts:
        return None
    steps = _steps(prompts, lv.input_tokens, budget)
    extra = steps - _steps(_prompts(facts, light), light.input_tokens, budget)
    light_ttft, ttft = light.summary.median_ttft_ms, lv.summary.median_ttft_ms
    if extra <= 0 or not light_ttft or not ttft or not light.tpot_ms or not lv.tpot_ms:
        return None
    chunk = _chunk_step_ms(facts, light, budget) or 0.0
    step = max(lv.tpot_ms, chunk)
    predicted = light_ttft + extra * step
    light_step = max(light.tpot_ms, chunk)
    return _Reading(
        level=lv,
        prompts=prompts,
        steps=steps,
        predicted_ms=predicted,
        measured_ms=ttft,
        growth=ttft / light_ttft,
        agreement=(ttft - light_ttft) / (predicted - light_ttft),
        tpot_ratio=lv.tpot_ms / light.tpot_ms,
        tpot_allowed=DECODE_FLAT_RATIO * _decode_growth(facts, light, lv),
        step_ms=step,
        decode_material=lv.tpot_ms - light.tpot_ms >= (DECODE_FLAT_RATIO - 1) * light_step,
        admission_held=_admission_held(facts, lv),
    )


def _chunk_step_ms(facts: RunFacts, light: LevelFacts, budget: int) -> float | None:
    """A step that carries a prompt chunk, read at the lightest level: its median TTFT
    over its prefill steps. Where prefill is compute-bound (an engine on a CPU) such a
    step lasts several decode steps, and TPOT, read over steps mostly without chunks,
    is no measure of it. None where the lightest prompt fits one step: its TTFT is then
    as much the network and the server's handling as steps."""
    ttft = light.summary.median_ttft_ms
    steps = _steps(_prompts(facts, light), light.input_tokens, budget)
    if not ttft or steps < MIN_COST_STEPS:
        return None
    return ttft / steps


def _admission_held(facts: RunFacts, lv: LevelFacts) -> bool:
    """Requests waited while fewer ran than the configured cap allows (or no cap is known):
    the engine would not admit them for another reason than its cap. With a step budget,
    a waiting prompt is admitted when a step has room for its chunk, so every step carries
    prefill and lasts longer than a decode step: TPOT grows without decode being the
    limit. That a full KV cache can hold them too is kv_capacity's to say."""
    engine = lv.engine
    if not held_back(lv) or engine is None or engine.running_max is None:
        return False
    cap = facts.engine.running_cap
    return cap is None or engine.running_max < (1 - CAP_MATCH) * cap.value - 1


def _decode_growth(facts: RunFacts, light: LevelFacts, lv: LevelFacts) -> float:
    """How much TPOT may grow from the lightest level to this one with decode alone: the
    model's decode step grows by some milliseconds (more KV to read), added to the
    lightest level's measured TPOT (1 without the model). The decode step alone, and
    added, not multiplied: the model's TPOT folds the other requests' prefills in, and an
    engine whose step is mostly host time does not grow with the batch's bytes."""
    model, light_tpot = facts.model, light.tpot_ms
    if model is None or light.model is None or lv.model is None or not light_tpot:
        return 1.0
    grown_ms = (lv.model.step.step_s - light.model.step.step_s) * 1e3 / model.time_scale
    return max(1.0, (light_tpot + grown_ms) / light_tpot)


def _operating(facts: RunFacts) -> LevelFacts | None:
    """The level the run operates at: the knee, else the one with the most throughput."""
    knee = facts.knee_level()
    if knee is not None:
        return knee
    return max(facts.closed, key=lambda lv: lv.summary.total_throughput or 0.0, default=None)


def _target(facts: RunFacts, about: list[_Reading]) -> _Reading:
    """The reading the action is sized for: the operating level if the budget binds there,
    else the heaviest level where it binds (the worst TTFT)."""
    operating = _operating(facts)
    return next((r for r in about if r.level is operating), about[-1])


def _new_budget(budget: int, prompt: float, prompts: float) -> int:
    """The next power of two that holds the prompts in one step, bounded (see MAX_RAISE,
    MAX_BUDGET_TOKENS)."""
    wanted = 2 ** math.ceil(math.log2(max(prompt * prompts, 1.0)))
    return min(wanted, MAX_RAISE * budget, MAX_BUDGET_TOKENS)


def _gain(
    facts: RunFacts, light: LevelFacts, target: _Reading, budget: int, new: int
) -> ExpectedGain | None:
    """Measured / predicted median TTFT at the target level with the new budget, between
    two arrival patterns. A step of the new budget lasts the measured step plus the
    model's prefill time of the extra tokens (without the model, a decode step).

    - In waves (the step model above): the prompts arrive together and the median one
      waits its steps: the longest TTFT, the least gain.
    - Steady: a closed loop whose requests finish one by one sends about n / (output +
      prefill steps) prompts per step; when their tokens and the running decodes' fit
      the new budget, a prompt waits at most the step in progress: the shortest TTFT.

    A step of the new budget costs its extra prompt tokens: at most the run's own cost
    per token (`_prefill_ms_per_token`, paid in full at the waves end and not at all at
    the steady end, since nothing bounds it from below but zero), else the model's prefill
    time of them (both ends), else nothing (a decode step each).

    The lightest level's TTFT less the prefill steps the new budget saves there is the
    floor both start from. Where the engine held requests back below its running cap, the
    measured steps were full of prefill chunks because the budget kept the prompts
    waiting; a budget that admits them leaves steps nearer a decode step. The steady end
    then takes the lightest level's step (grown as the model's decode grows), the waves
    end keeps the measured one: the interval spans both. The point estimate is the middle
    of the interval in ratio terms (the two patterns are far apart in TTFT; a real loop
    sits between them).
    None when no gain is predicted: then the prefills' compute, not the step count, is
    the wait."""
    light_ttft = light.summary.median_ttft_ms or 0.0
    light_step = max(light.tpot_ms or 0.0, _chunk_step_ms(facts, light, budget) or 0.0)
    light_prompts = _prompts(facts, light)
    saved = _steps(light_prompts, light.input_tokens, budget)
    saved -= _steps(light_prompts, light.input_tokens, new)
    floor = max(light_ttft - saved * light_step, light_step)
    lv = target.level
    step = short = target.step_ms
    if target.admission_held:
        short = min(step, light_step * _decode_growth(facts, light, lv))
    per_token = _prefill_ms_per_token(facts, light, target, budget)
    if per_token is not None:
        # The run's reading bounds the cost of a token from above; nothing but zero bounds
        # it from below: the waves end pays it in full, the steady end not at all.
        step += (new - budget) * per_token
    elif facts.model is not None:
        extra_ms = max(0.0, facts.model.prefill_ms(new) - facts.model.prefill_ms(budget))
        step, short = step + extra_ms, short + extra_ms
    after = _steps(target.prompts, lv.input_tokens, new)
    waves = floor + max(after - 1, 0) * step
    per_prompt = math.ceil(lv.input_tokens / new)
    arriving = target.prompts / max(lv.output_tokens + per_prompt, 1.0) * lv.input_tokens
    shortest = floor + max(after - 1, 0) * short
    steady = min(floor + short, shortest) if arriving + target.prompts <= new else shortest
    factor = target.measured_ms / math.sqrt(waves * steady)
    if factor <= 1.0:
        return None
    least, most = target.measured_ms / waves, target.measured_ms / steady
    if per_token is not None:
        how = f"the run's prefill cost, {per_token:.3g} ms a token"
    elif facts.model is not None:
        how = "with the model's prefill time"
    else:
        how = "a decode step each"
    return ExpectedGain(
        factor=fmt(factor),
        metric="median TTFT",
        at=lv.label,
        source=f"step model ({how}), at {budget:,} and {new:,} tokens per step",
        text=f"a budget of {new:,} tokens: median TTFT at {lv.label} from "
        f"{target.measured_ms:,.0f} ms to {steady:,.0f}-{waves:,.0f} ms (prompts arriving "
        f"steadily, or in waves of {target.prompts:g}: {after} steps), about {factor:.1f}x",
        low=fmt(max(least, 1.0)),
        high=fmt(most),
    )


def _prefill_ms_per_token(
    facts: RunFacts, light: LevelFacts, target: _Reading, budget: int
) -> float | None:
    """What one more prompt token in a step costs, read from the run itself: the step
    model's time per step beyond a decode step, over the prompt tokens a step carries.

    Two readings, each too high in its own way, and the lower is kept. The lightest
    level's TTFT over its prefill steps also holds what is not steps (the network, the
    server's own handling); the rise of TTFT from the lightest level to the target over
    the extra steps cancels that, but its steps also carry the other requests' decodes.
    None where the lightest prompt fits one step (its TTFT is then mostly not steps): the
    caller then falls back to the model. A reading at or below a decode step is a token
    that costs nothing measurable: 0."""
    light_ttft, light_step = light.summary.median_ttft_ms, light.tpot_ms
    if not light_ttft or not light_step:
        return None
    chunk = min(budget, light.input_tokens)
    light_steps = _steps(_prompts(facts, light), light.input_tokens, budget)
    if light_steps < MIN_COST_STEPS:
        return None
    readings = [(light_ttft / light_steps - light_step) / chunk]
    extra = target.steps - light_steps
    if extra > 0:
        rise = (target.measured_ms - light_ttft) / extra
        readings.append((rise - (target.level.tpot_ms or 0.0)) / budget)
    return max(min(readings), 0.0)


def _sweep_evidence(light: LevelFacts, r: _Reading) -> list[Evidence]:
    lv = r.level
    return [
        Evidence(
            what=f"median TTFT at {lv.label}",
            value=fmt(r.measured_ms),
            unit="ms",
            source=lv.source,
        ),
        Evidence(
            what=f"median TTFT the step model predicts at {lv.label} ({r.steps} steps of "
            f"{r.step_ms:.3g} ms for the median of {r.prompts:g} prompts)",
            value=fmt(r.predicted_ms),
            unit="ms",
            source=f"step model: {light.source} TTFT, {lv.source} TPOT",
        ),
        Evidence(
            what=f"mean TPOT, {lv.label} / {light.label}",
            value=fmt(r.tpot_ratio),
            unit="x",
            source=f"{light.source}, {lv.source}",
        ),
    ]


def _config_evidence(budget: int, source: str, target: _Reading) -> list[Evidence]:
    lv = target.level
    prompt = lv.input_tokens
    whole = budget // max(round(prompt), 1)
    held = (
        Evidence(
            what=f"whole prompts of {prompt:,.0f} tokens one step holds",
            value=whole,
            unit="prompts",
            source=f"{source}; {lv.source}",
        )
        if whole >= 1
        else Evidence(
            what=f"steps one prompt of {prompt:,.0f} tokens takes (chunked prefill)",
            value=math.ceil(prompt / budget),
            unit="steps",
            source=f"{source}; {lv.source}",
        )
    )
    return [
        Evidence(
            what="configured token budget per step",
            value=budget,
            unit="tokens",
            source=source,
        ),
        held,
        Evidence(
            what=f"prompt tokens arriving together at {lv.label}",
            value=fmt(prompt * target.prompts),
            unit="tokens",
            source=lv.source,
        ),
    ]


def _queued(about: list[_Reading]) -> list[Evidence]:
    """Requests waiting (engine counts) at the levels where the budget binds."""
    found = []
    for r in about:
        engine = r.level.engine
        if engine is None or (engine.queued_mean or 0.0) < MIN_QUEUED_MEAN:
            continue
        found.append(
            Evidence(
                what=f"waiting requests (mean) at {r.level.label}",
                value=fmt(engine.queued_mean or 0.0),
                unit="requests",
                source=f"engine metrics ({engine.engine}) level {r.level.level}",
            )
        )
    return found


def _full_prefills(about: list[_Reading], budget: int) -> list[Evidence]:
    """The engine's own Prefill lines: batches that reached the budget, so prompts were cut
    to fit it (evidence beside the queue, not a gate)."""
    found = []
    for r in about:
        engine = r.level.engine
        largest = engine.prefill_tokens_max if engine is not None else None
        if engine is None or largest is None or largest < budget:
            continue
        found.append(
            Evidence(
                what=f"largest prefill batch at {r.level.label} ({engine.prefill_batches} logged)",
                value=fmt(largest),
                unit=f"tokens, the budget {budget:,}",
                source=f"engine log Prefill lines level {r.level.level}",
            )
        )
    return found


def _against(r: _Reading) -> Evidence:
    return Evidence(
        what=f"median TTFT at {r.level.label}, against {r.predicted_ms:,.0f} ms predicted "
        f"(not read as the budget: {r.why_not})",
        value=fmt(r.measured_ms),
        unit="ms",
        source=r.level.source,
        supports=False,
    )


def _explanation(budget: int, source: str, target: _Reading) -> str:
    prompt = target.level.input_tokens
    whole = budget // max(round(prompt), 1)
    holds = (
        f"one step holds {whole} whole prompt{'s' if whole != 1 else ''} of {prompt:,.0f} tokens"
        if whole >= 1
        else f"a prompt of {prompt:,.0f} tokens takes {math.ceil(prompt / budget)} steps"
    )
    served = f"{whole} per step" if whole >= 1 else "one chunk of one prompt at a time"
    if target.admission_held:
        steps = (
            f"A step lasts the level's TPOT ({target.step_ms:.3g} ms): {target.tpot_ratio:.3g}x "
            "the lightest level's, because every step carried prefill chunks while requests "
            "waited below the running cap (the engine's counts)"
        )
    else:
        steps = (
            f"A step lasts about a decode step ({target.step_ms:.3g} ms, the level's TPOT), and "
            f"TPOT stayed within {target.tpot_ratio:.3g}x of the lightest level's, so decode "
            "is not what slows"
        )
    return (
        f"The engine puts at most {budget:,} tokens into one step ({source}), so {holds}. "
        f"When {target.prompts:g} requests arrive together their prefills are served "
        f"{served}, and the median one waits about {target.steps} steps. {steps}: the "
        "median TTFT grows with the concurrency by whole steps, as measured "
        f"({target.measured_ms:,.0f} ms against {target.predicted_ms:,.0f} ms predicted at "
        f"{target.level.label}). A larger budget lets one step take more of the prompts."
    )


def _actions(facts: RunFacts, budget: int, new: int) -> list[Action]:
    conf = facts.engine
    actions = [
        knob_action(
            conf,
            "max_batch_tokens",
            new,
            f"raise the per-step token budget from {budget:,} to {new:,}",
        )
    ]
    if "max_batch_tokens" in conf.knobs and "chunked_prefill_size" in conf.knobs:
        chunk = knob_action(
            conf,
            "chunked_prefill_size",
            new,
            "this engine's prefill chunk size bounds a step's prompt tokens too: if it is "
            f"below {new:,}, raise it with the budget",
        )
        actions.append(chunk.model_copy(update={"conditional": True}))
    return actions


def _missing(facts: RunFacts, levels: list[LevelFacts], new: int) -> list[str]:
    missing = []
    unstreamed = [lv.label for lv in facts.closed if not lv.summary.median_ttft_ms]
    if unstreamed:
        missing.append(f"median TTFT at {', '.join(unstreamed)}: none (not streamed); not read")
    if facts.missing.get("metrics"):
        missing.append(
            f"engine metrics: {facts.missing['metrics']}; a queue of waiting requests "
            "would confirm the wait"
        )
    else:
        missing += too_few_scrapes(levels)
    if facts.missing.get("model"):
        missing.append(
            f"model: {facts.missing['model']}; the gain assumes a step of {new:,} tokens "
            "lasts a decode step, so it is an upper bound"
        )
    return missing
