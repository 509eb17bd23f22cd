"""SGLang: `python -m sglang.launch_server`, its knobs, and its recorded flag list.

Flags checked against sglang 0.5.23 (python/sglang/srt/server_args.py and the fields
under python/sglang/srt/arg_groups/fields/). `--disable-cuda-graph` is deprecated there
in favour of `--cuda-graph-backend-{decode,prefill}=disabled` but still accepted, and
it is the only spelling older releases know, so it is the one used.
"""

from __future__ import annotations

import sys

from servelab.core.errors import ConfigError
from servelab.engines.base import PINNING_FIELDS, EngineSpec
from servelab.engines.flagcheck import CliFlags
from servelab.engines.knobs import FlagRule, map_knobs, map_layout, switch, value
from servelab.engines.profiler import SGLANG_PROFILER

__all__ = ["KNOB_FLAGS", "LAYOUT_FLAGS", "SGLangAdapter"]

LAYOUT_FLAGS: dict[str, FlagRule] = {
    "tp": value("--tp-size"),
    "pp": value("--pp-size"),
    "ep": value("--ep-size"),
    "dp": value("--dp-size"),
}

KNOB_FLAGS: dict[str, FlagRule] = {
    "max_running_requests": value("--max-running-requests"),
    "cuda_graphs": switch(off=["--disable-cuda-graph"]),
    "prefix_cache": switch(off=["--disable-radix-cache"]),
    "chunked_prefill_size": value("--chunked-prefill-size"),
    "mem_fraction": value("--mem-fraction-static"),
    "kv_cache_tokens": value("--max-total-tokens"),
    "kv_cache_dtype": value("--kv-cache-dtype"),
    "quantization": value("--quantization"),
    "attention_backend": value("--attention-backend"),
    "moe_backend": value("--moe-runner-backend"),
    "max_batch_tokens": value("--max-prefill-tokens"),
    "max_model_len": value("--context-length"),
}


class SGLangAdapter:
    """SGLang's HTTP server; `options.python` names the interpreter that has sglang."""

    name = "sglang"
    description = "SGLang (python -m sglang.launch_server)"
    launches = True
    health_path = "/health"
    models_path = "/v1/models"
    metrics_path = "/metrics"
    profiler = SGLANG_PROFILER
    # protocol.py's CompletionRequest and ChatCompletionRequest take both.
    pinning_fields: frozenset[str] | None = PINNING_FIELDS
    has_tokenize: bool | None = True
    cli = CliFlags(recorded="sglang-0.5.23.txt")

    def prepare(self, spec: EngineSpec) -> EngineSpec:
        return spec

    def program(self, spec: EngineSpec) -> list[str]:
        return [str(spec.options.get("python", sys.executable)), "-m", "sglang.launch_server"]

    def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
        """`--enable-metrics` always: servelab's telemetry reads /metrics."""
        if not spec.model:
            raise ConfigError("an sglang spec needs a model (a path or hub id)")
        argv = [*self.program(spec), "--model-path", spec.model]
        argv += ["--host", host, "--port", str(port)]
        if spec.served_name:
            argv += ["--served-model-name", spec.served_name]
        argv += ["--enable-metrics"]
        argv += map_layout(self.name, spec, LAYOUT_FLAGS)
        argv += map_knobs(self.name, spec, KNOB_FLAGS)
        return argv + list(spec.extra_args)
