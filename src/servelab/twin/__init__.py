"""The twin: an engine fitted from a run's own records and replayed in virtual time
through the simulator's batcher (`servelab.sim.batching`)."""

from servelab.twin.build import TwinInputs, build_twin, fit_twin
from servelab.twin.model import Twin
from servelab.twin.replay import EngineLimits
from servelab.twin.result import TwinResult

__all__ = ["EngineLimits", "Twin", "TwinInputs", "TwinResult", "build_twin", "fit_twin"]
