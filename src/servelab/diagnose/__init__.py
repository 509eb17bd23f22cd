"""Rules that turn runs into findings: the knee, the bottleneck and its evidence, the gap.

`diagnose_run(path, options)` reads a run directory (summary.json, and where present
telemetry, engine metrics, the engine's log events, probe.json), runs every rule and
returns a `Diagnosis` (written as diagnosis.json): findings most important first, and the
single-stream gap in layers from the model's roofline to the engine as measured.
"""

from servelab.bench.knee import KNEE_GROWTH_PER_DOUBLING, Knee, find_knee
from servelab.diagnose.document import SCHEMA, Diagnosis, GapLayers, GapShare, Layer, SourceStatus
from servelab.diagnose.findings import (
    Action,
    Evidence,
    ExpectedGain,
    Finding,
    FindingKind,
    Severity,
)
from servelab.diagnose.options import DiagnoseOptions
from servelab.diagnose.run import DIAGNOSIS_FILE, diagnose_run

__all__ = [
    "DIAGNOSIS_FILE",
    "KNEE_GROWTH_PER_DOUBLING",
    "SCHEMA",
    "Action",
    "DiagnoseOptions",
    "Diagnosis",
    "Evidence",
    "ExpectedGain",
    "Finding",
    "FindingKind",
    "GapLayers",
    "GapShare",
    "Knee",
    "Layer",
    "Severity",
    "SourceStatus",
    "diagnose_run",
    "find_knee",
]
