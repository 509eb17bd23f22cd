"""The largest CUDA-graph batch in SGLang's and vLLM's logs: the sizes each captures.

data/logs/sglang_graph_capture.log is an SGLang start-up of the releases that print
`server_args={...}` and `Capture target decode CUDA graph begin. ..., bs=[...]`
(python/sglang/srt/model_executor/model_runner.py init_decode_cuda_graph, 2026 main; the
`cuda_graph_max_bs_decode` field of arg_groups/fields/exec_.py); vllm_graph_capture.log a
vLLM start-up with `--max-cudagraph-capture-size 16`, in the formats of
vllm/entrypoints/utils.py (non-default args), vllm/config/vllm.py with
CompilationConfig.__repr__ (the engine's config) and gpu_model_runner.py's progress bars.
The values are filled in by hand; the line formats are the sources'.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.diagnose.engineconf import engine_config
from servelab.engines.signatures import SignatureMatcher, scan_log

LOGS = Path(__file__).parent / "data" / "logs"

SGLANG: list[tuple[int, str, int, dict[str, object]]] = [
    (
        1,
        "sglang.server_args_dict",
        1,
        {
            "model_path": "/models/Qwen3-8B",
            "tp_size": 1,
            "max_running_requests": 128,
            "chunked_prefill_size": 8192,
            "max_prefill_tokens": 16384,
            "mem_fraction_static": 0.88,
            "dtype": "auto",
            "kv_cache_dtype": "auto",
            "disable_cuda_graph": False,
            "cuda_graph_max_bs_decode": 32,
        },
    ),
    (
        2,
        "sglang.load_weight_end",
        1,
        {
            "elapsed_s": 12.31,
            "avail_mem_gib": 122.7,
            "mem_gib": 15.27,
            "model_type": "Qwen3ForCausalLM",
        },
    ),
    (
        3,
        "sglang.kv_cache_allocated",
        1,
        {"dtype": "torch.bfloat16", "tokens": 712345, "kv_gib": 97.83},
    ),
    # Eight sizes, 1 to 32: the largest is the one a decode batch must not exceed.
    (
        4,
        "sglang.capture_phase_cuda_graph_begin",
        1,
        {
            "phase": "target decode",
            "avail_mem_gib": 23.61,
            "backend": "full",
            "max_bs": 32,
            "num_batch_sizes": 8,
        },
    ),
    (
        6,
        "sglang.capture_phase_cuda_graph_end",
        1,
        {"phase": "target decode", "elapsed_s": 3.42, "mem_gib": 0.44, "avail_mem_gib": 23.17},
    ),
    (
        7,
        "sglang.disable_prefill_cuda_graph",
        1,
        {"phase": "prefill", "reason": "cuda_graph_config resolved prefill.backend='disabled'"},
    ),
    (
        8,
        "sglang.scheduler_limits",
        1,
        {
            "max_total_num_tokens": 712345,
            "chunked_prefill_size": 8192,
            "max_prefill_tokens": 16384,
            "max_running_requests": 128,
            "context_len": 40960,
            "available_gpu_mem_gib": 23.17,
        },
    ),
]

VLLM: list[tuple[int, str, int, dict[str, object]]] = [
    (1, "vllm.api_server_version", 1, {"version": "0.13.0"}),
    (
        2,
        "vllm.non_default_args",
        1,
        {
            "max_cudagraph_capture_size": 16,
            "model": "/models/Qwen3-8B",
            "model_tag": "/models/Qwen3-8B",
            "max_num_seqs": 64,
        },
    ),
    (2, "vllm.scheduler_args", 1, {"max_num_seqs": 64, "max_running_requests": 64}),
    (3, "vllm.engine_init_version", 1, {"version": "0.13.0"}),
    # The resolved sizes: five, up to the flag's 16.
    (3, "vllm.compilation_config", 1, {"num_batch_sizes": 5, "max_cudagraph_capture_size": 16}),
    (
        4,
        "vllm.capturing_cuda_graphs",
        1,
        {"phase": "mixed prefill-decode", "mode": "PIECEWISE", "num_batch_sizes": 5},
    ),
    (5, "vllm.capturing_cuda_graphs", 1, {"phase": "decode", "mode": "FULL", "num_batch_sizes": 5}),
    (6, "vllm.graph_capturing_finished", 1, {"elapsed_s": 2.0, "mem_gib": 0.18}),
]


@pytest.mark.parametrize(
    ("log", "engine", "expected"),
    [("sglang_graph_capture.log", "sglang", SGLANG), ("vllm_graph_capture.log", "vllm", VLLM)],
)
def test_every_expected_event_and_nothing_else(
    log: str, engine: str, expected: list[tuple[int, str, int, dict[str, object]]]
):
    events = scan_log(LOGS / log, engine)

    assert [(e.line_no, e.signature, e.count, e.fields) for e in events] == expected


def _fields(engine: str, line: str) -> dict[str, dict[str, object]]:
    matcher = SignatureMatcher(engine)
    return {event.signature: event.fields for event in matcher.feed(line)}


def test_the_older_sglang_line_lists_the_sizes_captured():
    line = "[2025-06-12 10:41:07 TP0] Capture cuda graph bs [1, 2, 4, 8, 16, 24, 32, 40, 48]"

    assert _fields("sglang", line) == {
        "sglang.capture_cuda_graph_bs": {"max_bs": 48, "num_batch_sizes": 9}
    }


def test_sglang_s_prefill_graph_line_has_no_batch_sizes():
    line = (
        "[2026-07-21 10:36:50] Capture target prefill CUDA graph begin. backend=breakable, "
        "num_tokens=[4, 8, 8192], avail mem=9.12 GB"
    )

    fields = _fields("sglang", line)["sglang.capture_phase_cuda_graph_begin"]

    assert "max_bs" not in fields and fields["phase"] == "target prefill"


def test_vllm_under_eager_resolves_no_sizes():
    line = (
        "(EngineCore_DP0 pid=90) INFO 12-02 08:01:10 [core.py:98] Initializing a V1 LLM engine "
        "(v0.13.0) with config: model='/models/m', enforce_eager=True, compilation_config="
        "{'level': None, 'mode': <CompilationMode.NONE: 0>, 'cudagraph_mode': "
        "<CUDAGraphMode.NONE: 0>, 'cudagraph_capture_sizes': [], 'max_cudagraph_capture_size': "
        "0, 'local_cache_dir': None}"
    )

    assert _fields("vllm", line)["vllm.compilation_config"] == {
        "num_batch_sizes": 0,
        "max_cudagraph_capture_size": 0,
    }


def test_vllm_s_list_of_sizes_gives_its_largest():
    line = (
        "(APIServer pid=1) INFO 12-02 07:15:21 [utils.py:253] non-default args: {'model': 'm', "
        "'cudagraph_capture_sizes': [1, 2, 4, 8, 24]}"
    )

    assert _fields("vllm", line)["vllm.non_default_args"] == {
        "model": "m",
        "num_batch_sizes": 5,
        "max_cudagraph_capture_size": 24,
    }


def test_a_compilation_config_given_on_the_command_line_is_read_from_its_repr():
    # `-cc` parses into a CompilationConfig, whose repr literal_eval cannot read.
    line = (
        "(APIServer pid=1) INFO 12-02 07:15:21 [utils.py:253] non-default args: {'model': 'm', "
        "'compilation_config': {'mode': <CompilationMode.VLLM_COMPILE: 3>, "
        "'max_cudagraph_capture_size': 48}}"
    )

    assert _fields("vllm", line)["vllm.non_default_args"] == {
        "max_cudagraph_capture_size": 48,
        "model": "m",
    }


def test_vllm_s_step_budget_is_read_where_the_launch_did_not_set_it():
    """vLLM 0.32 for CPUs launched without --max-num-batched-tokens (a recorded log): the
    budget it defaulted to (2,048 on CPUs) is the last of the compile ranges it prints; a
    user's own ranges in the non-default args are not read as one. Its non-default args
    hold an object's repr (servelab's --profiler-config), and their plain values still
    count."""
    events = scan_log(LOGS / "vllm_cpu_startup.log", "vllm")
    config = engine_config("vllm", [], events)
    assert config.max_batch_tokens is not None
    assert config.max_batch_tokens.value == 2048
    assert "compile_ranges_endpoints" not in config.max_batch_tokens.source
    assert "max_num_batched_tokens=2048" in config.max_batch_tokens.source
    assert config.running_cap is not None and config.running_cap.value == 64
    line = (
        "(APIServer pid=1) INFO 12-02 07:15:21 [utils.py:253] non-default args: {'model': 'm', "
        "'compilation_config': {'compile_ranges_endpoints': [512]}}"
    )
    assert "max_num_batched_tokens" not in _fields("vllm", line)["vllm.non_default_args"]
