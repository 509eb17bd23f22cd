"""Output quality measured beside speed (issue 39): a probe set answered greedily, passes
compared against the noise floor of a repeat, one verdict per comparison.

Modules, one job each: probes (the probe set), client (a pass over HTTP), wire (reading
the engines' answers), greedy (the not_greedy check on an answer's own logprobs), compare
(two passes to metrics), verdict (floor and verdict), diff (where answers part ways),
evaluate (passes to quality.json's document), results (the typed documents).
docs/QUALITY.md has the schema and the rules.

The names below load on first use (a module `__getattr__`), so importing this package, or
servelab.bench.quality.results through it, loads neither the HTTP client (aiohttp) nor
numpy: every reader of a summary.json imports the results.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servelab.bench.quality.client import (
        DEFAULT_CONCURRENCY,
        DEFAULT_TIMEOUT_S,
        QualityClient,
        QualityTarget,
    )
    from servelab.bench.quality.compare import PairComparison, ProbePair, compare_passes
    from servelab.bench.quality.diff import first_divergences
    from servelab.bench.quality.evaluate import BEFORE, evaluate_quality, reference_label
    from servelab.bench.quality.greedy import GREEDY_TOLERANCE_NATS, TOP_LOGPROBS
    from servelab.bench.quality.probes import (
        DEFAULT_PROBES,
        DEFAULT_SEED,
        Probe,
        make_probes,
        probe_set_digest,
        read_probes,
        write_probes,
    )
    from servelab.bench.quality.results import (
        PROBES_FILE,
        QUALITY_FILE,
        DiffEntry,
        ForcedReading,
        ForcedSet,
        ProbeReading,
        QualityBlock,
        QualityComparison,
        QualityMetrics,
        QualityPass,
        QualityResult,
        Verdict,
        load_quality,
        quality_block,
        write_quality,
    )
    from servelab.bench.quality.verdict import EPSILONS, bootstrap_interval, judge, self_difference

_LAZY: dict[str, str] = {
    "BEFORE": "servelab.bench.quality.evaluate",
    "DEFAULT_CONCURRENCY": "servelab.bench.quality.client",
    "DEFAULT_PROBES": "servelab.bench.quality.probes",
    "DEFAULT_SEED": "servelab.bench.quality.probes",
    "DEFAULT_TIMEOUT_S": "servelab.bench.quality.client",
    "DiffEntry": "servelab.bench.quality.results",
    "EPSILONS": "servelab.bench.quality.verdict",
    "ForcedReading": "servelab.bench.quality.results",
    "ForcedSet": "servelab.bench.quality.results",
    "GREEDY_TOLERANCE_NATS": "servelab.bench.quality.greedy",
    "PROBES_FILE": "servelab.bench.quality.results",
    "PairComparison": "servelab.bench.quality.compare",
    "Probe": "servelab.bench.quality.probes",
    "ProbePair": "servelab.bench.quality.compare",
    "ProbeReading": "servelab.bench.quality.results",
    "QUALITY_FILE": "servelab.bench.quality.results",
    "QualityBlock": "servelab.bench.quality.results",
    "QualityClient": "servelab.bench.quality.client",
    "QualityComparison": "servelab.bench.quality.results",
    "QualityMetrics": "servelab.bench.quality.results",
    "QualityPass": "servelab.bench.quality.results",
    "QualityResult": "servelab.bench.quality.results",
    "QualityTarget": "servelab.bench.quality.client",
    "TOP_LOGPROBS": "servelab.bench.quality.greedy",
    "Verdict": "servelab.bench.quality.results",
    "bootstrap_interval": "servelab.bench.quality.verdict",
    "compare_passes": "servelab.bench.quality.compare",
    "evaluate_quality": "servelab.bench.quality.evaluate",
    "first_divergences": "servelab.bench.quality.diff",
    "judge": "servelab.bench.quality.verdict",
    "load_quality": "servelab.bench.quality.results",
    "make_probes": "servelab.bench.quality.probes",
    "probe_set_digest": "servelab.bench.quality.probes",
    "quality_block": "servelab.bench.quality.results",
    "read_probes": "servelab.bench.quality.probes",
    "reference_label": "servelab.bench.quality.evaluate",
    "self_difference": "servelab.bench.quality.verdict",
    "write_probes": "servelab.bench.quality.probes",
    "write_quality": "servelab.bench.quality.results",
}
"""Each public name and the module that defines it."""

__all__ = [
    "BEFORE",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_PROBES",
    "DEFAULT_SEED",
    "DEFAULT_TIMEOUT_S",
    "EPSILONS",
    "GREEDY_TOLERANCE_NATS",
    "PROBES_FILE",
    "QUALITY_FILE",
    "TOP_LOGPROBS",
    "DiffEntry",
    "ForcedReading",
    "ForcedSet",
    "PairComparison",
    "Probe",
    "ProbePair",
    "ProbeReading",
    "QualityBlock",
    "QualityClient",
    "QualityComparison",
    "QualityMetrics",
    "QualityPass",
    "QualityResult",
    "QualityTarget",
    "Verdict",
    "bootstrap_interval",
    "compare_passes",
    "evaluate_quality",
    "first_divergences",
    "judge",
    "load_quality",
    "make_probes",
    "probe_set_digest",
    "quality_block",
    "read_probes",
    "reference_label",
    "self_difference",
    "write_probes",
    "write_quality",
]


def __getattr__(name: str) -> Any:
    """Load the module that defines `name` on first use, and keep the name here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
