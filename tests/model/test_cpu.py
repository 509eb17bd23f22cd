"""The CPU ceiling against hand-computed cases: the embedded engine's tiny preset on a CPU.

tiny: 2 layers, hidden 256, 4 heads of 64, 2 KV heads, 4 experts (top-2) of 128, vocab
2,048, fp32 throughout. Per layer: attention q 256x256 + k, v 128x256 + o 256x256 =
196,608; one expert 3 x 256 x 128 = 98,304; router 4 x 256; norms 2 x 256 + 2 x 64.
"""

from __future__ import annotations

import pytest

from servelab.core.errors import ConfigError
from servelab.engines.embedded.presets import VOCAB_SIZE, get_preset
from servelab.model import (
    CpuSpec,
    count_params,
    cpu_ceiling,
    cpu_deploy,
    cpu_from_probe,
    cpu_step,
    datasheet_cpu,
    deploy,
)
from servelab.model.kernels import op_floor_s
from servelab.model.presets import MODEL_PRESETS

BANDWIDTH = 15e9
FP32 = 80e9
DISPATCH_US = 3.0
CONTEXT = 256 + 128 / 2

ATTENTION = 2 * 196_608
EXPERT = 98_304
ROUTER = 2 * 4 * 256
NORMS = 2 * (2 * 256 + 2 * 64) + 256
LM_HEAD = VOCAB_SIZE * 256
NON_EXPERT_BYTES = 4 * (ATTENTION + ROUTER + NORMS + LM_HEAD)
KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 64 * 4  # layers x (K, V) x KV heads x head_dim x fp32
OPS = 222  # 2 x (attention 49 + MoE 41) + 42 outside the layers (unfused, docs/MODEL.md)


def _cpu(**update: object) -> CpuSpec:
    spec = CpuSpec(
        name="test CPU",
        threads=1,
        memory_bandwidth_bytes_s=BANDWIDTH,
        fp32_flops=FP32,
        dispatch_us_per_op=DISPATCH_US,
        source="hand-written",
    )
    return spec.model_copy(update=update)


def test_tiny_equals_the_embedded_engine_preset():
    embedded = get_preset("tiny")
    config = MODEL_PRESETS["tiny"].config
    assert (config.hidden, config.layers, config.heads, config.kv_heads, config.head_dim) == (
        embedded.hidden_size,
        embedded.num_hidden_layers,
        embedded.num_attention_heads,
        embedded.num_key_value_heads,
        embedded.head_dim,
    )
    assert config.vocab == VOCAB_SIZE and embedded.dtype == "float32"
    assert count_params(config).total_params == embedded.parameter_count()
    assert count_params(config).active_params == embedded.active_parameter_count()


def test_single_stream_by_hand():
    cd = cpu_deploy("tiny", _cpu())
    step = cpu_step(cd, 1, CONTEXT)
    # Batch 1 picks 2 of 4 experts in each of the 2 layers.
    weights = NON_EXPERT_BYTES + 2 * 2 * EXPERT * 4
    kv = CONTEXT * KV_BYTES_PER_TOKEN
    assert step.weight_bytes == weights == 5_257_216
    assert step.kv_bytes == kv == 655_360
    assert step.memory_s == pytest.approx((weights + kv) / BANDWIDTH)
    # 2 FLOPs per weight a token multiplies, plus 4 x heads x head_dim per cached token.
    flops = 2 * (ATTENTION + ROUTER + LM_HEAD) + 2 * 2 * 2 * EXPERT + 2 * CONTEXT * 4 * 4 * 64
    assert step.flops == pytest.approx(flops)
    assert step.compute_s == pytest.approx(flops / FP32)
    assert step.bound == "memory" and step.roofline_s == step.memory_s
    assert step.ops == OPS
    assert step.dispatch_s == pytest.approx(OPS * DISPATCH_US * 1e-6)
    # Serial on the CPU: the work and the dispatch add up.
    assert step.floor_s == pytest.approx(step.memory_s + OPS * DISPATCH_US * 1e-6)
    assert step.floor_tokens_per_s == pytest.approx(1 / step.floor_s)


def test_a_batch_of_two_reads_three_experts_and_two_caches():
    step = cpu_step(cpu_deploy("tiny", _cpu()), 2, CONTEXT)
    # 4 x (1 - (1 - 2/4)^2) = 3 distinct experts per layer.
    assert step.weight_bytes == pytest.approx(NON_EXPERT_BYTES + 2 * 3 * EXPERT * 4)
    assert step.kv_bytes == pytest.approx(2 * CONTEXT * KV_BYTES_PER_TOKEN)
    assert step.ops == OPS  # one op serves the whole batch
    assert step.floor_tokens_per_s == pytest.approx(2 / step.floor_s)


def test_a_slow_matmul_makes_it_compute_bound():
    step = cpu_step(cpu_deploy("tiny", _cpu(fp32_flops=1e9)), 1, CONTEXT)
    assert step.bound == "compute" and step.roofline_s == pytest.approx(step.flops / 1e9)


def test_the_ceiling_by_batch_and_without_a_dispatch_figure():
    ceiling = cpu_ceiling(cpu_deploy("tiny", _cpu()), input_len=256, output_len=128)
    assert ceiling.single_stream.context_tokens == CONTEXT
    assert ceiling.single_stream_tokens_per_s == pytest.approx(1 / ceiling.single_stream.floor_s)
    rates = [s.floor_tokens_per_s or 0 for s in ceiling.throughput]
    assert [s.batch for s in ceiling.throughput] == [1, 2, 4, 8, 16, 32, 64]
    assert rates == sorted(rates)  # the ops are shared, so batching pays
    assert ceiling.kernels.per_step == OPS and ceiling.kv_dtype == "fp32"
    bare = cpu_ceiling(
        cpu_deploy("tiny", _cpu(dispatch_us_per_op=None)), input_len=256, output_len=128
    )
    assert bare.single_stream_tokens_per_s is None and bare.single_stream.floor_s is None
    assert bare.single_stream.roofline_s == ceiling.single_stream.roofline_s
    assert any("op floor is unknown" in a for a in bare.assumptions)


def test_the_op_floor_adds_on_a_cpu_and_overlaps_on_a_gpu():
    assert op_floor_s(100, 2.0, 0.001, serial=True) == pytest.approx(0.0012)
    assert op_floor_s(100, 2.0, 0.001) == pytest.approx(0.001)
    assert op_floor_s(1000, 2.0, 0.001, 0.0001) == pytest.approx(0.0021)


def test_bf16_on_the_cpu_needs_its_measured_rate():
    with pytest.raises(ConfigError, match="bf16 matmul rate"):
        cpu_deploy("tiny", _cpu(), weights="bf16")
    step = cpu_step(cpu_deploy("tiny", _cpu(bf16_flops=1e9), weights="bf16"), 1, CONTEXT)
    assert step.weight_bytes == pytest.approx(5_257_216 / 2)
    assert step.compute_s == pytest.approx(step.flops / 1e9)


def test_fp32_on_a_gpu_is_refused():
    with pytest.raises(ConfigError, match="no FP32 matmul rate"):
        deploy("llama-3.1-8b", gpu="h200", weights="fp32")


def test_datasheet_peaks():
    cpu = datasheet_cpu(
        name="two channels of DDR4-3200, AVX2",
        threads=4,
        memory_channels=2,
        memory_mt_s=3200,
        ghz=2.5,
        fp32_flops_per_cycle=32,
    )
    assert cpu.memory_bandwidth_bytes_s == 2 * 3200e6 * 8 == 51.2e9
    assert cpu.fp32_flops == 4 * 2.5e9 * 32 == 320e9
    assert cpu.dispatch_us_per_op is None
    with pytest.raises(ConfigError):
        datasheet_cpu(
            name="x", threads=0, memory_channels=1, memory_mt_s=1, ghz=1, fp32_flops_per_cycle=1
        )


def _probe(threads: int = 2, **row: object) -> dict[str, object]:
    entry = {
        "threads": threads,
        "memory_copy": {"bandwidth_gb_s": 12.5},
        "matmul": [{"dtype": "fp32", "tflop_s": 0.1}, {"dtype": "bf16", "tflop_s": 0.05}],
        "launch": {"eager_us_per_kernel": 2.5, "chain_verified": True},
        **row,
    }
    return {
        "schema": "servelab.probe/1",
        "host": {"cpu_model": "AMD EPYC", "memory_bytes": 1 << 34},
        "comm": {"cpu": {"cores": 4, "torch_threads": 4, "by_threads": [entry]}},
    }


def test_the_cpu_from_a_probe_at_the_engines_thread_count():
    cpu = cpu_from_probe(_probe(), 2, source="probe.json")
    assert cpu.name == "AMD EPYC" and cpu.threads == 2
    assert cpu.memory_bandwidth_bytes_s == 12.5e9
    assert cpu.fp32_flops == pytest.approx(0.1e12) and cpu.bf16_flops == pytest.approx(0.05e12)
    assert cpu.dispatch_us_per_op == 2.5 and cpu.memory_bytes == 1 << 34
    assert "probe.json" in cpu.source and "2 torch threads" in cpu.source
    broken = _probe(launch={"eager_us_per_kernel": 2.5, "chain_verified": False})
    assert cpu_from_probe(broken, 2).dispatch_us_per_op is None


def test_a_probe_says_which_cpu_evidence_is_missing():
    with pytest.raises(ConfigError, match="holds no CPU rates"):
        cpu_from_probe({"schema": "servelab.probe/1", "comm": None}, 1)
    with pytest.raises(ConfigError, match="at 2 threads, not at the engine's 1"):
        cpu_from_probe(_probe(), 1)
