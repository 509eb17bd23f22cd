"""The run's twin, fitted and replayed under the limits diagnose read (command, log,
server info), with the admission policy of the engine that served it."""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from pathlib import Path

from servelab.core.errors import ConfigError
from servelab.core.units import MS_PER_S
from servelab.diagnose.engineconf import TF_ATTENTION_FLAG, EngineConfig, Setting, knob_engine
from servelab.diagnose.inputs import RunFiles
from servelab.diagnose.modelview import ModelView
from servelab.engines.knobs import flag_value
from servelab.model.calibration import apply_calibration
from servelab.model.perf import step
from servelab.sim.policy import policy_for
from servelab.store import REQUESTS_FILE, SUMMARY_FILE, RunDir
from servelab.twin import EngineLimits, Twin, TwinInputs, TwinResult, fit_twin
from servelab.twin.model import StepFloor
from servelab.twin.padding import KvPadding, padded_position_bytes

__all__ = ["kv_padding", "model_floor", "run_twin", "twin_detail"]


def run_twin(
    files: RunFiles, conf: EngineConfig, model: ModelView | None = None
) -> tuple[Twin | None, str]:
    """The twin, or None with why not; the second item says what it is in one line. With
    the deployment's model, no replayed step is faster than the hardware's own work."""
    engine = knob_engine(files.engine)
    settings: dict[str, Setting[int] | None] = {
        "running_cap": conf.running_cap,
        "kv_capacity_tokens": conf.kv_capacity_tokens,
        "batch_tokens": conf.max_batch_tokens,
    }
    limits = EngineLimits(
        policy=policy_for(engine),
        running_cap=_value(settings["running_cap"]),
        kv_capacity_tokens=_value(settings["kv_capacity_tokens"]),
        batch_tokens=_value(settings["batch_tokens"]),
    )
    sources = {
        name: setting.source if setting is not None else "not known: no limit replayed"
        for name, setting in settings.items()
    }
    try:
        twin = _fitted_once(
            _Keyed(files),
            _stamp(files.path),
            engine,
            limits,
            tuple(sorted(sources.items())),
            _duration_s(files),
        )
    except (ValueError, ConfigError) as exc:
        return None, f"no twin: {exc}"
    if model is not None:
        padding = kv_padding(conf, model, limits.kv_capacity_tokens)
        twin = replace(twin, floor=model_floor(model), kv_padding=padding, _memo={})
    return twin, twin_detail(twin.result)


class _Keyed:
    """The run's files, keyed by their folder alone (the stamp says which state of it)."""

    def __init__(self, files: RunFiles) -> None:
        self.files = files

    def __hash__(self) -> int:
        return hash(self.files.path.resolve())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Keyed) and (
            self.files.path.resolve() == other.files.path.resolve()
        )


@functools.lru_cache(maxsize=8)
def _fitted_once(
    keyed: _Keyed,
    stamp: tuple[tuple[int, int] | None, ...],
    engine: str | None,
    limits: EngineLimits,
    sources: tuple[tuple[str, str], ...],
    duration_s: float | None,
) -> Twin:
    """The run's twin, fitted once per process for one state of its files and limits: a
    tune study fits each trial's in diagnose and again for the forecasts that read it, and
    the fit is most of what either costs."""
    files = keyed.files
    rows = RunDir(files.path).iter_jsonl(REQUESTS_FILE)
    inputs = TwinInputs(files.summary.levels, rows, engine, limits, dict(sources), duration_s)
    return fit_twin(inputs)


def _stamp(path: Path) -> tuple[tuple[int, int] | None, ...]:
    """When and how large the files the fit reads were last written (None: absent)."""
    stamps: list[tuple[int, int] | None] = []
    for name in (SUMMARY_FILE, REQUESTS_FILE):
        try:
            stat = (path / name).stat()
        except OSError:
            stamps.append(None)
            continue
        stamps.append((stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)


def kv_padding(conf: EngineConfig, model: ModelView, pool: int | None) -> KvPadding | None:
    """transformers serve with CUDA graphs and an attention that is not a flash one reads
    its KV padded to the cache's size (`servelab.twin.padding`); None for any other engine,
    or where the pool or the graphs are not known."""
    if knob_engine(conf.name) != "transformers" or pool is None:
        return None
    if conf.cuda_graphs is None or not conf.cuda_graphs.value:
        return None
    if "flash" in (flag_value(conf.command, TF_ATTENTION_FLAG) or ""):
        return None
    deployment = model.deployment
    bandwidth = apply_calibration(deployment.gpu, deployment.calibration)[0]
    seconds = padded_position_bytes(deployment.model) / bandwidth.memory_bandwidth_bytes_s
    return KvPadding(pool=pool, least_ms_per_position=seconds * MS_PER_S / model.time_scale)


def model_floor(model: ModelView) -> StepFloor:
    """A step's least time by the model: its GPU work and its collectives, without the
    model's allowance for the engine's own per-step time (that is what the fit measures).
    Contexts are taken to the nearest 1/16 of a doubling, so a replay asks the model a few
    hundred distinct questions, not one per step."""
    deployment, scale = model.deployment, model.time_scale

    @functools.lru_cache(maxsize=1 << 16)
    def floor_s(decode_batch: int, context_bucket: int, prefill_tokens: int) -> float:
        context = 2 ** (context_bucket / 16) if context_bucket > 0 else 0.0
        breakdown = step(
            deployment,
            decode_batch=decode_batch,
            context_tokens=context,
            prefill_tokens=prefill_tokens,
        )
        return (breakdown.gpu_busy_s + breakdown.communication_s) / scale

    def floor(decode_batch: int, decode_context_tokens: int, prefill_tokens: int) -> float:
        per_request = decode_context_tokens / decode_batch if decode_batch else 0.0
        bucket = round(16 * math.log2(per_request)) if per_request >= 1 else 0
        return floor_s(decode_batch, bucket, prefill_tokens)

    return floor


def twin_detail(twin: TwinResult) -> str:
    """What the twin was fitted from and how closely its replay follows the run."""
    fit = twin.fit
    if fit.source == "requests":
        what = f"fitted from {fit.samples:,} gaps of {fit.requests:,} requests"
    elif fit.source == "end-to-end times":
        what = f"fitted from the end-to-end times of {fit.requests:,} requests"
    else:
        what = f"fitted from {fit.samples} level summaries (no requests.jsonl)"
    worst = []
    for name in ("median_tpot_ms", "median_ttft_ms"):
        errors = [
            (abs(e), lv.load) for lv in twin.levels if (e := lv.metrics[name].error) is not None
        ]
        if errors:
            error, load = max(errors)
            worst.append(
                f"{name.removeprefix('median_').removesuffix('_ms').upper()} "
                f"off by at most {error:.0%} (at {load})"
            )
    replay = "; the replay's median " + ", ".join(worst) if worst else ""
    return f"{what}{replay}; twin.json"


def _duration_s(files: RunFiles) -> float | None:
    """How long each level sent for, where the run set a time (`--duration`)."""
    value = files.summary.run.load.get("duration_s")
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _value(setting: Setting[int] | None) -> int | None:
    return setting.value if setting is not None else None
