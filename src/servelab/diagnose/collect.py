"""From the files of a run directory to the `RunFacts` every rule reads.

Also decides which sources of evidence were there: GPU telemetry, the engine's /metrics,
its log, the probe, the model. A model the run beats by more than measurement noise does
not describe the run (another GPU or model, speculative decoding, a simulator's time
scale not given): it is dropped, with a note, rather than trusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servelab.bench.knee import find_knee
from servelab.bench.results import LevelSummary
from servelab.diagnose.deployment import choose_model
from servelab.diagnose.engineconf import engine_config
from servelab.diagnose.facts import (
    MODEL_FASTER_TOLERANCE,
    LevelFacts,
    RunFacts,
    engine_counts,
    level_facts,
)
from servelab.diagnose.inputs import RunFiles
from servelab.diagnose.modelview import ModelView
from servelab.diagnose.options import DiagnoseOptions

__all__ = ["collect_facts"]

_CAPACITY_METRIC = "sglang:max_total_num_tokens"
_PREEMPTION_METRIC = "vllm:num_preemptions_total"


def collect_facts(files: RunFiles, options: DiagnoseOptions) -> RunFacts:
    """The facts of one run; a ConfigError only for a deployment the user gave that fails."""
    summary = files.summary
    command = (summary.engine or {}).get("command")
    conf = engine_config(files.engine, command if isinstance(command, list) else [], files.events)
    choice = choose_model(files, options, conf)
    missing = _missing(files)
    notes = list(choice.notes)
    model = choice.view
    if model is None:
        missing["model"] = choice.detail
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
    )


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
    return missing
