"""The run's twin, fitted and replayed under the limits diagnose read (command, log,
server info), with the admission policy of the engine that served it."""

from __future__ import annotations

from servelab.core.errors import ConfigError
from servelab.diagnose.engineconf import EngineConfig, Setting, knob_engine
from servelab.diagnose.inputs import RunFiles
from servelab.sim.policy import policy_for
from servelab.store import REQUESTS_FILE, RunDir
from servelab.twin import EngineLimits, Twin, TwinInputs, TwinResult, fit_twin

__all__ = ["run_twin", "twin_detail"]


def run_twin(files: RunFiles, conf: EngineConfig) -> tuple[Twin | None, str]:
    """The twin, or None with why not; the second item says what it is in one line."""
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
    rows = RunDir(files.path).iter_jsonl(REQUESTS_FILE)
    try:
        twin = fit_twin(TwinInputs(files.summary.levels, rows, engine, limits, sources))
    except (ValueError, ConfigError) as exc:
        return None, f"no twin: {exc}"
    return twin, twin_detail(twin.result)


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


def _value(setting: Setting[int] | None) -> int | None:
    return setting.value if setting is not None else None
