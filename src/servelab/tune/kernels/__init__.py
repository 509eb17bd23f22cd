"""`servelab tune kernels`: the fused-MoE config file an engine needs, whether it has it,
and the engine's own tuner to make it, kept only when an A/B run says it is faster.

See docs/TUNE-KERNELS.md for the naming rules and the source files they come from.
"""

from servelab.tune.kernels.accept import (
    MIN_GAIN,
    AbDecision,
    AbResult,
    LevelVerdict,
    ab_test,
    decide,
    decide_runs,
)
from servelab.tune.kernels.flow import KernelTuneResult, WithConfig, tune_kernels
from servelab.tune.kernels.install import (
    USER_FOLDER_ENV,
    EngineInstall,
    engine_python,
    find_install,
    probe_gpu_name,
)
from servelab.tune.kernels.naming import DTYPES, KernelEngine, config_file_name, device_name
from servelab.tune.kernels.plan import (
    AUTO_DTYPE,
    ConfigStatus,
    KernelPlan,
    TunerCommand,
    dtype_choices,
    kernel_engine,
    plan_kernels,
)
from servelab.tune.kernels.run import DEFAULT_TUNER_TIMEOUT_S, TunerRun, run_tuner, stage_config
from servelab.tune.kernels.shape import MoeShape, moe_shape

__all__ = [
    "AUTO_DTYPE",
    "DEFAULT_TUNER_TIMEOUT_S",
    "DTYPES",
    "MIN_GAIN",
    "USER_FOLDER_ENV",
    "AbDecision",
    "AbResult",
    "ConfigStatus",
    "EngineInstall",
    "KernelEngine",
    "KernelPlan",
    "KernelTuneResult",
    "LevelVerdict",
    "MoeShape",
    "TunerCommand",
    "TunerRun",
    "WithConfig",
    "ab_test",
    "config_file_name",
    "decide",
    "decide_runs",
    "device_name",
    "dtype_choices",
    "engine_python",
    "find_install",
    "kernel_engine",
    "moe_shape",
    "plan_kernels",
    "probe_gpu_name",
    "run_tuner",
    "stage_config",
    "tune_kernels",
]
