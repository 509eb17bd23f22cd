"""The simulated OpenAI-compatible engine: ground truth for timing, and a fault injector.

`serve(SimConfig(...))` runs it as a process (what `servelab sim` does); `await
start(config)` runs it in the current event loop for tests. Two engines: fixed timing
(`FixedTiming`: ttft, then a fixed gap between chunks, optionally behind a running-request
cap) and continuous batching (`Batcher`, stepped on the wall clock, each step's duration
from a `StepCost`; named profiles in `PROFILES`). Either keeps a `PrefixCache` of full
KV blocks, matched on each request's `RequestBlocks`. GET /metrics speaks SGLang's or
vLLM's metric names. For quality probes, a request that asks for logprobs (or sets
temperature 0) gets the greedy text of a hashed token model with vLLM-shaped logprobs
(`servelab.sim.greedy`), and `SimConfig.corruption` plants a `Corruption` in answers.
"""

from servelab.sim.batching import Batcher, EngineRequest, Step
from servelab.sim.blocks import RequestBlocks
from servelab.sim.config import MetricsStyle, SimConfig
from servelab.sim.corruption import Corruption
from servelab.sim.faults import Fault
from servelab.sim.prefix_cache import PrefixCache
from servelab.sim.process import serve
from servelab.sim.profiles import PROFILES
from servelab.sim.server import RunningSim, start
from servelab.sim.stats import SimStats
from servelab.sim.stepcost import LinearStepCost, StepCost, StepCostFactory
from servelab.sim.timing import FixedTiming, TimedRequest, TimingSource
from servelab.sim.truth import Outcome, TruthRecord, read_truth

__all__ = [
    "PROFILES",
    "Batcher",
    "Corruption",
    "EngineRequest",
    "Fault",
    "FixedTiming",
    "LinearStepCost",
    "MetricsStyle",
    "Outcome",
    "PrefixCache",
    "RequestBlocks",
    "RunningSim",
    "SimConfig",
    "SimStats",
    "Step",
    "StepCost",
    "StepCostFactory",
    "TimedRequest",
    "TimingSource",
    "TruthRecord",
    "read_truth",
    "serve",
    "start",
]
