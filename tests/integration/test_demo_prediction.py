"""The demo's top finding is checked the way every finding is: applied in a second run.

Where the finding gives an action on a setting and an expected gain, a second embedded
run applies it (`servelab run --engine SPEC --applies DEMO:KIND` at the demo's levels) and
diagnose of that run must find the measured factor inside the stated interval. Where it
gives neither (on two cores the engine's thread is busy and no core is idle to give it),
the finding must say it cannot predict: no gain, and only advice no run can apply.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from servelab.bench.results import BenchSummary
from servelab.diagnose.deployment import launched_spec
from servelab.diagnose.document import Diagnosis
from tests.conftest import SERVELAB, DemoRun

pytestmark = pytest.mark.timing


def _applied(spec: dict[str, Any], knob: str, value: Any) -> dict[str, Any]:
    """The demo's spec with the action's setting: a knob, or `env.NAME`."""
    changed = dict(spec)
    if knob.startswith("env."):
        changed["env"] = {**(spec.get("env") or {}), knob.removeprefix("env."): str(value)}
    else:
        changed["knobs"] = {**(spec.get("knobs") or {}), knob: value}
    return changed


def test_the_demos_top_finding_is_applied_or_says_it_cannot_know(demo_run: DemoRun, tmp_path: Path):
    assert demo_run.result.returncode == 0, demo_run.result.stderr[-2000:]
    diagnosis = Diagnosis.model_validate_json((demo_run.out / "diagnosis.json").read_text())
    top = diagnosis.findings[0]
    gain = top.expected_gain
    settable = [a for a in top.actions if a.knob and a.value is not None and a.available]
    if gain is None or gain.low is None or not settable:
        assert gain is None, f"{top.kind}: a gain with nothing to apply: {gain}"
        assert not settable, f"{top.kind}: an action to apply, but no gain to check: {settable}"
        # it cannot know or cannot act here, and says which: an action marked as not
        # possible on this engine and machine, or advice on the machine beside what the
        # run could not see; never a setting offered as doable with nothing to check
        offered = [a.text for a in top.actions if a.available and a.knob]
        assert not offered, f"{top.kind}: a setting offered with nothing to check: {offered}"
        advice = [a.text for a in top.actions if a.available]
        assert not advice or top.missing, f"{top.kind}: advice without what is missing: {advice}"
        assert top.missing or top.actions, f"{top.kind}: says neither why nor what is missing"
        return
    summary = BenchSummary.model_validate_json((demo_run.out / "summary.json").read_text())
    spec = launched_spec(summary)
    assert spec is not None
    action = settable[0]
    assert action.knob is not None
    spec_path = tmp_path / "applied.yaml"
    spec_path.write_text(yaml.safe_dump(_applied(spec, action.knob, action.value)))
    levels = ",".join(str(lv.max_concurrency) for lv in summary.levels)
    second = tmp_path / "applied"
    result = subprocess.run(
        [
            *SERVELAB,
            "run",
            "--engine",
            str(spec_path),
            "--concurrency",
            levels,
            "--applies",
            f"{demo_run.out}:{top.kind.value}",
            "--out",
            str(second),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    check = json.loads((second / "diagnosis.json").read_text())["prediction"]
    assert check is not None and check["measured"] is not None, check
    assert check["verdict"] == "inside", check["text"]
