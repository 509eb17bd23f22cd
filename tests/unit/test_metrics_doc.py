"""docs/METRICS.md documents every summary field, and names none that does not exist."""

import re
from pathlib import Path

from servelab.bench.cost_results import LevelCost, Price
from servelab.bench.results import ClientStats, LevelSummary

DOC = (Path(__file__).parents[2] / "docs" / "METRICS.md").read_text()
MODELS = (LevelSummary, ClientStats, LevelCost, Price)
FIELDS = set().union(*(model.model_fields for model in MODELS))


def test_every_field_is_documented_and_described():
    mentioned = set(re.findall(r"`([a-z0-9_]+)`", DOC))
    missing = sorted(FIELDS - mentioned)
    assert not missing, f"fields missing from docs/METRICS.md: {missing}"
    for model in MODELS:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def test_doc_names_no_unknown_statistic():
    stats = set(re.findall(r"`((?:mean|median|std|p\d+)_[a-z0-9_]+_ms)`", DOC))
    assert stats, "the statistics table is missing"
    assert stats <= FIELDS, f"documented but not in the summary: {sorted(stats - FIELDS)}"
