"""Where an engine is installed, asked of the engine's own interpreter without importing it;
and the GPU the config is for.

The config folder is a fixed place inside the package (vLLM:
vllm/model_executor/layers/fused_moe/configs/; SGLang 0.5.x:
sglang/srt/layers/moe/fused_moe_triton/configs/, on later main
sglang/srt/layers/moe/moe_runner/triton_utils/configs/, each holding one triton_X_Y_Z/
folder per Triton version). The interpreter only locates the package (importlib's
find_spec runs none of its code) and reads installed versions from metadata, so this
works on a machine without a GPU. The tuners are not in either wheel: they live in the
source tree (vLLM benchmarks/kernels/benchmark_moe.py, SGLang
benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py) and are found only beside a
source checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from servelab.engines.base import EngineSpec
from servelab.engines.vllm import script_interpreter
from servelab.tune.kernels.naming import KernelEngine

__all__ = [
    "PROBE_TIMEOUT_S",
    "USER_FOLDER_ENV",
    "EngineInstall",
    "engine_python",
    "find_install",
    "probe_gpu_name",
]

PROBE_TIMEOUT_S = 30.0

USER_FOLDER_ENV: dict[KernelEngine, str] = {
    "vllm": "VLLM_TUNED_CONFIG_FOLDER",
    "sglang": "SGLANG_MOE_CONFIG_DIR",
}
"""The variable that points each engine at a folder of configs of the user's (vllm/envs.py;
SGLang's get_moe_configs)."""

_SGLANG_CONFIG_MODULES = (
    "srt/layers/moe/fused_moe_triton",
    "srt/layers/moe/moe_runner/triton_utils",
)
_CONFIG_MODULE = "fused_moe_triton_config.py"
_TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm")

# Run by the engine's interpreter: locate the package, read versions; import nothing of it.
_PROBE = """
import importlib.metadata as m, importlib.util as u, json, sys
def version(*names):
    for name in names:
        try:
            return m.version(name)
        except m.PackageNotFoundError:
            pass
found = u.find_spec(sys.argv[1])
where = list(found.submodule_search_locations or []) if found else []
print(json.dumps({
    "package_dir": where[0] if where else None,
    "version": version(sys.argv[1], sys.argv[1] + "-cpu"),
    "triton_version": version(*sys.argv[2:]),
}))
"""


class EngineInstall(BaseModel):
    """What the engine's interpreter has: the package, its config folder, its Triton."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: KernelEngine
    python: str | None = Field(description="The interpreter asked; None when none was found.")
    installed: bool
    reason: str | None = Field(default=None, description="Why it is not installed, or unknown.")
    version: str | None = None
    package_dir: str | None = None
    config_dir: str | None = Field(
        default=None,
        description="The packaged configs/ folder (SGLang: the one holding triton_X_Y_Z/).",
    )
    triton_version: str | None = None
    user_folder_supported: bool | None = Field(
        default=None,
        description="Whether the installed source reads the user-folder variable; None: "
        "its source file was not found.",
    )
    tuner_script: str | None = Field(
        default=None, description="The engine's tuner, when the package sits in a checkout."
    )


def engine_python(spec: EngineSpec) -> str | None:
    """The interpreter the spec's engine runs in: `options.python`; for vLLM else the one on
    the `#!` line of its program (`options.executable`, default `vllm` on PATH); for SGLang
    else this one, as its adapter does."""
    python = spec.options.get("python")
    if python is not None:
        return str(python)
    if spec.engine == "vllm":
        return script_interpreter(str(spec.options.get("executable", "vllm")))
    return sys.executable


def find_install(
    engine: KernelEngine, python: str | None, *, env: Mapping[str, str] | None = None
) -> EngineInstall:
    """Ask `python` (with `env` over this environment) where `engine` is installed."""
    if python is None:
        return EngineInstall(
            engine=engine, python=None, installed=False, reason=f"no {engine} program on PATH"
        )
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, engine, *_TRITON_DISTRIBUTIONS],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={**os.environ, **(env or {})},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return EngineInstall(
            engine=engine, python=python, installed=False, reason=f"cannot run {python}: {exc}"
        )
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return EngineInstall(
            engine=engine, python=python, installed=False, reason=f"{python} failed: {last}"
        )
    if not found.get("package_dir"):
        return EngineInstall(
            engine=engine, python=python, installed=False, reason=f"{engine} is not importable"
        )
    package = Path(found["package_dir"])
    module_dir = _config_module_dir(engine, package)
    return EngineInstall(
        engine=engine,
        python=python,
        installed=True,
        version=found.get("version"),
        package_dir=str(package),
        config_dir=str(module_dir / "configs"),
        triton_version=found.get("triton_version"),
        user_folder_supported=_reads_user_folder(engine, package, module_dir),
        tuner_script=_tuner_script(engine, package),
    )


def probe_gpu_name() -> str | None:
    """The first GPU's NVML name ("NVIDIA H200"), which is what torch.cuda.get_device_name
    reports to both engines; None on a machine without an NVIDIA GPU."""
    from servelab.probe.collect import run_probe

    report = run_probe()
    gpus = report.gpus.gpus if report.gpus is not None else []
    return gpus[0].name if gpus and gpus[0].name else None


def _config_module_dir(engine: KernelEngine, package: Path) -> Path:
    """The folder whose configs/ the engine reads (the config module's own folder)."""
    if engine == "vllm":
        return package / "model_executor/layers/fused_moe"
    candidates = [package / sub for sub in _SGLANG_CONFIG_MODULES]
    for folder in candidates:
        if (folder / _CONFIG_MODULE).is_file():
            return folder
    return next((f for f in candidates if (f / "configs").is_dir()), candidates[0])


def _reads_user_folder(engine: KernelEngine, package: Path, module_dir: Path) -> bool | None:
    source = package / "envs.py" if engine == "vllm" else module_dir / _CONFIG_MODULE
    try:
        return USER_FOLDER_ENV[engine] in source.read_text(errors="replace")
    except OSError:
        return None


def _tuner_script(engine: KernelEngine, package: Path) -> str | None:
    if engine == "vllm":
        script = package.parent / "benchmarks/kernels/benchmark_moe.py"
    else:  # <checkout>/python/sglang
        script = (
            package.parent.parent / "benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py"
        )
    return str(script) if script.is_file() else None
