"""The rules, one per module: each reads `RunFacts` and returns its findings (often none).

A rule says what it saw and where, combines independent sources of evidence into its
confidence, and lists the evidence it could not see. None fits thresholds to a case:
each threshold is relative and its reason is written beside it.
"""

from __future__ import annotations

from collections.abc import Callable

from servelab.diagnose.facts import RunFacts
from servelab.diagnose.findings import Finding
from servelab.diagnose.rules import (
    accuracy,
    batch_budget,
    client_bound,
    comm_latency,
    cpu,
    errors,
    graph_batch,
    kv_capacity,
    launch_overhead,
    machine_settings,
    memory_bound,
    moe_config,
    not_saturated,
    prefill_compute,
    prefix_cache,
    quality,
    running_cap,
    slo,
)

__all__ = ["RULES", "Rule"]

Rule = Callable[[RunFacts], list[Finding]]

RULES: tuple[Rule, ...] = (
    errors.rule,
    client_bound.rule,
    cpu.rule,
    running_cap.rule,
    kv_capacity.rule,
    batch_budget.rule,
    launch_overhead.rule,
    graph_batch.rule,
    comm_latency.rule,
    memory_bound.rule,
    prefill_compute.rule,
    prefix_cache.rule,
    moe_config.rule,
    machine_settings.rule,
    accuracy.rule,
    quality.rule,
    slo.rule,
    not_saturated.rule,
)
