"""From the files of a run directory to the `RunFacts` every rule reads.

Also decides which sources of evidence were there: GPU telemetry, the engine's /metrics,
its log, the probe, the model. A model the run beats by more than measurement noise does
not describe the run (another GPU or model, speculative decoding, a simulator's time
scale not given): it is dropped, with a note, rather than trusted.

A memory share the run configured (the command's flag, the share the engine's log
resolved, or the spec's `mem_fraction` knob) goes to the model, which then sizes the KV
cache by that engine's rule; the probe, when it was taken before the launch, gives the
GPU's measured memory and what was already in use. An engine on the CPU has no share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from servelab.bench.knee import find_knee
from servelab.bench.results import BenchSummary, LevelSummary
from servelab.diagnose.deployment import choose_model, launched_spec
from servelab.diagnose.engineconf import EngineConfig, Setting, engine_config, knob_engine
from servelab.diagnose.facts import (
    MODEL_FASTER_TOLERANCE,
    LevelFacts,
    RunFacts,
    engine_counts,
    level_facts,
)
from servelab.diagnose.inputs import RunFiles
from servelab.diagnose.modelview import MemoryShare, ModelView
from servelab.diagnose.options import DiagnoseOptions
from servelab.diagnose.server_settings import settings_from_server_info
from servelab.diagnose.signals import engine_on_cpu
from servelab.model.configured_cache import SHARE_ENGINES, TRANSFORMERS_BATCH_TOKENS

__all__ = ["collect_facts"]

_CAPACITY_METRIC = "sglang:max_total_num_tokens"
_PREEMPTION_METRIC = "vllm:num_preemptions_total"
_SHARE_LOG_FIELDS = ("gpu_memory_utilization", "mem_fraction_static")
"""The log's names for the share (vLLM's non-default args, SGLang's server args)."""


def collect_facts(files: RunFiles, options: DiagnoseOptions) -> RunFacts:
    """The facts of one run; a ConfigError only for a deployment the user gave that fails."""
    summary = files.summary
    command = (summary.engine or {}).get("command")
    conf = engine_config(
        files.engine,
        command if isinstance(command, list) else [],
        files.events,
        _reported(summary),
    )
    choice = choose_model(files, options, conf)
    missing = _missing(files)
    notes = list(choice.notes)
    model = choice.view
    if model is None:
        missing["model"] = choice.detail
    else:
        model = dataclasses.replace(model, share=_memory_share(files, conf))
    levels = _levels(files, conf.running_cap.value if conf.running_cap else None, model)
    faster = [lv for lv in levels if lv.ratio is not None and lv.ratio < MODEL_FASTER_TOLERANCE]
    if model is not None and faster:
        worst = min(faster, key=lambda lv: lv.ratio or 1.0)
        detail = (
            f"the run is faster than {choice.detail} allows ({worst.ratio:.2f}x its TPOT at "
            f"{worst.label}): the model does not describe this deployment (a simulator's "
            "--time-scale, another GPU or model, speculative decoding)"
        )
        notes.append(detail)
        missing["model"] = detail
        model = None
        levels = _levels(files, conf.running_cap.value if conf.running_cap else None, None)
    return RunFacts(
        summary=summary,
        levels=levels,
        knee=find_knee(summary.levels),
        engine=conf,
        events=files.events,
        probe=files.probe,
        model=model,
        missing=missing,
        notes=notes,
        model_detail=choice.detail if model is not None else missing["model"],
        traces=files.traces,
        quality=files.quality,
    )


def _memory_share(files: RunFiles, conf: EngineConfig) -> MemoryShare | None:
    """The share the run configured, by the engine's rule; None without one, for an engine
    whose rule is unknown, or on the CPU."""
    rule = knob_engine(conf.name)
    if rule not in SHARE_ENGINES or engine_on_cpu(files.summary, files.probe) is not None:
        return None
    spec = launched_spec(files.summary) or {}
    setting = _share_setting(conf, spec)
    if setting is None:
        return None
    total, in_use = _probe_memory(files)
    flash = _flash_attention(conf)
    logged_async = conf.resolved.get("use_async_batching")
    graphs = conf.cuda_graphs is not None and conf.cuda_graphs.value
    batch = conf.max_batch_tokens
    return MemoryShare(
        engine=rule,
        value=setting.value,
        source=setting.source,
        total_bytes=total,
        in_use_bytes=in_use,
        batch_tokens=batch.value if batch is not None else TRANSFORMERS_BATCH_TOKENS,
        flash_attention=flash,
        async_batching=logged_async.value is True if logged_async else graphs and flash,
    )


def _share_setting(conf: EngineConfig, spec: dict[str, Any]) -> Setting[float] | None:
    """The command's share flag, else the share the log resolved, else the spec's knob."""
    candidates = [conf.resolved.get(name) for name in ("mem_fraction", *_SHARE_LOG_FIELDS)]
    knobs = spec.get("knobs")
    if isinstance(knobs, dict) and knobs.get("mem_fraction") is not None:
        candidates.append(
            Setting(knobs["mem_fraction"], "summary.json engine spec: knobs.mem_fraction")
        )
    for candidate in candidates:
        share = _fraction(candidate.value) if candidate is not None else None
        if candidate is not None and share is not None:
            return Setting(share, candidate.source)
    return None


def _fraction(value: Any) -> float | None:
    """A share in (0, 1] from a setting's value (the command's is text)."""
    try:
        share = float(value)
    except (TypeError, ValueError):
        return None
    return share if 0 < share <= 1 else None


def _flash_attention(conf: EngineConfig) -> bool:
    """Whether transformers ran a flash attention (no masks): the command's implementation,
    else its log's advice to use one, else its default (sdpa)."""
    backend = conf.resolved.get("attention_backend")
    if backend is not None:
        return "flash" in str(backend.value)
    logged = conf.resolved.get("flash_attention")
    return logged is not None and logged.value is True


def _probe_memory(files: RunFiles) -> tuple[float | None, float]:
    """The GPUs' least total memory and most memory in use, from the probe; what was in
    use counts only from a probe taken before a launched engine's run (an attached engine,
    or a later probe, would count the engine itself)."""
    if files.probe is None:
        return None, 0.0
    gpus = (files.probe.document.get("gpus") or {}).get("gpus") or []
    totals = [g["memory_total_bytes"] for g in gpus if g.get("memory_total_bytes")]
    used = [g["memory_used_bytes"] for g in gpus if g.get("memory_used_bytes") is not None]
    launched = bool((files.summary.engine or {}).get("command"))
    before = _before(files.probe.document.get("created_utc"), files.summary.run.started_utc)
    in_use = float(max(used)) if used and launched and before else 0.0
    return (float(min(totals)) if totals else None), in_use


def _before(probed: Any, started: str) -> bool:
    try:
        return datetime.fromisoformat(str(probed)) <= datetime.fromisoformat(started)
    except ValueError:
        return False


def _levels(files: RunFiles, cap: int | None, model: ModelView | None) -> list[LevelFacts]:
    summary = files.summary
    return [
        level_facts(
            level,
            workload=dict(summary.run.workload),
            running_cap=cap,
            raw=_raw(files.metric_rows, level),
            model=model,
        )
        for level in summary.levels
    ]


def _raw(rows: Sequence[dict[str, Any]], level: LevelSummary) -> dict[str, float | None]:
    """KV capacity and preemptions, which only metrics.jsonl's raw families hold."""
    telemetry = level.telemetry
    if telemetry is None or not rows:
        return {}
    inside = [r for r in rows if telemetry.t_start_ns <= r.get("t_ns", -1) <= telemetry.t_end_ns]
    capacity = [v for r in inside if (v := _family(r, _CAPACITY_METRIC)) is not None]
    preempted = [v for r in inside if (v := _family(r, _PREEMPTION_METRIC)) is not None]
    return {
        "kv_capacity_tokens": max(capacity) if capacity and max(capacity) > 0 else None,
        "preemptions": preempted[-1] - preempted[0] if len(preempted) >= 2 else None,
    }


def _family(row: dict[str, Any], name: str) -> float | None:
    """A raw family's value summed over its label sets (data-parallel ranks)."""
    samples = (row.get("raw") or {}).get(name)
    if not samples:
        return None
    return float(sum(value for _labels, value in samples))


def _missing(files: RunFiles) -> dict[str, str]:
    """Why each optional source of evidence is absent (only the absent ones)."""
    missing: dict[str, str] = {}
    levels = [lv for lv in files.summary.levels if lv.completed]
    gpu = [lv.telemetry.gpu for lv in levels if lv.telemetry is not None]
    if not any(g.available for g in gpu):
        reason = next((g.reason for g in gpu if g.reason), None)
        missing["gpu"] = reason or "no GPU telemetry: run the bench with --gpus"
    engine = [lv.telemetry.engine for lv in levels if lv.telemetry is not None]
    counted = [engine_counts(lv.telemetry) for lv in levels]
    if not any(counts for counts, _ in counted):
        reason = next((why for _, why in counted if why), None)
        reason = reason or next((e.reason for e in engine if e.reason), None)
        missing["metrics"] = reason or "no engine /metrics were scraped"
    if files.events is None:
        missing["log"] = files.events_source
    if files.probe is None:
        missing["probe"] = files.probe_source
    if files.quality is None:
        missing["quality"] = files.quality_source
    return missing


def _reported(summary: BenchSummary) -> dict[str, tuple[Any, str]]:
    """What the engine said about its settings at the bench's preflight, for the run's
    target model."""
    info = summary.run.server_info
    if info is None:
        return {}
    target = summary.run.target.get("model")
    return settings_from_server_info(info, model=target if isinstance(target, str) else None)
