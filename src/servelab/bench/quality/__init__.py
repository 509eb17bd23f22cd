"""Output quality measured beside speed (issue 39): a probe set answered greedily, passes
compared against the noise floor of a repeat, one verdict per comparison.

Modules, one job each: probes (the probe set), client (a pass over HTTP), wire (reading
the engines' answers), greedy (the not_greedy check on an answer's own logprobs), compare
(two passes to metrics), verdict (floor and verdict), diff (where answers part ways),
evaluate (passes to quality.json's document), results (the typed documents).
docs/QUALITY.md has the schema and the rules. Callers that only read results may import
servelab.bench.quality.results alone (no HTTP client loaded).
"""

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
