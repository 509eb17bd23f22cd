"""Signals several rules read: a queue in front of the engine, an idle GPU, degraded links.

Each returns its Evidence (or nothing), so a rule adds what it found and a reader sees
the same numbers whichever rule used them. Thresholds are relative to the level's own
numbers where a relative one exists; each constant says why it is where it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from servelab.bench.results import BenchSummary
from servelab.diagnose.deployment import launched_spec
from servelab.diagnose.facts import LevelFacts, RunFacts
from servelab.diagnose.findings import Evidence
from servelab.diagnose.inputs import ProbeDoc
from servelab.telemetry.summary import MIN_ENGINE_SAMPLES

__all__ = [
    "ADMISSION_WAIT_SHARE",
    "ADMITTED_SHARE",
    "GPU_BUSY_POWER_PCT",
    "GPU_BUSY_SM_PCT",
    "GPU_IDLE_POWER_PCT",
    "GPU_IDLE_SM_PCT",
    "LINK_VERDICTS",
    "MIN_QUEUED_MEAN",
    "MIN_SCRAPES",
    "MIN_SHORTFALL",
    "QUEUE_TPOT_RATIO",
    "QUEUE_TTFT_RATIO",
    "admission_wait",
    "degraded_links",
    "engine_on_cpu",
    "fmt",
    "gpu_busy",
    "gpu_idle",
    "held_back",
    "model_growth",
    "queueing_beyond_knee",
    "too_few_scrapes",
]

ADMITTED_SHARE = 0.9
"""A level whose engine ran at most this share of the requests in flight, with some
waiting, was admission-limited: a closed loop keeps `concurrency` requests at the engine,
and the only reason for fewer to run is that the engine would not take more."""
MIN_SCRAPES = MIN_ENGINE_SAMPLES
"""A level judged from the engine's counts needs this many /metrics scrapes (the summary's
own floor: fewer leave the level without engine counts)."""
MIN_QUEUED_MEAN = 0.5
"""Requests waiting on average: a queue that stays, not one caught in passing."""
MIN_SHORTFALL = 2
"""At least two requests kept out: one missing is a request caught between its arrival
and the next step's admission, at any load."""
QUEUE_TTFT_RATIO = 2.0
"""Past the knee, median TTFT this many times the knee's: requests waited outside the
batch. A cap or a full cache makes a newcomer wait for a whole request to finish (an E2E,
many TTFTs long), so a doubling of load at least doubles TTFT."""
QUEUE_TPOT_RATIO = 1.25
"""... while TPOT grew by at most a quarter: the batch did not grow with the load. A
batch that grew with the load (compute saturation) raises TPOT with it."""
GPU_IDLE_POWER_PCT = 40.0
"""Mean power under this % of the limit: a decode that keeps the GPU busy reading weights
draws well over half of it (the H200 reference: 19% with 2% SM activity when idle-bound)."""
GPU_IDLE_SM_PCT = 25.0
"""GPM SM activity under this %: the SMs are idle most of the step."""
GPU_BUSY_POWER_PCT = 60.0
GPU_BUSY_SM_PCT = 60.0
"""Power over 60% of the limit, or SMs busy over 60% of the time: the GPU is working, not
waiting (a memory-bound decode on an H200 draws 60-80%)."""
LINK_VERDICTS = (
    "p2p-not-supported",
    "p2p-access-denied",
    "p2p-copy-slow",
    "p2p-copy-corrupt",
    "nccl-not-p2p",
    "vm-flat-topology",
)
"""Probe verdicts that say GPU-to-GPU traffic takes a slower path than the links allow."""


def fmt(value: float, digits: int = 3) -> float:
    """A value rounded for evidence: `digits` significant figures."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, max(0, digits - 1 - math.floor(math.log10(abs(value)))))


def too_few_scrapes(levels: Iterable[LevelFacts]) -> list[str]:
    """`missing` lines for the levels whose engine counts were left out: too few samples."""
    short = [lv for lv in levels if lv.engine_missing]
    reasons = sorted({lv.engine_missing or "" for lv in short})
    return [
        f"engine metrics at {', '.join(lv.label for lv in short if lv.engine_missing == why)}: "
        f"{why}; scrape more often or run longer levels"
        for why in reasons
    ]


def held_back(level: LevelFacts) -> list[Evidence]:
    """The engine's own metrics show it ran fewer requests than were in flight, with a queue.

    Read over several scrapes, with a queue on average: one scrape that lands between a
    request's arrival and the next step sees a waiting request at any load.
    """
    engine = level.engine
    if engine is None or not engine.running_max or not level.closed:
        return []
    if engine.gauge_samples < MIN_SCRAPES or (engine.queued_mean or 0.0) < MIN_QUEUED_MEAN:
        return []
    shortfall = level.load - engine.running_max
    if engine.running_max > ADMITTED_SHARE * level.load or shortfall < MIN_SHORTFALL:
        return []
    source = f"engine metrics ({engine.engine}) level {level.level}"
    return [
        Evidence(
            what=f"running requests (max) at {level.label}",
            value=engine.running_max,
            unit="requests",
            source=source,
        ),
        Evidence(
            what="waiting requests (mean)",
            value=fmt(engine.queued_mean or 0.0),
            unit="requests",
            source=source,
        ),
    ]


def queueing_beyond_knee(facts: RunFacts) -> list[Evidence]:
    """Past the knee TTFT jumped while TPOT stayed: requests queued outside a fixed batch."""
    knee = facts.knee_level()
    after = facts.after_knee()
    if knee is None or not after:
        return []
    nxt = after[0]
    k, n = knee.summary, nxt.summary
    if not (k.median_ttft_ms and n.median_ttft_ms and k.mean_tpot_ms and n.mean_tpot_ms):
        return []
    ttft_ratio = n.median_ttft_ms / k.median_ttft_ms
    tpot_ratio = n.mean_tpot_ms / k.mean_tpot_ms
    if ttft_ratio < QUEUE_TTFT_RATIO or tpot_ratio > QUEUE_TPOT_RATIO:
        return []
    return [
        Evidence(
            what=f"median TTFT, {nxt.label} / {knee.label}",
            value=fmt(ttft_ratio),
            unit="x",
            source=f"{knee.source}, {nxt.source}",
        ),
        Evidence(
            what=f"mean TPOT, {nxt.label} / {knee.label}",
            value=fmt(tpot_ratio),
            unit="x",
            source=f"{knee.source}, {nxt.source}",
        ),
    ]


ADMISSION_WAIT_SHARE = 0.5
"""A newcomer kept out of a full batch waits for a running request to finish: half of one
request's decode time (output tokens x TPOT) is the least such a wait adds to the median
TTFT. A prefill queue adds prefill times, far shorter."""


def admission_wait(lower: LevelFacts, upper: LevelFacts) -> list[Evidence]:
    """From one closed level to the next, TTFT grew by whole request times while TPOT
    stayed: the batch stopped growing and newcomers waited outside it (a cap or a full
    cache), with or without a knee in throughput."""
    lo, hi = lower.summary, upper.summary
    if not (lo.median_ttft_ms and hi.median_ttft_ms and lo.mean_tpot_ms and hi.mean_tpot_ms):
        return []
    ttft_ratio = hi.median_ttft_ms / lo.median_ttft_ms
    tpot_ratio = hi.mean_tpot_ms / lo.mean_tpot_ms
    request_ms = upper.output_tokens * hi.mean_tpot_ms
    rise = hi.median_ttft_ms - lo.median_ttft_ms
    if ttft_ratio < QUEUE_TTFT_RATIO or tpot_ratio > QUEUE_TPOT_RATIO:
        return []
    if rise < ADMISSION_WAIT_SHARE * request_ms:
        return []
    source = f"{lower.source}, {upper.source}"
    return [
        Evidence(
            what=f"median TTFT rise, {lower.label} to {upper.label}, in request decode times "
            f"({request_ms:,.0f} ms each)",
            value=fmt(rise / request_ms),
            unit="requests",
            source=source,
        ),
        Evidence(
            what=f"mean TPOT, {upper.label} / {lower.label}",
            value=fmt(tpot_ratio),
            unit="x",
            source=source,
        ),
    ]


def model_growth(facts: RunFacts, low: float, high: float, lv: LevelFacts) -> float | None:
    """The model's total-throughput growth per doubling from `low` to `high` concurrency."""
    if facts.model is None or high <= low:
        return None
    model = facts.model
    inp, out = round(lv.input_tokens), max(round(lv.output_tokens), 1)
    a = model.total_tokens_per_s(round(low), inp, out)
    b = model.total_tokens_per_s(round(high), inp, out)
    if a <= 0:
        return None
    return float((b / a) ** (1 / math.log2(high / low)))


def gpu_idle(level: LevelFacts) -> list[Evidence]:
    """GPU telemetry of a level that shows the GPU waiting: low power and idle SMs."""
    gpu = level.gpu
    if gpu is None or gpu.power_mean_pct is None:
        return []
    sm = gpu.gpm_sm_util_mean_pct
    if gpu.power_mean_pct > GPU_IDLE_POWER_PCT or (sm is not None and sm > GPU_IDLE_SM_PCT):
        return []
    source = f"telemetry level {level.level}"
    found = [
        Evidence(
            what="GPU power (mean), % of the limit",
            value=fmt(gpu.power_mean_pct),
            unit="%",
            source=source,
        )
    ]
    if sm is not None:
        found.append(
            Evidence(what="SM activity (GPM, mean)", value=fmt(sm), unit="%", source=source)
        )
    if gpu.util_mean_pct is not None:
        found.append(
            Evidence(
                what="NVML utilization (mean)",
                value=fmt(gpu.util_mean_pct),
                unit="%",
                source=source,
            )
        )
    return found


def gpu_busy(level: LevelFacts) -> list[Evidence]:
    """GPU telemetry that shows the GPU working hard (evidence against host overhead)."""
    gpu = level.gpu
    if gpu is None:
        return []
    source = f"telemetry level {level.level}"
    found = []
    if gpu.power_mean_pct is not None and gpu.power_mean_pct >= GPU_BUSY_POWER_PCT:
        found.append(
            Evidence(
                what="GPU power (mean), % of the limit",
                value=fmt(gpu.power_mean_pct),
                unit="%",
                source=source,
                supports=False,
            )
        )
    sm = gpu.gpm_sm_util_mean_pct
    if sm is not None and sm >= GPU_BUSY_SM_PCT:
        found.append(
            Evidence(
                what="SM activity (GPM, mean)",
                value=fmt(sm),
                unit="%",
                source=source,
                supports=False,
            )
        )
    return found


def degraded_links(facts: RunFacts) -> list[Evidence]:
    """Probe verdicts that say GPU-to-GPU copies take a slower path than the links allow."""
    if facts.probe is None:
        return []
    return [
        Evidence(
            what=verdict.title,
            value=verdict.evidence[0] if verdict.evidence else verdict.severity.value,
            source=f"probe verdict {verdict.code}",
        )
        for verdict in facts.probe.verdict(*LINK_VERDICTS)
    ]


def engine_on_cpu(summary: BenchSummary, probe: ProbeDoc | None) -> Evidence | None:
    """Evidence that the engine computes on the CPU: its spec's device, or no GPU here."""
    spec = launched_spec(summary) or {}
    if spec.get("device") == "cpu":
        return Evidence(what="engine device", value="cpu", source="summary.json engine spec")
    if probe is not None and probe.verdict("no-nvidia-gpu"):
        return Evidence(what="GPUs on the machine", value=0, source="probe verdict no-nvidia-gpu")
    return None
