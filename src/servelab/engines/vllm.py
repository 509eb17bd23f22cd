"""vLLM: `vllm serve MODEL`, its knobs, and its recorded flag list.

Flags checked against vllm 0.33.0 (vllm/engine/arg_utils.py EngineArgs.add_cli_args and
vllm/entrypoints/common/cli_args.py make_arg_parser). vLLM has no expert parallel size:
`--enable-expert-parallel` spreads the experts over all tp x dp GPUs, so `ep` must be 1
or tp x dp. Its prefill chunks are bounded by `--max-num-batched-tokens`
(`max_batch_tokens`), there is no separate chunk size.
"""

from __future__ import annotations

from servelab.core.errors import ConfigError
from servelab.engines.base import PINNING_FIELDS, EngineSpec
from servelab.engines.flagcheck import CliFlags
from servelab.engines.knobs import FlagRule, map_knobs, map_layout, switch, value

__all__ = ["KNOB_FLAGS", "LAYOUT_FLAGS", "VLLMAdapter"]

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
}

_HINTS = {
    "chunked_prefill_size": "vLLM bounds prefill chunks by max_batch_tokens "
    "(--max-num-batched-tokens)",
}


class VLLMAdapter:
    """vLLM's OpenAI server; `options.executable` names the `vllm` program (default: PATH)."""

    name = "vllm"
    description = "vLLM (vllm serve)"
    launches = True
    health_path = "/health"
    models_path = "/v1/models"
    metrics_path = "/metrics"
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
        return spec

    def program(self, spec: EngineSpec) -> list[str]:
        return [str(spec.options.get("executable", "vllm")), "serve"]

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        if not spec.model:
            raise ConfigError("a vllm spec needs a model (a path or hub id)")
        if spec.ep not in (1, spec.tp * spec.dp):
            raise ConfigError(
                f"vllm cannot take ep={spec.ep} with tp={spec.tp} and dp={spec.dp}",
                hint=f"its expert parallel size is tp x dp: set ep to 1 or {spec.tp * spec.dp}",
            )
        argv = [*self.program(spec), spec.model, "--host", host, "--port", str(port)]
        if spec.served_name:
            argv += ["--served-model-name", spec.served_name]
        argv += map_layout(self.name, spec, LAYOUT_FLAGS)
        argv += map_knobs(self.name, spec, KNOB_FLAGS, hints=_HINTS)
        return argv + list(spec.extra_args)
