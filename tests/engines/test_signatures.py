"""Log signatures on real engine lines: every expected event with its fields, nothing else.

The fixture logs in data/logs are lines in the engines' own formats (taken from their
sources and from logs posted in public issues) with the story's values filled in;
embedded_startup.log is a real `transformers serve` log written on this machine, and the
other embedded_*.log are real logs of transformers serve 5.24.0 with its continuous-batching
logger at INFO on the CPU: embedded_serving.log as servelab's launcher wrote it (stamped,
`--cb-num-blocks 320 --cb-max-batch-tokens 1024`), embedded_cache_sizing_failed.log with
`--cb-max-memory-percent 0.0005` and embedded_cache_footprint.log with that and
`--cb-num-blocks 4000` (interpreter paths shortened). data/http holds the bodies that server
answered with after its worker died, byte for byte.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from servelab.core.errors import ConfigError
from servelab.engines.enginelog import parse_log_line
from servelab.engines.signatures import (
    KIND_INFO,
    MAX_EVENTS_PER_KIND,
    MAX_TEXT_CHARS,
    SIGNATURES,
    EventKind,
    EventSeverity,
    LogScan,
    SignatureMatcher,
    scan_log,
    scan_text,
)

LOGS = Path(__file__).parent / "data" / "logs"
BODIES = Path(__file__).parent / "data" / "http"

SG_MOE_DIR = (
    "/usr/local/lib/python3.12/dist-packages/sglang/srt/layers/moe/fused_moe_triton/configs/"
    "triton_3_4_0/"
)
SG_MOE_FILE = "E=256,N=256,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition"
SG_TUNING_URL = "https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton"
VLLM_MOE_FILE = "E=128,N=384,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
VLLM_MOE_DIR = (
    "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/fused_moe/configs/"
)
PEER_ACCESS = "Cuda failure 'peer access is not supported between these two devices'"
NCCL_CUDA_ERROR = "unhandled cuda error (run with NCCL_DEBUG=INFO for details)"

# (line, signature, count, fields) for every event the log must yield, in order.
Expected = list[tuple[int, str, int, dict[str, object]]]

SGLANG_STARTUP: Expected = [
    (
        1,
        "sglang.server_args",
        1,
        {
            "model_path": "/models/GLM-5-NVFP4",
            "tp_size": 8,
            "pp_size": 1,
            "ep_size": 1,
            "dp_size": 1,
            "enable_dp_attention": False,
            "max_running_requests": 64,
            "max_total_tokens": None,
            "chunked_prefill_size": 8192,
            "max_prefill_tokens": 16384,
            "mem_fraction_static": 0.85,
            "context_length": None,
            "page_size": 64,
            "dtype": "auto",
            "kv_cache_dtype": "auto",
            "quantization": "modelopt_fp4",
            "attention_backend": "triton",
            "moe_runner_backend": "auto",
            "moe_a2a_backend": "none",
            "disable_cuda_graph": False,
            "cuda_graph_max_bs": 64,
            "disable_radix_cache": True,
            "enable_torch_compile": False,
            "schedule_policy": "fcfs",
            "schedule_conservativeness": 1.0,
            "disable_custom_all_reduce": True,
            "enable_flashinfer_allreduce_fusion": False,
            "speculative_algorithm": None,
        },
    ),
    # Once from the launcher process, then once per TP rank: one event, counted.
    (2, "sglang.deepgemm_scale_fmt_not_ue8m0", 4, {}),
    (
        15,
        "sglang.load_weight_end",
        1,
        {
            "elapsed_s": 372.84,
            "avail_mem_gib": 36.52,
            "mem_gib": 56.89,
            "model_type": "GlmMoeDsaForCausalLM",
        },
    ),
    (
        17,
        "sglang.kv_cache_allocated",
        1,
        {"dtype": "torch.bfloat16", "tokens": 412416, "kv_gib": 23.01},
    ),
    (19, "sglang.capture_cuda_graph_begin", 1, {"device": "cuda", "avail_mem_gib": 12.64}),
    # The batch sizes captured: twelve, the largest the server_args' cuda_graph_max_bs.
    (20, "sglang.capture_cuda_graph_bs", 1, {"max_bs": 64, "num_batch_sizes": 12}),
    # Behind a progress bar on line 21, then again from TP3 on line 22.
    (
        21,
        "sglang.moe_default_config",
        2,
        {
            "config_path": f"{SG_MOE_DIR}{SG_MOE_FILE}.json",
            "config_file": f"{SG_MOE_FILE}.json",
            "tuning_url": SG_TUNING_URL,
            "experts": 256,
            "n": 256,
            "device_name": "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition",
            "down": False,
            "triton_version": "3.4.0",
        },
    ),
    (
        23,
        "sglang.moe_down_config_reuses_up",
        1,
        {
            "config_path": f"{SG_MOE_DIR}{SG_MOE_FILE}_down.json",
            "config_file": f"{SG_MOE_FILE}_down.json",
            "experts": 256,
            "n": 256,
            "device_name": "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition",
            "down": True,
            "triton_version": "3.4.0",
        },
    ),
    (
        25,
        "sglang.capture_cuda_graph_end",
        1,
        {"device": "cuda", "elapsed_s": 22.74, "mem_gib": 1.13, "avail_mem_gib": 11.51},
    ),
    (
        26,
        "sglang.disable_prefill_cuda_graph",
        1,
        {"phase": "prefill", "reason": "cuda_graph_config resolved prefill.backend='disabled'"},
    ),
    (
        27,
        "sglang.scheduler_limits",
        1,
        {
            "max_total_num_tokens": 412416,
            "chunked_prefill_size": 8192,
            "max_prefill_tokens": 16384,
            "max_running_requests": 64,
            "context_len": 202752,
            "available_gpu_mem_gib": 11.51,
        },
    ),
    # uvicorn's "Application startup complete." (line 31) comes before SGLang's warm-up.
    (35, "sglang.fired_up", 1, {}),
]

VLLM_STARTUP: Expected = [
    (1, "vllm.api_server_version", 1, {"version": "0.11.1"}),
    (
        2,
        "vllm.non_default_args",
        1,
        {
            "model": "Qwen/Qwen3-30B-A3B-FP8",
            "model_tag": "Qwen/Qwen3-30B-A3B-FP8",
            "tensor_parallel_size": 2,
            "max_num_seqs": 256,
            "max_model_len": 32768,
            "gpu_memory_utilization": 0.9,
            "enable_prefix_caching": True,
        },
    ),
    (
        2,
        "vllm.scheduler_args",
        1,
        {"max_num_seqs": 256, "max_model_len": 32768, "max_running_requests": 256},
    ),
    (4, "vllm.max_model_len", 1, {"max_model_len": 32768}),
    (5, "vllm.chunked_prefill", 1, {"max_num_batched_tokens": 8192}),
    (6, "vllm.engine_init_version", 1, {"version": "0.11.1"}),
    # Its compilation_config as JSON, as before v0.11's dict: `max_capture_size`.
    (6, "vllm.compilation_config", 1, {"max_cudagraph_capture_size": 512}),
    (16, "vllm.model_loading_took", 1, {"mem_gib": 14.6318, "elapsed_s": 23.185442}),
    (
        20,
        "vllm.moe_default_config",
        2,
        {
            "config_path": f"{VLLM_MOE_DIR}{VLLM_MOE_FILE}",
            "config_file": VLLM_MOE_FILE,
            "experts": 128,
            "n": 384,
            "device_name": "NVIDIA_H200",
            "dtype": "fp8_w8a8",
            "block_shape": "[128,128]",
            "down": False,
        },
    ),
    (23, "vllm.available_kv_cache_memory", 2, {"available_gib": 101.92}),
    (25, "vllm.kv_cache_size_tokens", 1, {"device": "GPU", "tokens": 2226624}),
    (26, "vllm.max_concurrency", 1, {"max_model_len": 32768, "concurrency": 67.95}),
    (
        27,
        "vllm.capturing_cuda_graphs",
        2,
        {"phase": "mixed prefill-decode", "mode": "PIECEWISE", "num_batch_sizes": 67},
    ),
    (
        29,
        "vllm.capturing_cuda_graphs",
        1,
        {"phase": "decode", "mode": "FULL", "num_batch_sizes": 35},
    ),
    (30, "vllm.graph_capturing_finished", 1, {"elapsed_s": 7.0, "mem_gib": 0.95}),
    (40, "uvicorn.startup_complete", 1, {}),
]

VLLM_OOM: Expected = [
    (1, "vllm.api_server_version", 1, {"version": "0.11.0"}),
    (
        2,
        "vllm.non_default_args",
        1,
        {
            "model": "meta-llama/Llama-3.3-70B-Instruct",
            "model_tag": "meta-llama/Llama-3.3-70B-Instruct",
            "max_model_len": 131072,
            "gpu_memory_utilization": 0.95,
        },
    ),
    (4, "vllm.model_loading_took", 1, {"mem_gib": 131.4432, "elapsed_s": 48.11721}),
    (5, "vllm.available_kv_cache_memory", 1, {"available_gib": 2.41}),
    (6, "vllm.engine_core_failed", 1, {}),
    (
        10,
        "vllm.kv_cache_needed_exceeds_available",
        1,
        {"needed_gib": 40.0, "available_gib": 2.41, "estimated_max_model_len": 7888},
    ),
    # Line 17 quotes the same message as traceback source code: not an event.
    (18, "vllm.engine_core_failed", 1, {}),
]

SGLANG_CRASH: Expected = [
    (
        5,
        "nccl.transport",
        1,
        {
            "transport": "SHM",
            "via": "SHM/direct/direct",
            "channel": 0,
            "from_rank": 0,
            "to_rank": 1,
        },
    ),
    (6, "nccl.warn", 2, {"detail": PEER_ACCESS}),
    (
        9,
        "sglang.capture_cuda_graph_failed",
        1,
        {
            "detail": "CUDA out of memory. Tried to allocate 1.53 GiB. GPU 6 has a total capacity "
            "of 94.97 GiB of which 1.01 GiB is free. Including non-PyTorch memory, this process "
            "has 93.95 GiB memory in use."
        },
    ),
    (
        9,
        "torch.cuda_out_of_memory",
        1,
        {"device": "CUDA", "tried_gib": 1.53, "gpu": 6, "total_gib": 94.97, "free_gib": 1.01},
    ),
    (10, "sglang.scheduler_exception", 2, {"process": "Scheduler"}),
    # Line 15 is the `raise RuntimeError(f"NCCL error: {error_str}")` source line.
    (16, "pynccl.nccl_error", 1, {"detail": NCCL_CUDA_ERROR}),
    (
        19,
        "torch.nccl_error",
        1,
        {
            "location": "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77",
            "detail": NCCL_CUDA_ERROR,
            "nccl_version": "2.27.3",
        },
    ),
    (
        20,
        "nccl.result_code",
        1,
        {"nccl_code": "ncclUnhandledCudaError", "detail": "Call to CUDA function failed."},
    ),
    (23, "sglang.child_failed", 1, {}),
]

EMBEDDED_STARTUP: Expected = [(5, "uvicorn.startup_complete", 1, {})]

# What transformers decides when the first request builds its continuous-batching manager.
_TF_NO_FLASH = ("transformers.no_flash_attention", 1, {"flash_attention": False})
# On the CPU (no graph backend) transformers always says (False, False): graphs off only.
_TF_GRAPHS_OFF = (
    "transformers.cuda_graphs_off",
    1,
    {"cuda_graph_varlen": False, "cuda_graph_decode": False},
)
_TF_ASYNC = (
    "transformers.async_batching",
    1,
    {"use_async_batching": False, "use_cuda_graphs": False, "is_attn_mask_needed": True},
)
_TF_STARVED_MEMORY = ("transformers.memory_for_cache", 1, {"available_gib": 4 / 1024})


def _at(line: int, event: tuple[str, int, dict[str, object]]) -> tuple[int, str, int, dict]:
    return (line, *event)


EMBEDDED_SERVING: Expected = [
    (7, "uvicorn.startup_complete", 1, {}),
    _at(14, _TF_NO_FLASH),
    _at(15, _TF_GRAPHS_OFF),
    _at(16, _TF_ASYNC),
    # 4952 MB, as `available_memory // 1024**2`: MiB.
    (17, "transformers.memory_for_cache", 1, {"available_gib": 4952 / 1024}),
    (
        18,
        "transformers.paged_cache_initialized",
        1,
        {"max_batch_tokens": 1024, "num_sectors": 320, "mib_per_sector": 0},
    ),
]

_TF_STARVED_START: Expected = [
    (5, "uvicorn.startup_complete", 1, {}),
    _at(10, _TF_NO_FLASH),
    _at(11, _TF_GRAPHS_OFF),
    _at(12, _TF_ASYNC),
    _at(14, _TF_STARVED_MEMORY),
]

# The ERROR line and the traceback's last line are one event; the `raise` source line
# between them is skipped.
EMBEDDED_SIZING_FAILED: Expected = [
    *_TF_STARVED_START,
    (
        15,
        "transformers.cache_sizing_invalid",
        2,
        {"max_batch_tokens": 8192, "num_sectors": -34},
    ),
    (15, "transformers.generation_failed", 1, {}),
]

EMBEDDED_FOOTPRINT: Expected = [
    *_TF_STARVED_START,
    (
        15,
        "transformers.cache_footprint_too_large",
        2,
        {"footprint_bytes": 38606667776, "available_bytes": 4327018},
    ),
    (15, "transformers.generation_failed", 1, {}),
]

FIXTURES = [
    ("sglang_startup.log", "sglang", SGLANG_STARTUP),
    ("vllm_startup.log", "vllm", VLLM_STARTUP),
    ("vllm_oom.log", "vllm", VLLM_OOM),
    ("sglang_crash.log", "sglang", SGLANG_CRASH),
    ("embedded_startup.log", "embedded", EMBEDDED_STARTUP),
    ("embedded_serving.log", "embedded", EMBEDDED_SERVING),
    ("embedded_cache_sizing_failed.log", "embedded", EMBEDDED_SIZING_FAILED),
    ("embedded_cache_footprint.log", "transformers", EMBEDDED_FOOTPRINT),
]


def _signature_cases() -> list[tuple[str, str]]:
    return sorted({(engine, sig.name) for engine, sigs in SIGNATURES.items() for sig in sigs})


def _signature(engine: str, name: str):
    return next(sig for sig in SIGNATURES[engine] if sig.name == name)


@pytest.mark.parametrize(("log", "engine", "expected"), FIXTURES)
def test_every_expected_event_and_nothing_else(log: str, engine: str, expected: Expected):
    events = scan_log(LOGS / log, engine)

    got = [(e.line_no, e.signature, e.count, e.fields) for e in events]
    assert got == expected
    for event in events:
        sig = _signature(engine, event.signature)
        assert (event.kind, event.severity, event.engine) == (sig.kind, sig.severity, engine)


def test_fixture_logs_have_the_size_of_a_start_up():
    for log in ("sglang_startup.log", "vllm_startup.log"):
        assert 20 <= len((LOGS / log).read_text().splitlines()) <= 60


def test_the_story_s_decisive_facts_come_out_of_the_sglang_log():
    events = {e.kind: e for e in scan_log(LOGS / "sglang_startup.log", "sglang")}

    assert events[EventKind.DEEPGEMM_SCALE_FORMAT].severity is EventSeverity.WARNING
    moe = events[EventKind.MOE_CONFIG_MISSING]
    assert moe.fields["config_path"] == f"{SG_MOE_DIR}{SG_MOE_FILE}.json"
    assert events[EventKind.CUDA_GRAPH_CAPTURE_END].fields["mem_gib"] == 1.13
    assert events[EventKind.SCHEDULER_LIMITS].fields["max_running_requests"] == 64
    assert events[EventKind.KV_CACHE_CAPACITY].fields["tokens"] == 412416


def test_launcher_timestamp_is_stripped_and_dated():
    events = scan_log(LOGS / "sglang_startup.log", "sglang")
    fired_up = next(e for e in events if e.kind is EventKind.ENGINE_READY)

    expected = datetime.fromisoformat("2026-11-29T15:07:01.351+00:00").timestamp()
    assert fired_up.t_unix == pytest.approx(expected)
    assert fired_up.text == "[2026-11-29 15:07:01] The server is fired up and ready to roll!"


def test_a_timestamp_without_zone_is_stripped_but_not_dated():
    matcher = SignatureMatcher("embedded")
    line = (
        "2026-11-29 15:12:03,481 - ContinuousBatchingLogger - ERROR - Error in generation "
        "loop: CUDA error: an illegal memory access was encountered"
    )

    (event,) = matcher.feed(line)

    assert event.kind is EventKind.ENGINE_ERROR
    assert event.t_unix is None
    assert event.text.startswith("- ContinuousBatchingLogger - ERROR - Error in generation loop")


def test_monotonic_stamp_is_kept():
    matcher = SignatureMatcher("vllm")

    (event,) = matcher.feed(
        "(APIServer pid=1) INFO:     Application startup complete.", t_mono_ns=42
    )

    assert event.t_mono_ns == 42


def test_repeats_are_counted_not_stored_and_returned_once():
    matcher = SignatureMatcher("sglang")
    line = (
        "[2026-11-29 15:00:09 TP{rank}] DeepGemm is enabled but the scale_fmt of checkpoint is "
        "not ue8m0. This might cause accuracy degradation on Blackwell."
    )

    returned = [matcher.feed(line.format(rank=rank)) for rank in range(8)]

    assert [len(events) for events in returned] == [1, 0, 0, 0, 0, 0, 0, 0]
    (event,) = matcher.events
    assert (event.count, event.line_no, event.last_line_no) == (8, 1, 8)
    assert matcher.counts == {EventKind.DEEPGEMM_SCALE_FORMAT: 8}


def test_distinct_events_of_a_kind_are_capped_but_all_counted():
    matcher = SignatureMatcher("vllm")
    extra = 5
    for size in range(MAX_EVENTS_PER_KIND + extra):
        matcher.feed(
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {size}.00 MiB."
        )

    assert len(matcher.events) == MAX_EVENTS_PER_KIND
    assert matcher.counts[EventKind.OUT_OF_MEMORY] == MAX_EVENTS_PER_KIND + extra


def test_progress_bar_redraws_before_the_match_are_dropped_from_the_text():
    matcher = SignatureMatcher("vllm")
    line = (
        "Capturing CUDA graphs (decode, FULL):  46%|████▌     | 16/35 [00:02<00:02,  8.85it/s]\r"
        "Capturing CUDA graphs (decode, FULL): 100%|██████████| 35/35 [00:04<00:00,  8.69it/s]\r"
        "(Worker_TP0 pid=404) INFO 11-25 08:01:56 [gpu_model_runner.py:3480] Graph capturing "
        "finished in 7 secs, took 0.95 GiB\n"
    )

    begin, end = matcher.feed(line)

    assert begin.text.startswith("Capturing CUDA graphs (decode, FULL):  46%")
    assert begin.text.endswith("8.85it/s]")
    assert end.text.startswith("(Worker_TP0 pid=404) INFO 11-25 08:01:56")
    assert end.fields == {"elapsed_s": 7.0, "mem_gib": 0.95}


def test_long_lines_are_kept_around_the_match():
    matcher = SignatureMatcher("sglang")
    padding = ", ".join(f"option_{i}=None" for i in range(400))
    line = f"[2026-11-29 15:00:02] server_args=ServerArgs(model_path='/m', {padding}, tp_size=8)"

    (event,) = matcher.feed(line)

    assert len(event.text) <= MAX_TEXT_CHARS + 2
    assert "server_args=ServerArgs(model_path='/m'" in event.text
    assert event.fields == {"model_path": "/m", "tp_size": 8}


def test_scan_keeps_carriage_returns_inside_lines():
    matcher = SignatureMatcher("sglang")
    with (LOGS / "sglang_startup.log").open(encoding="utf-8", newline="\n") as log:
        for line in log:
            matcher.feed(line)

    scan = matcher.summary()
    assert scan.lines == 39
    assert [e.model_dump() for e in scan.events] == [
        e.model_dump() for e in scan_log(LOGS / "sglang_startup.log", "sglang")
    ]


def test_summary_round_trips_through_json():
    matcher = SignatureMatcher("sglang")
    for line in (LOGS / "sglang_crash.log").read_text(encoding="utf-8").splitlines():
        matcher.feed(line)

    scan = matcher.summary()
    again = LogScan.model_validate_json(scan.model_dump_json())

    assert again == scan
    assert scan.counts[EventKind.NCCL_ERROR] == 3
    assert scan.counts[EventKind.ENGINE_ERROR] == 3


def test_source_lines_of_a_traceback_are_not_events():
    matcher = SignatureMatcher("sglang")
    traceback = [
        "Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/layers/sampler.py", line 107, in forward',
        '    raise ValueError("Detected errors during sampling! NaN in the logits.")',
        "ValueError: Detected errors during sampling! NaN in the logits.",
    ]

    found = [matcher.feed(line) for line in traceback]

    assert [len(events) for events in found] == [0, 0, 0, 1]
    assert matcher.events[0].line_no == 4


def test_specific_nan_message_suppresses_the_generic_one():
    matcher = SignatureMatcher("sglang")

    events = matcher.feed("ValueError: Detected errors during sampling! NaN in the logits.")

    assert [e.signature for e in events] == ["sglang.nan_in_logits"]
    assert events[0].fields == {"where": "logits"}


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
        "../aten/src/ATen/native/cuda/MultinomialKernel.cu:112: Assertion `probability tensor "
        "contains either `inf`, `nan` or element < 0` failed.",
    ],
)
def test_torch_sampling_on_nan_probabilities(line: str):
    (event,) = SignatureMatcher("embedded").feed(line)

    assert (event.kind, event.signature) == (EventKind.NAN, "torch.multinomial_invalid_probs")


def test_generic_nan_needs_a_context_word():
    matcher = SignatureMatcher("vllm")

    (event,) = matcher.feed("WARNING 07-02 10:11:42 [model.py:88] loss is nan at step 12")

    assert event.signature == "generic.nan"
    assert event.severity is EventSeverity.WARNING


NOISE = [
    (
        "sglang",
        "[2026-11-29 15:08:10 TP0] Decode batch. #running-req: 64, #token: 58112, token usage: "
        "0.14, cuda graph: False, gen throughput (token/s): 757.54, #queue-req: 64, ",
    ),
    ("sglang", "[2026-11-29 15:06:54] INFO:     Application startup complete."),
    ("sglang", "[2026-11-29 15:00:14 TP0] Init torch distributed ends. mem usage=0.58 GB"),
    ("sglang", "[2026-11-29 15:06:29 TP0] Memory pool end. avail mem=12.87 GB"),
    ("sglang", "[2026-04-12 12:43:59] enable_nan_detection=False, nccl_port=None, tp_size=8"),
    ("sglang", '    raise RuntimeError(f"NCCL error: {error_str}")'),
    ("sglang", "box:4121:4121 [0] NCCL INFO NCCL version 2.27.3+cuda12.9"),
    ("sglang", "[2026-11-29 15:00:12 TP0] sglang is using nccl==2.27.3"),
    ("sglang", "TypeError: argument of type 'NoneType' is not iterable"),
    (
        "vllm",
        "INFO 12-19 22:58:27 model_runner.py:1011] CUDA graphs can take additional 1~3 GiB memory "
        "per GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization` "
        "or enforcing eager mode.",
    ),
    (
        "vllm",
        "(APIServer pid=1) INFO 11-25 08:02:18 [loggers.py:127] Engine 000: Avg prompt "
        "throughput: 1024.0 tokens/s, Avg generation throughput: 2315.4 tokens/s, Running: 64 "
        "reqs, Waiting: 0 reqs, GPU KV cache usage: 3.1%, Prefix cache hit rate: 0.0%",
    ),
    (
        "vllm",
        "(Worker_TP0 pid=404) INFO 11-25 08:00:57 [custom_all_reduce.py:35] Skipping P2P check "
        "and trusting the driver's P2P report.",
    ),
    (
        "vllm",
        "(EngineCore pid=542) INFO 07-08 22:40:05 [gpu_model_runner.py:6588] Estimated CUDA graph "
        "memory: 0.44 GiB total",
    ),
    (
        "vllm",
        "(Worker_TP1 pid=119) INFO 07-04 03:10:43 [gpu_worker.py:667] CUDA graph pool memory: "
        "0.45 GiB (actual), 0.41 GiB (estimated), difference: 0.04 GiB (8.7%).",
    ),
    (
        "vllm",
        "(APIServer pid=1) INFO 11-25 08:01:58 [loggers.py:147] Engine 000: vllm "
        "cache_config_info with initialization after num_gpu_blocks is: 139164",
    ),
    (
        "vllm",
        "(APIServer pid=1) INFO 11-25 08:01:58 [api_server.py:1912] Starting vLLM API server 0 on "
        "http://0.0.0.0:8000",
    ),
    ("vllm", "(APIServer pid=1) WARNING 11-25 08:02:01 [serving.py:90] Ignoring min_p=nan default"),
    (
        "embedded",
        "[transformers] [Request received] Model: /root/.cache/servelab/embedded/"
        "tiny-187ee137fa1c2e04, CB: True",
    ),
    ("embedded", "[transformers] Ignoring unsupported fields in the request: {'stream_options'}"),
    ("embedded", '  "output_router_logits": false,'),
    ("embedded", "[transformers] loading configuration file /models/nano-nan/config.json"),
    (
        "embedded",
        "2026-11-29 15:10:29,217 - ContinuousBatchingLogger - WARNING - `eos_token_id` not set in "
        "GenerationConfig. Setting to -1 (disabled).",
    ),
    ("embedded", 'INFO:     127.0.0.1:39692 - "POST /v1/chat/completions HTTP/1.1" 200 OK'),
    (
        "embedded",
        "2026-12-02 00:49:28,208 - ContinuousBatchingLogger - INFO - Found no user-specified seed "
        "in the config. Setting the config seed to: 3101641970.",
    ),
    (
        "embedded",
        "2026-12-02 00:50:15,406 - ContinuousBatchingLogger - INFO - Rank 0 requested background "
        "thread to stop with status = 2. Now self._local_status = 2",
    ),
    (
        "embedded",
        "2026-12-02 00:50:15,406 - ContinuousBatchingLogger - INFO - Generation loop finished and "
        "background thread exited successfully.",
    ),
    (
        "embedded",
        '    raise ValueError(f"Invalid values: {max_batch_tokens = }, {num_sectors = }")',
    ),
    (
        "embedded",
        'INFO:     127.0.0.1:57488 - "POST /v1/chat/completions HTTP/1.1" 503 Service Unavailable',
    ),
    ("sim", "simulator worker 0 listening on http://127.0.0.1:41237"),
    ("sim", "GET /v1/models answered error: none"),
]


@pytest.mark.parametrize(("engine", "line"), NOISE)
def test_noise_lines_yield_nothing(engine: str, line: str):
    matcher = SignatureMatcher(engine)

    assert matcher.feed(line) == []
    assert matcher.events == []
    assert matcher.counts == {}


@pytest.mark.parametrize(("engine", "name"), _signature_cases())
def test_each_signature_matches_its_recorded_example(engine: str, name: str):
    sig = _signature(engine, name)

    events = SignatureMatcher(engine).feed(sig.example)

    assert name in [e.signature for e in events]


@pytest.mark.parametrize(("engine", "name"), _signature_cases())
def test_each_signature_records_where_its_text_came_from(engine: str, name: str):
    sig = _signature(engine, name)

    assert sig.source.repo and sig.source.path and sig.source.ref
    assert sig.literals and all(sig.literals)


def test_signature_names_are_unique_per_engine():
    for sigs in SIGNATURES.values():
        names = [sig.name for sig in sigs]
        assert len(names) == len(set(names))


def test_every_kind_says_what_it_means_and_what_to_try():
    assert set(KIND_INFO) == set(EventKind)
    for info in KIND_INFO.values():
        assert info.meaning and info.advice


def test_every_kind_has_a_signature():
    kinds = {sig.kind for sigs in SIGNATURES.values() for sig in sigs}

    assert kinds == set(EventKind)


def test_the_engine_s_cache_and_batch_budget_come_out_of_a_served_log():
    events = {e.kind: e for e in scan_log(LOGS / "embedded_serving.log", "embedded")}

    cache = events[EventKind.KV_CACHE_CAPACITY]
    assert (cache.fields["num_sectors"], cache.fields["max_batch_tokens"]) == (320, 1024)
    assert cache.line_no == 18 and cache.t_unix is not None  # the launcher's UTC stamp
    assert cache.text.endswith("mb_per_sector = 0")


def _graphs_line() -> str:
    """transformers serve's (varlen, decode) line of a real CPU run, as its engine wrote it."""
    lines = (LOGS / "embedded_serving.log").read_text(encoding="utf-8").splitlines()
    return parse_log_line(next(line for line in lines if "Using cuda graphs" in line))[2]


def test_a_cpu_run_of_transformers_serve_never_reads_as_cuda_graphs_on():
    events = SignatureMatcher("embedded").feed(_graphs_line())

    assert _graphs_line().endswith("paths: (False, False)")
    assert [(e.signature, e.kind) for e in events] == [
        ("transformers.cuda_graphs_off", EventKind.CUDA_GRAPH_DISABLED)
    ]


@pytest.mark.parametrize(
    ("paths", "signature"),
    [
        ("(True, False)", "transformers.cuda_graphs_off"),
        ("(False, True)", "transformers.cuda_graphs"),
        ("(True, True)", "transformers.cuda_graphs"),
    ],
)
def test_the_decode_path_decides_whether_cuda_graphs_are_on(paths: str, signature: str):
    line = _graphs_line().replace("(False, False)", paths)

    (event,) = SignatureMatcher("embedded").feed(line)

    assert event.signature == signature
    assert event.fields["cuda_graph_decode"] is (signature == "transformers.cuda_graphs")


@pytest.mark.parametrize(
    ("body", "signatures", "fields"),
    [
        (
            "transformers_503_sizing_invalid.json",
            ["transformers.cache_sizing_invalid", "transformers.cb_worker_dead"],
            {"max_batch_tokens": 8192, "num_sectors": -34},
        ),
        (
            "transformers_503_footprint.json",
            ["transformers.cache_footprint_too_large", "transformers.cb_worker_dead"],
            {"footprint_bytes": 38606667776, "available_bytes": 4327018},
        ),
        (
            "transformers_stream_sizing_invalid.txt",
            ["transformers.cache_sizing_invalid"],
            {"max_batch_tokens": 8192, "num_sectors": -34},
        ),
    ],
)
def test_scan_text_names_the_cause_of_a_dead_worker(
    body: str, signatures: list[str], fields: dict[str, object]
):
    events = scan_text("embedded", (BODIES / body).read_text(encoding="utf-8"))

    assert sorted(e.signature for e in events) == signatures
    (sizing,) = [e for e in events if e.kind is EventKind.KV_CACHE_SIZING_FAILED]
    assert sizing.fields == fields
    assert sizing.severity is EventSeverity.ERROR


def test_the_503_body_s_cause_is_kept_without_the_request_id():
    body = (BODIES / "transformers_503_sizing_invalid.json").read_text()

    dead = next(e for e in scan_text("transformers", body) if e.kind is EventKind.ENGINE_ERROR)

    assert dead.signature == "transformers.cb_worker_dead"
    assert dead.fields == {"detail": "Invalid values: max_batch_tokens = 8192, num_sectors = -34"}
    assert dead.line_no == 1


def test_refused_requests_are_one_dead_worker_event_counted():
    matcher = SignatureMatcher("embedded")
    for request in ("45159120-62f1", "9328118c-b545"):
        matcher.feed(
            f'{{"error":"CB worker is dead and cannot accept request {request}: Invalid '
            'values: max_batch_tokens = 8192, num_sectors = -34"}'
        )
    matcher.feed((BODIES / "transformers_health_503.json").read_text())

    dead = [e for e in matcher.events if e.kind is EventKind.ENGINE_ERROR]
    assert [(e.signature, e.count) for e in dead] == [
        ("transformers.cb_worker_dead", 2),
        ("transformers.cb_worker_dead", 1),
    ]
    assert matcher.counts[EventKind.KV_CACHE_SIZING_FAILED] == 2


def test_scan_text_of_an_unrelated_body_is_empty():
    assert scan_text("embedded", '{"error":"model not found"}\n') == []


def test_sizing_advice_names_servelab_s_knobs():
    advice = KIND_INFO[EventKind.KV_CACHE_SIZING_FAILED].advice

    assert "knobs.kv_cache_tokens" in advice and "--cb-num-blocks" in advice
    assert "knobs.max_batch_tokens" in advice and "--cb-max-batch-tokens" in advice
    assert "documentation" not in advice


def test_embedded_is_transformers_serve():
    assert SIGNATURES["embedded"] == SIGNATURES["transformers"]


def test_unknown_engine_is_a_config_error():
    with pytest.raises(ConfigError, match="no log signatures for engine 'tgi'"):
        SignatureMatcher("tgi")
