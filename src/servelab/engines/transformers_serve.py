"""transformers serve: any model, with continuous batching, and its knobs.

Flags checked against transformers 5.24.0 (src/transformers/cli/serve.py, a Typer
command). It serves one model on one device: no parallel layout, no running-request
cap, no prefix cache, no KV cache dtype. The `--cb-*` flags configure its continuous
batching, which servelab always turns on.
"""

from __future__ import annotations

import sys
from math import ceil

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.engines.flagcheck import CliFlags
from servelab.engines.knobs import FlagRule, map_knobs, map_layout, switch, value

__all__ = [
    "CB_BLOCK_TOKENS",
    "CB_LOG_LEVEL",
    "KNOB_FLAGS",
    "TRANSFORMERS_CLI",
    "TransformersAdapter",
    "cb_num_blocks",
    "transformers_program",
    "transformers_tuning",
]

CB_BLOCK_TOKENS = 256
"""Tokens per cache block: transformers 5.24's default `page_size` (`--cb-block-size`, which
servelab leaves unset: that spelling is deprecated and warns)."""


def cb_num_blocks(tokens: int) -> int:
    """Blocks of CB_BLOCK_TOKENS that hold `tokens`."""
    return max(1, ceil(tokens / CB_BLOCK_TOKENS))


KNOB_FLAGS: dict[str, FlagRule] = {
    "cuda_graphs": switch(on=["--cb-use-cuda-graph"], off=["--no-cb-use-cuda-graph"]),
    "mem_fraction": value("--cb-max-memory-percent"),
    "quantization": value("--quantization"),
    "attention_backend": value("--attn-implementation"),
    "max_batch_tokens": value("--cb-max-batch-tokens"),
    "kv_cache_tokens": lambda tokens: ["--cb-num-blocks", str(cb_num_blocks(tokens))],
}

_LAYOUT_HINT = "transformers serve runs one model on one device"
_HINTS = dict.fromkeys(("tp", "pp", "ep", "dp"), _LAYOUT_HINT)

TRANSFORMERS_CLI = CliFlags(recorded="transformers-5.24.0.txt")


CB_LOG_LEVEL = "INFO"
"""The level of transformers' continuous-batching logger in a launched server.

That logger (`ContinuousBatchingLogger`) has its own handler and ignores `--log-level`, so it
stays at WARNING and never says how it sized its cache. It is raised before the CLI starts,
in the server's own interpreter (which need not have servelab)."""

_SERVE_ENTRY = (
    "import logging, sys; "
    f"logging.getLogger('ContinuousBatchingLogger').setLevel(logging.{CB_LOG_LEVEL}); "
    "sys.argv[0] = 'transformers'; "
    "from transformers.cli.transformers import main; main()"
)


def transformers_program(spec: EngineSpec) -> list[str]:
    """`transformers serve` in `options.python` (default: this interpreter), with the
    continuous-batching logger at CB_LOG_LEVEL."""
    python = str(spec.options.get("python", sys.executable))
    return [python, "-c", _SERVE_ENTRY, "serve"]


def transformers_tuning(engine: str, spec: EngineSpec) -> list[str]:
    """The layout (none may be set) and knobs of `spec` as transformers serve flags."""
    sized_twice = {"--cb-block-size", "--cb-num-blocks"} & set(spec.extra_args)
    if spec.knobs.kv_cache_tokens is not None and sized_twice:
        raise ConfigError(
            f"the cache is sized twice: knobs.kv_cache_tokens and {min(sized_twice)} in extra_args",
            hint="keep one: kv_cache_tokens counts tokens, --cb-num-blocks blocks of "
            f"{CB_BLOCK_TOKENS}",
        )
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
