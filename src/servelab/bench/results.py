"""Typed results of a benchmark: one summary per load level, and the run around them.

Field names follow SGLang `bench_serving`'s result keys where one exists, so results
line up with theirs; every field's definition is in its description and in
docs/METRICS.md (a test checks the two agree).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.bench.capacity_results import CapacityResult
from servelab.bench.cost_results import LevelCost, Price
from servelab.bench.prefix import PrefixCacheLevel
from servelab.bench.quality.results import QualityBlock
from servelab.bench.turns import TurnStats
from servelab.engines.server_info import ServerInfo
from servelab.telemetry.process_cpu import EngineCpu
from servelab.telemetry.summary import LevelTelemetry

__all__ = [
    "SCHEMA",
    "BenchSummary",
    "ClientNode",
    "ClientStats",
    "InputTokenSource",
    "LevelSummary",
    "RunInfo",
    "RunStatus",
    "StopReason",
    "SweepStop",
]

SCHEMA = "servelab.bench/1"

InputTokenSource = Literal["usage", "workload", "mixed"]
RunStatus = Literal["running", "complete", "interrupted", "failed"]

_STAT_NAMES = {"mean": "mean", "median": "median", "std": "standard deviation"}
_ABSENT = " None in an imported run whose file lacks it."
"""Said by each field a peer's result file may not give (bench.peers); servelab's own
bench always sets them."""


def _stat(stat: str, metric: str) -> str:
    return f"{_STAT_NAMES.get(stat, stat)} of {metric}, over completed requests, in ms."


class ClientNode(BaseModel):
    """One node of a Ray cluster the client ran on (`--cluster`), over one level."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field(description="Ray's node id, its first 8 hex digits.")
    address: str = Field(description="The node's IP address, as Ray reports it.")
    workers: int = Field(description="Client workers (Ray actors) that ran on the node.")
    requests: int = Field(
        description="Measured requests its workers sent (warm-up excluded), lost ones included."
    )
    clock_offset_ms: float = Field(
        description="The node's monotonic clock minus the driver's, measured by round trips "
        "before the level (the sample with the shortest round trip), in ms; the node's "
        "stamps were moved onto the driver's clock by it."
    )
    clock_error_ms: float = Field(
        description="Half that sample's round trip, in ms: the true offset lies within "
        "clock_offset_ms ± this."
    )
    p99_schedule_lag_ms: float = Field(description="p99 schedule lag of its requests, in ms.")
    p99_loop_lag_ms: float = Field(description="p99 event-loop lag, its worst worker, in ms.")
    max_cpu_pct: float = Field(description="CPU use of its busiest worker, in % of a core.")
    lost: bool = Field(
        description="True when the node (or one of its workers) was lost during the level."
    )


class ClientStats(BaseModel):
    """How hard the load generator itself worked during one level."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(description="Client worker processes that sent this level.")
    p99_schedule_lag_ms: float = Field(
        description="p99 of t_send - t_scheduled, less time spent opening connections: how "
        "late requests left the client, in ms."
    )
    max_schedule_lag_ms: float = Field(description="Largest schedule lag of the level, in ms.")
    p99_loop_lag_ms: float = Field(
        description="p99 event-loop lag (how long a callback made ready waits to run, "
        "sampled every 10 ms), worst worker, in ms."
    )
    max_loop_lag_ms: float | None = Field(
        default=None,
        description="Largest event-loop lag of any worker during the level, in ms "
        "(None in runs from before it was measured).",
    )
    max_cpu_pct: float = Field(
        description="CPU time / wall time of the busiest worker from its first send to its "
        "last completion, in % of a core."
    )
    max_cpu_demand_pct: float | None = Field(
        default=None,
        description="The share of a core the most demanding worker wanted over the same "
        "span, in %: its CPU time, plus its time waiting for a core where most of its "
        "context switches were involuntary (it lost the core with work left); max_cpu_pct "
        "is what it got (they part when another program shares its core). None in runs "
        "from before it was measured.",
    )
    client_bound: bool = Field(
        description="True when the client's lag was material against what it measured: a "
        "p99 loop or schedule lag over 10% of the median ITL (open loop: of the mean "
        "inter-arrival gap), a single lag over the median ITL, or a worker that wanted over "
        "90% of a core; on a cluster, each node judged on its own, and a node's clock offset known "
        "only to more than 10% of the median ITL. The client may have limited the "
        "measurement."
    )
    client_bound_reason: str | None = Field(
        default=None,
        description="Which of those rules fired, with the numbers (and the node, on a "
        "cluster); None when none did.",
    )
    nodes: list[ClientNode] | None = Field(
        default=None,
        description="On a Ray cluster (`--cluster`): each node's workers, requests, clock "
        "offset and lag; None on one host.",
    )
    degraded: bool = Field(
        default=False,
        description="True when a client node was lost during the level: its in-flight "
        "requests are recorded client_lost and the rest of the level ran without it.",
    )


class LevelSummary(BaseModel):
    """Everything measured at one load level (one concurrency or one request rate)."""

    model_config = ConfigDict(extra="forbid")

    level: int = Field(description="Position of this level in the sweep, from 0.")
    load_mode: Literal["concurrency", "request_rate"] = Field(
        description="Closed loop (a fixed number of requests in flight) or open loop (arrivals)."
    )
    max_concurrency: int | None = Field(
        description="Closed loop: requests kept in flight. None in open loop."
    )
    request_rate: float | None = Field(
        description="Open loop: mean arrival rate in requests/s. None in closed loop."
    )
    burstiness: float | None = Field(
        description="Open loop: gamma shape of inter-arrival times (1.0 = Poisson)."
    )
    num_requests: int | None = Field(
        default=None,
        description="Measured requests sent (warm-up excluded)." + _ABSENT,
    )
    warmup_requests: int | None = Field(
        default=None,
        description="Warm-up requests sent before the level, excluded." + _ABSENT,
    )
    interrupted: bool = Field(description="True when the level was cut short by Ctrl-C.")
    completed: int | None = Field(
        default=None, description="Requests that finished with generated text." + _ABSENT
    )
    failed: int | None = Field(
        default=None, description="Requests that failed, all kinds together." + _ABSENT
    )
    cancelled: int = Field(description="Requests still in flight when the run was interrupted.")
    errors: dict[str, int] = Field(description="Failed requests by kind (http, timeout, ...).")
    error_examples: dict[str, str] = Field(
        description="The first error message seen for each kind of failure."
    )
    duration: float = Field(
        description="First measured t_send to last measured completion, in s (warm-up excluded)."
    )
    total_input_tokens: int = Field(
        description="Prompt tokens of completed requests: the server's usage.prompt_tokens, "
        "else the workload's count."
    )
    total_output_tokens: int = Field(
        description="Output tokens of completed requests: usage.completion_tokens, else a "
        "local tokenizer's count, else the number of text chunks."
    )
    input_token_source: InputTokenSource | None = Field(
        default=None, description="Where total_input_tokens came from." + _ABSENT
    )
    output_tokens_estimated: bool = Field(
        description="True when some output counts are text-chunk counts (no usage, no tokenizer)."
    )
    chunk_tokens_estimated: bool | None = Field(
        default=None,
        description="True when some request's output tokens differ from its text chunks, so "
        "the tokens each chunk carried (for ITL and the peak bucket) were shared out "
        "(None in runs from before it was recorded).",
    )
    request_throughput: float | None = Field(
        default=None, description="completed / duration, in requests/s." + _ABSENT
    )
    input_throughput: float | None = Field(
        default=None, description="total_input_tokens / duration, in tokens/s." + _ABSENT
    )
    output_throughput: float = Field(description="total_output_tokens / duration, in tokens/s.")
    total_throughput: float | None = Field(
        default=None,
        description="(total_input_tokens + total_output_tokens) / duration, in tokens/s." + _ABSENT,
    )
    mean_ttft_ms: float | None = Field(description=_stat("mean", "TTFT"))
    median_ttft_ms: float | None = Field(description=_stat("median", "TTFT"))
    std_ttft_ms: float | None = Field(description=_stat("std", "TTFT"))
    p90_ttft_ms: float | None = Field(description=_stat("p90", "TTFT"))
    p95_ttft_ms: float | None = Field(description=_stat("p95", "TTFT"))
    p99_ttft_ms: float | None = Field(description=_stat("p99", "TTFT"))
    mean_tpot_ms: float | None = Field(description=_stat("mean", "TPOT"))
    median_tpot_ms: float | None = Field(description=_stat("median", "TPOT"))
    std_tpot_ms: float | None = Field(description=_stat("std", "TPOT"))
    p90_tpot_ms: float | None = Field(description=_stat("p90", "TPOT"))
    p95_tpot_ms: float | None = Field(description=_stat("p95", "TPOT"))
    p99_tpot_ms: float | None = Field(description=_stat("p99", "TPOT"))
    mean_itl_ms: float | None = Field(description=_stat("mean", "ITL (per token)"))
    median_itl_ms: float | None = Field(description=_stat("median", "ITL (per token)"))
    std_itl_ms: float | None = Field(description=_stat("std", "ITL (per token)"))
    p90_itl_ms: float | None = Field(description=_stat("p90", "ITL (per token)"))
    p95_itl_ms: float | None = Field(description=_stat("p95", "ITL (per token)"))
    p99_itl_ms: float | None = Field(description=_stat("p99", "ITL (per token)"))
    mean_e2e_latency_ms: float | None = Field(description=_stat("mean", "E2E latency"))
    median_e2e_latency_ms: float | None = Field(description=_stat("median", "E2E latency"))
    std_e2e_latency_ms: float | None = Field(description=_stat("std", "E2E latency"))
    p90_e2e_latency_ms: float | None = Field(description=_stat("p90", "E2E latency"))
    p95_e2e_latency_ms: float | None = Field(description=_stat("p95", "E2E latency"))
    p99_e2e_latency_ms: float | None = Field(description=_stat("p99", "E2E latency"))
    concurrency: float | None = Field(
        default=None,
        description="Mean requests in flight by Little's law: sum of E2E / duration." + _ABSENT,
    )
    max_concurrent_requests: int | None = Field(
        default=None,
        description="Most requests in flight at one instant, from an exact sweep of intervals."
        + _ABSENT,
    )
    max_output_tokens_per_s: float | None = Field(
        default=None,
        description="Most output tokens arriving within one 1-second bucket, buckets counted "
        "from the level's first measured send." + _ABSENT,
    )
    single_stream_tok_s: float | None = Field(
        description="Closed loop at concurrency 1 only: mean of output tokens / E2E, in tokens/s."
    )
    slo_ms: dict[str, float] | None = Field(description="The SLOs goodput was judged against.")
    request_goodput: float | None = Field(
        description="Requests meeting every SLO per second of duration, in requests/s."
    )
    good_fraction: float | None = Field(
        description="Requests meeting every SLO / (completed + failed); an unknown value "
        "fails its SLO. None when nothing was attempted."
    )
    client: ClientStats | None = Field(
        default=None, description="The load generator's own lag and CPU use." + _ABSENT
    )
    telemetry: LevelTelemetry | None = Field(
        default=None,
        description="The GPUs (NVML: power, utilization, clocks, energy, GPM) and the "
        "engine's /metrics (running, queued, KV usage) over the level, on the bench clock; "
        "None when neither was sampled.",
    )
    prefix_cache: PrefixCacheLevel | None = Field(
        default=None,
        description="The prefix cache over the level: the workload's ideal hit rate (its "
        "repeated prefixes in whole blocks) and the engine's measured one (its counters' "
        "growth over the level). None when no request completed.",
    )
    turns: list[TurnStats] | None = Field(
        default=None,
        description="A conversation level's statistics by turn index (TTFT of turn 5 "
        "against turn 1 is what the prefix cache changes). None outside conversations.",
    )
    engine_cpu: EngineCpu | None = Field(
        default=None,
        description="Cores the launched engine's processes kept busy during the level; None "
        "for an engine servelab did not launch.",
    )
    cost: LevelCost | None = Field(
        default=None,
        description="USD per million tokens at the run's price, and J per token and tok/s "
        "per MW from the sampled GPU power (bench.cost); each part None with its reason "
        "where no price was given or no power sampled. None in runs from before it was "
        "recorded.",
    )
    quality_probes: int | None = Field(
        default=None,
        description="`--quality`: probes of the quality probe's loaded pass answered beside "
        "this level's measured requests, through the probe's own client: in none of the "
        "level's counts or metrics (quality.json's loaded_level names this level). None when "
        "no pass ran beside it.",
    )
    notes: list[str] = Field(default_factory=list, description="Caveats about this level.")


StopReason = Literal[
    "knee", "errors", "slo", "kv", "max", "levels", "behind", "capacity", "client_lost"
]


class SweepStop(BaseModel):
    """Why a sweep ended where it did."""

    model_config = ConfigDict(extra="forbid")

    reason: StopReason = Field(
        description="knee, errors, slo, kv, max, levels (all run), behind (a tuning trial "
        "stopped early, below the best trial so far), capacity (the capacity search has "
        "its answer), or client_lost (a client node was lost and --on-node-loss stop)."
    )
    level: int | None = Field(description="The level that ended it; None when all ran.")
    explanation: str


class RunInfo(BaseModel):
    """What was run, where, and with which software."""

    model_config = ConfigDict(extra="forbid")

    name: str
    command: list[str]
    started_utc: str
    servelab_version: str
    versions: dict[str, str]
    git_sha: str | None
    host: dict[str, str | int]
    target: dict[str, str | bool | list[str] | None]
    workload: dict[str, str | int | float | bool | None]
    load: dict[str, str | int | float | list[float] | None]
    notes: list[str] = Field(default_factory=list)
    applies: str | None = Field(
        default=None,
        description="RUN_DIR:KIND: the earlier run's finding whose action this run tries; "
        "diagnose checks that finding's expected gain against this run.",
    )
    server_info: ServerInfo | None = Field(
        default=None,
        description="What the engine reported about its settings at the preflight (its "
        "models' max_model_len, SGLang's server args), each with its URL; None in runs "
        "from before it was read and in imported runs.",
    )


class BenchSummary(BaseModel):
    """The document written to summary.json and printed by --json."""

    model_config = ConfigDict(extra="forbid")

    schema_: str = Field(default=SCHEMA, alias="schema")
    status: RunStatus
    run: RunInfo
    levels: list[LevelSummary]
    engine: dict[str, str | int | list[str] | dict[str, Any] | None] | None = Field(
        default=None,
        description="The launched engine: its command, spec and log; `cpu_share`, where its "
        "adapter set one, the cores and priorities it left the load generator.",
    )
    failure: str | None = Field(
        default=None, description="Why the run failed (status 'failed'), in one line."
    )
    sweep_stop: SweepStop | None = Field(
        default=None, description="Why the sweep ended where it did (run's stop rules)."
    )
    capacity: CapacityResult | None = Field(
        default=None,
        description="`run --capacity`: the highest load that meets the SLO, and the search's "
        "levels with their verdicts; None for other sweeps.",
    )
    price: Price | None = Field(
        default=None,
        description="What the deployment costs an hour (--gpu-hour-price x its GPUs, or "
        "--machine-hour-price), with where the price and the GPU count came from; None when "
        "no price was given.",
    )
    quality: QualityBlock | None = Field(
        default=None,
        description="`--quality`: each comparison's verdict and primary metric, the quality "
        "errors and the probe's time (the whole result is quality.json); None when not probed.",
    )
