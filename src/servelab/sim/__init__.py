"""The simulated OpenAI-compatible engine: ground truth for timing, and a fault injector.

`serve(SimConfig(...))` runs it as a process (what `servelab sim` does); `await
start(config)` runs it in the current event loop for tests. Chunk timing comes from a
`TimingSource`; `FixedTiming` (ttft, then a fixed gap between chunks) is the one built.
"""

from servelab.sim.config import SimConfig
from servelab.sim.faults import Fault
from servelab.sim.process import serve
from servelab.sim.server import RunningSim, start
from servelab.sim.stats import SimStats
from servelab.sim.timing import FixedTiming, TimedRequest, TimingSource
from servelab.sim.truth import Outcome, TruthRecord, read_truth

__all__ = [
    "Fault",
    "FixedTiming",
    "Outcome",
    "RunningSim",
    "SimConfig",
    "SimStats",
    "TimedRequest",
    "TimingSource",
    "TruthRecord",
    "read_truth",
    "serve",
    "start",
]
