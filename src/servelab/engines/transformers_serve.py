"""transformers serve: any model, with continuous batching, and its knobs.

Flags checked against transformers 5.24.0 (src/transformers/cli/serve.py, a Typer
command). It serves one model on one device: no parallel layout, no running-request
cap, no prefix cache, no KV cache dtype. The `--cb-*` flags configure its continuous
batching, which servelab always turns on.
"""

from __future__ import annotations

import sys

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.engines.flagcheck import CliFlags
from servelab.engines.knobs import FlagRule, map_knobs, map_layout, switch, value

__all__ = [
    "KNOB_FLAGS",
    "TRANSFORMERS_CLI",
    "TransformersAdapter",
    "transformers_program",
    "transformers_tuning",
]

KNOB_FLAGS: dict[str, FlagRule] = {
    "cuda_graphs": switch(on=["--cb-use-cuda-graph"], off=["--no-cb-use-cuda-graph"]),
    "mem_fraction": value("--cb-max-memory-percent"),
    "quantization": value("--quantization"),
    "attention_backend": value("--attn-implementation"),
    "max_batch_tokens": value("--cb-max-batch-tokens"),
}

_LAYOUT_HINT = "transformers serve runs one model on one device"
_HINTS = dict.fromkeys(("tp", "pp", "ep", "dp"), _LAYOUT_HINT)

TRANSFORMERS_CLI = CliFlags(recorded="transformers-5.24.0.txt")


def transformers_program(spec: EngineSpec) -> list[str]:
    """`transformers serve` in `options.python` (default: this interpreter)."""
    python = str(spec.options.get("python", sys.executable))
    return [python, "-m", "transformers.cli.transformers", "serve"]


def transformers_tuning(engine: str, spec: EngineSpec) -> list[str]:
    """The layout (none may be set) and knobs of `spec` as transformers serve flags."""
    return map_layout(engine, spec, {}, hints=_HINTS) + map_knobs(engine, spec, KNOB_FLAGS)


class TransformersAdapter:
    """`transformers serve MODEL --continuous-batching` on any local or cached model."""

    name = "transformers"
    description = "transformers serve --continuous-batching"
    launches = True
    health_path = "/health"
    models_path = "/v1/models"
    metrics_path = None
    # It answers 422 to ignore_eos and min_tokens.
    pinning_fields: frozenset[str] | None = frozenset()
    has_tokenize: bool | None = False
    cli = TRANSFORMERS_CLI

    def prepare(self, spec: EngineSpec) -> EngineSpec:
        """The served name is the model string: the only name the server answers to."""
        return spec.model_copy(update={"served_name": spec.served_name or spec.model})

    def program(self, spec: EngineSpec) -> list[str]:
        return transformers_program(spec)

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        if not spec.model:
            raise ConfigError("a transformers spec needs a model (a path or hub id)")
        if spec.served_name not in (None, spec.model):
            raise ConfigError(
                "transformers serve has no served name of its own",
                hint=f"it answers to the model string {spec.model!r}; drop served_name",
            )
        argv = [*self.program(spec), spec.model, "--continuous-batching"]
        argv += ["--host", host, "--port", str(port)]
        if spec.device:
            argv += ["--device", spec.device]
        argv += transformers_tuning(self.name, spec)
        return argv + list(spec.extra_args)
