"""The plan for one engine's fused-MoE kernel: which file it needs, whether it has it, and
the tuner command that makes it.

Where each engine looks (both read at the commits cited in `naming`):

- vLLM `get_moe_configs`: `$VLLM_TUNED_CONFIG_FOLDER/<file>` first, then the packaged
  `fused_moe/configs/<file>`; when neither exists it logs "Using default MoE config.
  Performance might be sub-optimal! Config file not found at <paths, comma-separated>".
- SGLang `get_moe_configs`: `<dir>/configs/triton_<X_Y_Z>/<file>` for the running Triton
  version, where `<dir>` is `$SGLANG_MOE_CONFIG_DIR` or else the config module's own
  folder (the variable replaces the packaged folder, it does not add to it); then the
  same file under another Triton version's folder (a fallback it warns about); else
  "Using default MoE kernel config. Performance might be sub-optimal! Config file not
  found at <path>, you can create them with <tuning URL>".

Both missing-file lines are servelab's `moe_config_missing` log signature.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.engines.signatures import SIGNATURES, EventKind
from servelab.engines.vllm import EMBEDDED_PREFIX
from servelab.model.configs import ModelConfig, load_config
from servelab.model.presets import ModelPreset, resolve_model
from servelab.tune.kernels.install import USER_FOLDER_ENV, EngineInstall
from servelab.tune.kernels.naming import DTYPES, KernelEngine, config_file_name, device_name
from servelab.tune.kernels.shape import (
    SHARED_FUSION_FAMILIES,
    checkpoint_block_shape,
    checkpoint_dtype,
    moe_shape,
)

__all__ = [
    "AUTO_DTYPE",
    "SGLANG_TUNING_URL",
    "TUNER_DTYPES",
    "TUNER_SCRIPTS",
    "ConfigStatus",
    "KernelPlan",
    "TunerCommand",
    "dtype_choices",
    "kernel_engine",
    "plan_kernels",
]

AUTO_DTYPE = "auto"
"""--dtype auto: the dtype the checkpoint's quantization implies."""
_SIXTEEN_BIT = ("bf16", "fp16")
"""--dtype bf16/fp16: the default, whose file name has no dtype field."""

SGLANG_TUNING_URL = (
    "https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton"
)

TUNER_SCRIPTS: dict[KernelEngine, str] = {
    "vllm": "benchmarks/kernels/benchmark_moe.py",
    "sglang": "benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py",
}
"""Each tuner's path in its engine's source tree."""

TUNER_DTYPES: dict[KernelEngine, tuple[str, ...]] = {
    "vllm": ("fp8_w8a8", "int8_w8a16"),
    "sglang": ("fp8_w8a8", "int8_w8a16", "int8_w8a8", "int4_w4a16"),
}
"""The tuners' `--dtype` choices besides `auto` (benchmark_moe.py at 71acd375;
tuning_fused_moe_triton.py at 00e96592)."""

ConfigStatus = Literal["present", "fallback", "missing", "unchecked"]
_TRITON_DIR = re.compile(r"^triton_(\d+(?:_\d+)*)$")


class TunerCommand(BaseModel):
    """The engine's own tuner, as argv; where it writes its file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    argv: list[str] = Field(description="Without the output folder (see argv_in).")
    script: str
    script_found: bool
    writes_to: Literal["save_dir", "cwd"] = Field(
        description="vLLM writes into --save-dir; SGLang's tuner into its working folder."
    )

    def argv_in(self, folder: Path) -> list[str]:
        """The argv that makes the tuner write its file into `folder` (run there)."""
        if self.writes_to == "save_dir":
            return [*self.argv, "--save-dir", str(folder)]
        return list(self.argv)


class KernelPlan(BaseModel):
    """One engine's fused-MoE config: derived, located, and how to make it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: KernelEngine
    model: str
    family: str
    tp: int
    ep: int
    dp: int
    experts: int = Field(description="E: experts per GPU, fused shared experts included.")
    n: int = Field(description="N: expert intermediate size per GPU.")
    fused_shared_experts: int
    dtype: str | None = Field(description="The name's dtype; None: 16-bit, no dtype field.")
    block_shape: tuple[int, int] | None
    gpu_name: str
    device_name: str
    file_name: str
    config_dir: str | None = Field(description="The packaged configs/ folder checked.")
    triton_version: str | None = Field(description="SGLang: the folder triton_X_Y_Z it reads.")
    searched: list[str] = Field(description="The paths the engine tries, in its order.")
    found: str | None = Field(description="The file it would load, if any.")
    status: ConfigStatus
    user_folder_env: str
    user_folder: str | None = Field(description="The variable's value for this spec, if set.")
    missing_signature: str = Field(description="servelab's log signature of a missing file.")
    signature_name: str
    missing_line: str = Field(description="What the engine logs when the file is missing.")
    tuner: TunerCommand | None
    tuner_unavailable: str | None = Field(description="Why no tuner command, if none.")
    install: EngineInstall | None
    notes: list[str]

    def staged_path(self, root: Path) -> Path:
        """Where the file goes under a folder the user-folder variable points at."""
        if self.engine == "vllm":
            return root / self.file_name
        if self.triton_version is None:
            raise ConfigError("the Triton version is unknown: give --triton-version")
        return root / "configs" / _triton_dir(self.triton_version) / self.file_name

    def with_config(self, spec: EngineSpec, root: Path) -> EngineSpec:
        """`spec` with the user-folder variable pointing at `root`."""
        return spec.model_copy(update={"env": {**spec.env, self.user_folder_env: str(root)}})


def dtype_choices(engine: KernelEngine) -> tuple[str, ...]:
    """What --dtype takes for `engine`."""
    return (AUTO_DTYPE, *_SIXTEEN_BIT, *DTYPES[engine])


def plan_kernels(
    spec: EngineSpec,
    *,
    gpu_name: str,
    dtype: str = AUTO_DTYPE,
    block_shape: tuple[int, int] | None = None,
    install: EngineInstall | None = None,
    config_dir: Path | None = None,
    triton_version: str | None = None,
    tuner_script: Path | None = None,
    model_config: Path | None = None,
) -> KernelPlan:
    """The plan for `spec`'s fused-MoE config on the GPU named `gpu_name`.

    The model is servelab's preset or the checkpoint's config.json (`model_config`, for a
    spec whose model is a hub id); `config_dir` (the packaged configs/ folder to check)
    and `triton_version` override what `install` found; the block shape is the
    checkpoint's unless given.
    """
    engine = kernel_engine(spec.engine)
    if not spec.model:
        raise ConfigError(f"the {engine} spec has no model", hint="a preset or a checkpoint folder")
    checkpoint = model_config or Path(spec.model)
    if model_config is not None:
        model, preset = load_config(model_config), None
    else:
        model, preset = _resolve(spec.model.removeprefix(EMBEDDED_PREFIX))
    notes: list[str] = []
    fusion = "--disable-shared-experts-fusion" not in spec.extra_args
    shape = moe_shape(
        engine, model, tp=spec.tp, ep=spec.ep, dp=spec.dp, shared_experts_fusion=fusion
    )
    chosen = _dtype(engine, dtype, model, notes)
    if chosen is None:
        if block_shape is not None:  # both engines name one only with a quantized dtype
            raise ConfigError("a block shape goes with a quantized --dtype (fp8_w8a8, ...)")
    elif block_shape is None and preset is None:
        block_shape = checkpoint_block_shape(checkpoint)
    elif block_shape is None and model.checkpoint_format == "fp8":
        notes.append("a preset records no block shape: give --block-shape if its FP8 is blockwise")
    device = device_name(engine, gpu_name)
    name = config_file_name(
        engine,
        experts=shape.experts,
        n=shape.n,
        device=device,
        dtype=chosen,
        block_shape=block_shape,
    )
    env_var = USER_FOLDER_ENV[engine]
    user_folder = spec.env.get(env_var) or os.environ.get(env_var) or None
    packaged = config_dir or (Path(install.config_dir) if install and install.config_dir else None)
    triton = triton_version or (install.triton_version if install else None)
    searched, found, status = _locate(engine, name, packaged, user_folder, triton)
    tuner, unavailable = _tuner(
        engine, spec, chosen, shape.fused_shared_experts, model.family, install, tuner_script
    )
    if preset is not None:
        tuner, unavailable = (
            None,
            (
                f"the tuner reads the checkpoint's config.json, and {spec.model!r} is servelab's "
                "preset: give a spec whose model is the checkpoint (a folder or hub id)"
            ),
        )
    if shape.fused_shared_experts:
        notes.append("SGLang fuses the shared expert into the routed experts (E + 1)")
    if engine == "sglang":
        notes.append(
            f"{env_var} replaces the packaged folder: a folder of yours needs every file the "
            "engine should find (staging copies the packaged ones in)"
        )
    if install is not None and install.user_folder_supported is False:
        notes.append(f"the installed {engine} does not read {env_var}")
    return KernelPlan(
        engine=engine,
        model=spec.model,
        family=model.family,
        tp=spec.tp,
        ep=spec.ep,
        dp=spec.dp,
        experts=shape.experts,
        n=shape.n,
        fused_shared_experts=shape.fused_shared_experts,
        dtype=chosen,
        block_shape=block_shape,
        gpu_name=gpu_name,
        device_name=device,
        file_name=name,
        config_dir=str(packaged) if packaged is not None else None,
        triton_version=triton,
        searched=[str(p) for p in searched],
        found=str(found) if found else None,
        status=status,
        user_folder_env=env_var,
        user_folder=user_folder,
        missing_signature=EventKind.MOE_CONFIG_MISSING.value,
        signature_name=_missing_signature(engine),
        missing_line=_missing_line(engine, searched, name),
        tuner=tuner,
        tuner_unavailable=unavailable,
        install=install,
        notes=notes,
    )


def _resolve(name: str) -> tuple[ModelConfig, ModelPreset | None]:
    try:
        return resolve_model(name)
    except ConfigError:
        if Path(name).expanduser().exists():
            raise  # a checkpoint that is there but not readable says why
        raise ConfigError(
            f"model {name!r} is neither a servelab preset nor a local checkpoint",
            hint="for a hub id, give the checkpoint's config.json with --model-config",
        ) from None


def kernel_engine(engine: str) -> KernelEngine:
    """`engine` as one whose fused-MoE kernel reads tuned configs; a ConfigError if not."""
    if engine == "vllm":
        return "vllm"
    if engine == "sglang":
        return "sglang"
    raise ConfigError(
        f"tune kernels works on vllm and sglang specs, not {engine!r}",
        hint="their fused-MoE Triton kernel is the one that reads tuned config files",
    )


def _dtype(engine: KernelEngine, given: str, model: ModelConfig, notes: list[str]) -> str | None:
    """The file's dtype: the checkpoint's for auto, None for 16-bit, else as given."""
    if given == AUTO_DTYPE:
        dtype, note = checkpoint_dtype(model)
        if note:
            notes.append(note)
        return dtype
    if given in _SIXTEEN_BIT:
        return None
    if given not in DTYPES[engine]:
        raise ConfigError(
            f"--dtype {given!r} is not one of {engine}'s", hint=", ".join(dtype_choices(engine))
        )
    return given


def _locate(
    engine: KernelEngine,
    name: str,
    packaged: Path | None,
    user_folder: str | None,
    triton: str | None,
) -> tuple[list[Path], Path | None, ConfigStatus]:
    """The paths the engine tries, the one it would load, and what that means."""
    if engine == "vllm":
        folders = [Path(user_folder)] if user_folder else []
        folders += [packaged] if packaged is not None else []
        searched = [folder / name for folder in folders]
        found = next((p for p in searched if p.is_file()), None)
        if found is None and packaged is None:
            return searched, None, "unchecked"
        return searched, found, "present" if found else "missing"
    configs = Path(user_folder) / "configs" if user_folder else packaged
    if configs is None:
        return [], None, "unchecked"
    others = _triton_folders(configs)
    if triton is None:
        return [folder / name for folder in others], None, "unchecked"
    exact = configs / _triton_dir(triton) / name
    if exact.is_file():
        return [exact], exact, "present"
    tried = [exact, *(f / name for f in others if f.name != exact.parent.name)]
    fallback = next((p for p in tried[1:] if p.is_file()), None)
    return tried, fallback, "fallback" if fallback else "missing"


def _triton_dir(version: str) -> str:
    return f"triton_{version.replace('.', '_')}"


def _triton_folders(configs: Path) -> list[Path]:
    """configs/triton_X_Y_Z/ folders, newest version first (as SGLang's later main tries
    them; 0.5.x tries a fixed list of versions, newest first, among the same names)."""
    if not configs.is_dir():
        return []
    found = [(m, p) for p in configs.iterdir() if p.is_dir() and (m := _TRITON_DIR.match(p.name))]
    found.sort(key=lambda pair: tuple(int(x) for x in pair[0].group(1).split("_")), reverse=True)
    return [p for _, p in found]


def _tuner(
    engine: KernelEngine,
    spec: EngineSpec,
    dtype: str | None,
    fused: int,
    family: str,
    install: EngineInstall | None,
    script: Path | None,
) -> tuple[TunerCommand | None, str | None]:
    """The tuner's argv for this plan, or why it cannot make this file."""
    tuner_dtype = "auto" if dtype in (None, "float32") else dtype
    if tuner_dtype != "auto" and tuner_dtype not in TUNER_DTYPES[engine]:
        choices = ", ".join(("auto", *TUNER_DTYPES[engine]))
        return None, f"{TUNER_SCRIPTS[engine]} --dtype takes {choices}: it cannot tune {dtype}"
    path = str(script) if script else (install.tuner_script if install else None)
    python = (install.python if install else None) or "python"
    argv = [python, path or TUNER_SCRIPTS[engine], "--model", str(spec.model)]
    if engine == "vllm":
        argv += ["--tp-size", str(spec.tp * spec.dp)]
        argv += ["--enable-expert-parallel"] if spec.ep > 1 else []
        argv += ["--dtype", tuner_dtype, "--tune"]
        argv += ["--trust-remote-code"] if "--trust-remote-code" in spec.extra_args else []
    else:
        argv += ["--tp-size", str(spec.tp), "--ep-size", str(spec.ep), "--dtype", tuner_dtype]
        argv += ["--tune"]
        if family in SHARED_FUSION_FAMILIES and not fused:
            # Its tuner adds the shared expert for these models unless told not to.
            argv += ["--disable-shared-experts-fusion"]
    command = TunerCommand(
        argv=argv,
        script=path or TUNER_SCRIPTS[engine],
        script_found=path is not None and Path(path).is_file(),
        writes_to="save_dir" if engine == "vllm" else "cwd",
    )
    return command, None


def _missing_signature(engine: KernelEngine) -> str:
    return next(sig.name for sig in SIGNATURES[engine] if sig.kind is EventKind.MOE_CONFIG_MISSING)


def _missing_line(engine: KernelEngine, searched: list[Path], name: str) -> str:
    """The warning the engine logs without the file (its format string, these paths)."""
    if engine == "vllm":
        paths = ", ".join(str(p) for p in searched) or name
        return (
            "Using default MoE config. Performance might be sub-optimal! "
            f"Config file not found at {paths}"
        )
    path = str(searched[0]) if searched else name
    return (
        "Using default MoE kernel config. Performance might be sub-optimal! "
        f"Config file not found at {path}, you can create them with {SGLANG_TUNING_URL}"
    )
