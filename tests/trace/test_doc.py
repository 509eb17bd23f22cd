"""Every field of a trace summary is defined in docs/TRACE.md."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from servelab.trace import (
    GapCause,
    Gaps,
    LongGap,
    OpStat,
    PerStep,
    StepStats,
    ThreadTotal,
    TraceSummary,
)

DOC = Path(__file__).parents[2] / "docs" / "TRACE.md"


def test_every_field_is_documented():
    text = DOC.read_text()
    models: list[type[BaseModel]] = [
        TraceSummary,
        OpStat,
        Gaps,
        LongGap,
        GapCause,
        ThreadTotal,
        StepStats,
        PerStep,
    ]
    missing = [
        f"{model.__name__}.{name}"
        for model in models
        for name, field in model.model_fields.items()
        if f"`{field.alias or name}`" not in text
    ]
    assert not missing
