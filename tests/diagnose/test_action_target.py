"""Actions say what they change: the engine spec, the load, or something outside servelab;
a diagnosis.json written before they said so gets the target its actions' shape implies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from servelab.diagnose import Diagnosis
from servelab.diagnose.actions import (
    bench_action,
    flag_name_action,
    knob_action,
    layout_action,
    text_action,
)
from servelab.diagnose.engineconf import engine_config
from servelab.diagnose.findings import Action, ActionTarget
from servelab.store import DIAGNOSIS_FILE, RunDir
from tests.report.builders import diagnosis, finding, sweep

ENGINE, LOAD, OUTSIDE = ActionTarget.ENGINE, ActionTarget.LOAD, ActionTarget.OUTSIDE

OLD_ACTIONS: list[tuple[dict[str, Any], ActionTarget]] = [
    # as benchmarks/gpu/results/h200-*/diagnosis.json stored them (before `available`, too)
    (
        {
            "text": "replay each step as a CUDA graph: --cb-use-cuda-graph",
            "knob": "cuda_graphs",
            "value": True,
            "engine": "embedded",
            "flags": ["--cb-use-cuda-graph"],
        },
        ENGINE,
    ),
    (
        {
            "text": "profile a few decode steps (the engine's torch profiler)",
            "knob": None,
            "value": None,
            "engine": None,
            "flags": [],
        },
        OUTSIDE,
    ),
    (
        {
            "text": "extend the sweep: servelab bench --concurrency 128,256,512,1024",
            "knob": "concurrency",
            "value": "128,256,512,1024",
            "engine": None,
            "flags": ["--concurrency", "128,256,512,1024"],
        },
        LOAD,
    ),
    # the other shapes the helpers and rules wrote
    ({"text": "knob kv_cache_tokens=8192 (give --engine)", "knob": "kv_cache_tokens"}, ENGINE),
    (
        {"text": "not possible on embedded", "knob": "max_running_requests", "available": False},
        ENGINE,
    ),
    ({"text": "layout tp=4 (give --engine for the engine's flags)", "knob": "layout"}, ENGINE),
    (
        {"text": "graphs up to 256: --cuda-graph-max-bs 256", "value": 256, "engine": "sglang"},
        ENGINE,
    ),
    (
        {
            "text": "env: {OMP_NUM_THREADS: 7} in its spec",
            "knob": "env.OMP_NUM_THREADS",
            "value": 7,
            "engine": "vllm",
            "flags": ["OMP_NUM_THREADS=7"],
        },
        ENGINE,
    ),
    (
        {
            "text": "servelab bench --workers 4",
            "knob": "workers",
            "value": 4,
            "flags": ["--workers", "4"],
        },
        LOAD,
    ),
    ({"text": "give the GPUs peer-to-peer", "available": True, "conditional": False}, OUTSIDE),
]


def _old_diagnosis(tmp_path: Path) -> Path:
    """A run directory whose diagnosis.json has actions without `target`."""
    document = diagnosis(sweep(), [finding("a cap")]).model_dump(mode="json", by_alias=True)
    document["findings"][0]["actions"] = [action for action, _ in OLD_ACTIONS]
    (tmp_path / DIAGNOSIS_FILE).write_text(json.dumps(document))
    return tmp_path


def test_a_diagnosis_written_before_targets_loads_with_them_inferred(tmp_path: Path):
    loaded = RunDir(_old_diagnosis(tmp_path)).load_diagnosis(Diagnosis)
    assert loaded is not None
    targets = [action.target for action in loaded.findings[0].actions]
    assert targets == [target for _, target in OLD_ACTIONS]
    again = Diagnosis.model_validate_json(loaded.model_dump_json(by_alias=True))
    assert again == loaded  # written back, the target is stored, not inferred again


def test_a_stored_target_is_kept_and_unknown_fields_still_refused():
    stored = Action.model_validate({"text": "lower the load", "target": "load"})
    assert stored.target is LOAD
    with pytest.raises(ValidationError, match="target"):
        Action.model_validate({"text": "x", "target": "somewhere"})
    with pytest.raises(ValidationError, match="extra"):
        Action.model_validate({"text": "x", "kind": "engine"})


@pytest.mark.parametrize(
    ("action", "target"),
    [
        (knob_action(engine_config("vllm", [], []), "max_running_requests", 256, "raise"), ENGINE),
        (knob_action(engine_config(None, [], []), "max_running_requests", 256, "raise"), ENGINE),
        (knob_action(engine_config("embedded", [], []), "max_running_requests", 64, "r"), ENGINE),
        (flag_name_action(engine_config("sglang", [], []), "moe_backend", "try another"), ENGINE),
        (layout_action(engine_config("vllm", [], []), {"tp": 4, "pp": 2}, "fewer ranks"), ENGINE),
        (layout_action(engine_config(None, [], []), {"tp": 4}, "fewer ranks"), ENGINE),
        (bench_action("--concurrency", "128,256", "extend the sweep"), LOAD),
        (text_action("give the GPUs peer-to-peer"), OUTSIDE),
    ],
)
def test_each_helper_says_what_its_action_changes(action: Action, target: ActionTarget):
    assert action.target is target, action.text
