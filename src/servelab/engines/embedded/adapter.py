"""The embedded engine: the real `transformers serve --continuous-batching` on a generated model."""

from __future__ import annotations

import os
from pathlib import Path

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.engines.cpu_share import engine_cpu_share
from servelab.engines.embedded._deps import require_local_extra
from servelab.engines.embedded.build import ensure_model, model_dir
from servelab.engines.embedded.cache import (
    CpuCache,
    LoadSizing,
    cache_for,
    cpu_cache_knobs,
    refuse_memory_share,
    size_for_load,
)
from servelab.engines.embedded.presets import DEFAULT_PRESET, EmbeddedPreset, get_preset
from servelab.engines.transformers_serve import (
    TRANSFORMERS_CLI,
    transformers_program,
    transformers_tuning,
)

__all__ = ["SERVER_ENV", "EmbeddedAdapter"]

SERVER_ENV: dict[str, str] = {
    # The transformers CLI asks PyPI for a newer version at start; never wait on that.
    "HF_HUB_DISABLE_UPDATE_CHECK": "1",
    # The model is a local folder: nothing is to be fetched from the Hub.
    "HF_HUB_OFFLINE": "1",
}
"""Environment the server starts with; the spec's own `env` wins over it."""


class EmbeddedAdapter:
    """A preset model generated locally, served by transformers serve with the same Python."""

    name = "embedded"
    description = "transformers serve --continuous-batching on a generated Qwen3-MoE-style model"
    launches = True
    health_path = "/health"
    models_path = "/v1/models"
    metrics_path = None
    cli = TRANSFORMERS_CLI
    # transformers serve answers 422 to ignore_eos and min_tokens; the model has no EOS
    # anyway, so every request already runs to max_tokens.
    pinning_fields: frozenset[str] | None = frozenset()
    has_tokenize: bool | None = False

    def __init__(self, *, cache_dir: Path | None = None) -> None:
        self._cache_dir = cache_dir

    def prepare(self, spec: EngineSpec) -> EngineSpec:
        """Build (or reuse) the preset named by `spec.model` and point the spec at its folder.

        The served name is the folder path: a server pinned to a local folder answers only
        to that exact model string, and lists it in /v1/models.
        """
        preset = get_preset(spec.model or DEFAULT_PRESET)
        require_local_extra(serving=True)
        folder = ensure_model(preset.name, cache_dir=self._cache_dir)
        return _pointed_at(spec, preset, folder)

    def preview(self, spec: EngineSpec) -> EngineSpec:
        """The spec `prepare` would return, without building the model (for `engine check`)."""
        preset = get_preset(spec.model or DEFAULT_PRESET)
        folder = model_dir(preset.name, cache_dir=self._cache_dir)
        return _pointed_at(spec, preset, folder)

    def size_for_load(
        self, spec: EngineSpec, *, concurrency: int | None, input_len: int, output_len: int
    ) -> LoadSizing | None:
        """Before `prepare`, on the CPU: the cache in tokens for this load (see
        `embedded.cache`); None on a GPU, where the engine sizes its own unless the spec sets
        a knob."""
        preset = get_preset(spec.model or DEFAULT_PRESET)
        if (spec.device or preset.device) != "cpu":
            return None
        refuse_memory_share(spec)
        return size_for_load(
            spec, preset, concurrency=concurrency, input_len=input_len, output_len=output_len
        )

    def kv_cache(self, spec: EngineSpec) -> CpuCache | None:
        """The cache a launch of `spec` (before `prepare`) builds on the CPU, by the adapter's
        own numbers; None on a GPU, where the engine sizes it from free memory."""
        preset = get_preset(spec.model or DEFAULT_PRESET)
        resolved = self.preview(spec)
        if resolved.device != "cpu" or resolved.knobs.kv_cache_tokens is None:
            return None
        return cache_for(preset, resolved.knobs.kv_cache_tokens, resolved.knobs.max_batch_tokens)

    def program(self, spec: EngineSpec) -> list[str]:
        return transformers_program(spec)

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        """`transformers serve <folder> --continuous-batching` on host:port, in this interpreter."""
        if spec.model is None or spec.device is None:
            raise ConfigError("embedded spec has no model folder or device; prepare() it first")
        return [
            *self.program(spec),
            spec.model,
            "--continuous-batching",
            "--host",
            host,
            "--port",
            str(port),
            "--device",
            spec.device,
            *transformers_tuning(self.name, spec),
            *spec.extra_args,
        ]


def _pointed_at(spec: EngineSpec, preset: EmbeddedPreset, folder: Path) -> EngineSpec:
    """The spec at its model folder; on the CPU with the cache in tokens (never a share of
    memory): the spec's kv_cache_tokens, else a fixed default that fits a small machine."""
    device = spec.device or preset.device
    if device == "cpu":
        refuse_memory_share(spec)
        spec = cpu_cache_knobs(spec, preset, None)
    return spec.model_copy(
        update={
            "model": str(folder),
            "served_name": str(folder),
            "device": device,
            "env": {**SERVER_ENV, **_cpu_threads(device), **spec.env},
        }
    )


def _cpu_threads(device: str) -> dict[str, str]:
    """On the CPU, leave half the cores this process may use to the load generator
    running beside the engine (engines.cpu_share).

    torch's OpenMP threads spin while they wait; when they compete with the client for
    every core, a step can stall for hundreds of milliseconds (measured on 2 cores: TTFT
    p99 500 ms with 2 threads, 15 ms with 1). A user's own OMP_NUM_THREADS is kept.
    """
    if device != "cpu" or "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(len(engine_cpu_share().engine))}
