"""The last lines `servelab run` and `bench --engine` print: the top finding and what to try."""

from __future__ import annotations

from pathlib import Path

from servelab.diagnose import Diagnosis
from servelab.report.diagnosis import top_finding_lines

H200 = Path(__file__).parents[2] / "benchmarks/gpu/results/h200-diagnose/default/diagnosis.json"


def _h200() -> Diagnosis:
    return Diagnosis.model_validate_json(H200.read_bytes())


def test_the_top_finding_and_its_first_action():
    lines = top_finding_lines(_h200())
    assert lines[0].startswith("top finding: launch_overhead (critical): ")
    assert lines[1].startswith("try first: ") and "--cb-use-cuda-graph" in lines[1]


def test_no_finding_with_a_knee_names_the_evidence_that_was_missing():
    knee = _h200().knee.model_copy(
        update={"found": True, "explanation": "the knee is at concurrency 16: more"}
    )
    diagnosis = _h200().model_copy(update={"findings": [], "knee": knee})
    diagnosis.sources["engine metrics"] = diagnosis.sources["engine metrics"].model_copy(
        update={"available": False}
    )
    (line,) = top_finding_lines(diagnosis)
    assert line.startswith("top finding: none; the knee is at concurrency 16, but to say why")
    assert "engine metrics" in line
