"""The performance model against bytes, FLOPs and times counted by hand."""

from __future__ import annotations

import pytest

from servelab.core.errors import ConfigError
from servelab.model._costs import expected_distinct_experts
from servelab.model.analysis import analyze, throughput_curve
from servelab.model.comm import ALLREDUCE_LATENCY_S, SEND_LATENCY_S
from servelab.model.gpus import pcie_bandwidth_bytes_s
from servelab.model.perf import (
    decode_step,
    decode_step_s,
    deploy,
    kv_capacity,
    kv_capacity_tokens,
    prefill,
    prefill_s,
    step,
    step_s,
    weight_memory,
)

GIB = 2**30
PCIE = pcie_bandwidth_bytes_s(5, 16)
OVERHEAD_S = 100e-6


def test_dense_decode_step_by_hand(dense, gpu):
    dep = deploy(dense, gpu=gpu)
    result = decode_step(dep, 1, 10)
    # attention 2 x 12288, MLP 2 x 24576, norms 2 x 128 + 64, LM head 6400; 2 bytes each.
    assert result.weight_bytes == 2 * (2 * 12288 + 2 * 24576 + 320 + 6400) == 160896
    # 10 cached tokens x 2 layers x (K and V of 2 heads of 16) x 2 bytes.
    assert result.kv_bytes == 10 * 2 * (2 * 2 * 16) * 2 == 2560
    # 2 FLOPs per weight (norms aside) and 4 heads x 2 x 2 x 16 per cached token per layer.
    assert result.flops == 2 * 80128 + 2 * 10 * 4 * 2 * 2 * 16 == 165376
    assert result.memory_s == pytest.approx((160896 + 2560) / 1e12)
    assert result.compute_s == pytest.approx(165376 / 1e14)
    assert result.bound == "overhead"
    assert result.allreduces == 0 and result.communication_s == 0
    assert result.step_s == pytest.approx(163456 / 1e12 + OVERHEAD_S)
    assert decode_step_s(dep, 1, 10) == pytest.approx(result.step_s)
    assert result.tokens_per_s == pytest.approx(1 / result.step_s)


def test_moe_decode_step_by_hand(moe, gpu):
    dep = deploy(moe, gpu=gpu)
    result = decode_step(dep, 4, 0)
    expert = 3 * 64 * 32
    distinct = 8 * (1 - (1 - 2 / 8) ** 4)
    assert result.distinct_experts_per_layer == pytest.approx(distinct) == pytest.approx(5.46875)
    # attention, layer 0's MLP, layer 1's shared expert and router, norms, LM head.
    assert result.weight_bytes == 2 * (24576 + 24576 + expert + 512 + 320 + 6400)
    assert result.expert_bytes == pytest.approx(distinct * expert * 2)
    dense_flops = 2 * (24576 + 24576 + expert + 512 + 6400)
    assert result.flops == pytest.approx(4 * dense_flops + 4 * 2 * 2 * expert)


def test_expected_distinct_experts():
    assert expected_distinct_experts(256, 8, 1) == pytest.approx(8)
    assert expected_distinct_experts(256, 8, 2) == pytest.approx(8 + 8 * (1 - 8 / 256))
    assert expected_distinct_experts(256, 8, 10_000) == pytest.approx(256)
    assert expected_distinct_experts(256, 8, 64) == pytest.approx(256 * (1 - (248 / 256) ** 64))
    assert expected_distinct_experts(0, 0, 5) == 0


def test_more_batch_touches_more_experts(moe, gpu):
    dep = deploy(moe, gpu=gpu)
    steps = [decode_step(dep, b, 0).expert_bytes for b in (1, 2, 8, 64)]
    assert steps == sorted(steps)
    assert steps[0] == pytest.approx(2 * 3 * 64 * 32 * 2)  # k experts at batch 1
    assert steps[-1] == pytest.approx(8 * 3 * 64 * 32 * 2, rel=1e-6)  # all of them


def test_kv_capacity_by_hand(dense, gpu):
    dep = deploy(dense, gpu=gpu)
    weights = 2 * (2 * 12288 + 2 * 24576 + 320) + 2 * 6400 * 2
    assert weight_memory(dep).per_gpu_bytes == weights == 173696
    kv = kv_capacity(dep, 1000, 24)
    pool = 0.9 * 16 * GIB - weights - 2 * GIB
    assert kv.kv_pool_bytes_per_gpu == pytest.approx(pool)
    assert kv.kv_bytes_per_token == kv.kv_bytes_per_token_per_gpu == 2 * 2 * 2 * 16 * 2
    assert kv.capacity_tokens == int(pool / 256)
    assert kv.max_concurrency == kv.capacity_tokens // 1024
    assert kv_capacity_tokens(dep) == kv.capacity_tokens


def test_mla_kv_bytes_latent_and_indexer(mla, gpu):
    dep = deploy(mla, gpu=gpu, tp=2)
    kv = kv_capacity(dep)
    # (latent 32 + rope 8 + indexer key 8) x 2 bytes x 3 layers; the latent is not
    # sharded by tensor parallelism, so each GPU holds all of it.
    assert kv.kv_bytes_per_token == (32 + 8 + 8) * 2 * 3
    assert kv.kv_bytes_per_token_per_gpu == kv.kv_bytes_per_token
    fp8 = kv_capacity(deploy(mla, gpu=gpu, kv_dtype="fp8"))
    assert fp8.kv_bytes_per_token == kv.kv_bytes_per_token / 2


def test_dsa_reads_top_k_entries_and_every_index_key(mla, gpu):
    dep = deploy(mla, gpu=gpu)
    # Context 10, top-k 4: 4 latents of 40 values and 10 indexer keys of 8, per layer.
    assert decode_step(dep, 1, 10).kv_bytes == 3 * (4 * 40 + 10 * 8) * 2
    assert decode_step(dep, 1, 3).kv_bytes == 3 * (3 * 40 + 3 * 8) * 2


def test_gqa_kv_is_sharded_then_replicated_by_tp(dense, gpu):
    per_gpu = {tp: kv_capacity(deploy(dense, gpu=gpu, tp=tp)).kv_bytes_per_token_per_gpu
               for tp in (1, 2, 4)}  # fmt: skip
    assert per_gpu[1] == 256
    assert per_gpu[2] == 128  # one of the 2 KV heads per GPU
    assert per_gpu[4] == 128  # 4 GPUs, 2 heads: each head on two GPUs


def test_pipeline_halves_kv_per_gpu_and_adds_a_send(dense, gpu):
    dep = deploy(dense, gpu=gpu, pp=2)
    assert dep.gpus == 2
    assert kv_capacity(dep).kv_bytes_per_token_per_gpu == 128
    single = decode_step(dep, 1, 10)
    assert single.pp_send_s == pytest.approx(SEND_LATENCY_S["pcie"] + 64 * 2 / PCIE)
    assert single.pp_bubble_fraction == pytest.approx(0.5)  # one request, two stages
    # Two requests, two micro-batches: with long contexts (KV reads dominate) both stages
    # stay busy.
    assert decode_step(dep, 2, 1_000_000).pp_bubble_fraction == pytest.approx(0, abs=0.1)


def test_tensor_parallel_all_reduces_by_hand(dense, gpu):
    dep = deploy(dense, gpu=gpu, tp=2)
    result = decode_step(dep, 1, 10)
    latency = ALLREDUCE_LATENCY_S["pcie"]
    # Two per layer plus the embedding's, of 1 x 64 bf16 values, ring factor 2(n-1)/n = 1;
    # and the logits' all-gather, 100 fp32 values, factor (n-1)/n = 1/2.
    expected = 5 * (latency + 64 * 2 / PCIE) + latency + 100 * 4 / 2 / PCIE
    assert result.allreduces == 5
    assert result.allreduce_s == pytest.approx(expected)
    assert result.weight_bytes == pytest.approx(decode_step(deploy(dense, gpu=gpu), 1, 10)
                                                .weight_bytes / 2, rel=0.01)  # fmt: skip


def test_expert_parallel_splits_experts_and_adds_all_to_all(moe, gpu):
    tp_only = decode_step(deploy(moe, gpu=gpu, tp=2), 16, 0)
    with_ep = decode_step(deploy(moe, gpu=gpu, tp=2, ep=2), 16, 0)
    assert with_ep.alltoall_s > 0 and tp_only.alltoall_s == 0
    assert with_ep.expert_bytes == pytest.approx(tp_only.expert_bytes)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tp": 3}, "4 attention heads do not divide by tp=3"),
        ({"gpus": 3, "tp": 2}, "uses tp x pp x dp = 2 GPUs, not 3"),
        ({"gpus": 4, "pp": 3}, "4 GPUs do not divide into pp=3"),
        ({"pp": 3}, "more than the model's 2 layers"),
        ({"tp": 2, "ep": 2}, "needs a MoE model"),
        ({"weights": "fp3"}, "unknown weight format"),
        ({"mem_fraction": 1.5}, "memory fraction"),
    ],
)
def test_bad_layouts_and_options(dense, gpu, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        deploy(dense, gpu=gpu, **kwargs)


def test_ep_must_divide(moe, gpu):
    with pytest.raises(ConfigError, match="ep=4 must divide tp x dp = 2"):
        deploy(moe, gpu=gpu, tp=2, ep=4)


def test_a_model_that_does_not_fit(dense, gpu):
    small = gpu.model_copy(update={"memory_bytes": GIB})
    with pytest.raises(ConfigError, match="does not fit"):
        deploy(dense, gpu=small)


def test_gpu_must_be_named_without_a_preset(dense):
    with pytest.raises(ConfigError, match="say which GPU"):
        deploy(dense)


def test_prefill_by_hand(dense, gpu):
    dep = deploy(dense, gpu=gpu)
    result = prefill(dep, 10)
    # 10 tokens through every weight; causal attention over 55 pairs in each of 2 layers.
    assert result.flops == 10 * 2 * 80128 + 2 * 55 * 4 * 2 * 2 * 16
    assert result.prefill_tokens == 10
    assert prefill_s(dep, 10) == pytest.approx(result.step_s)
    assert prefill_s(dep, 10, context_tokens=100) > prefill_s(dep, 10)


def test_mixed_step_costs_more_than_either_part(moe, gpu):
    dep = deploy(moe, gpu=gpu)
    mixed = step_s(dep, decode_batch=8, context_tokens=100, prefill_tokens=256)
    assert mixed > decode_step_s(dep, 8, 100)
    assert mixed > prefill_s(dep, 256)
    assert step(dep, decode_batch=8, context_tokens=100, prefill_tokens=256).step_s == mixed


def test_throughput_curve_goes_up_to_the_kv_limit(moe, gpu):
    dep = deploy(moe, gpu=gpu, mem_fraction=0.2)
    limit = kv_capacity(dep, 256, 128).max_concurrency
    curve = throughput_curve(dep, 256, 128)
    assert [p.concurrency for p in curve][:3] == [1, 2, 4]
    assert curve[-1].concurrency == limit
    outputs = [p.output_tokens_per_s for p in curve]
    assert outputs == sorted(outputs)
    for point in curve:
        assert point.total_tokens_per_s == pytest.approx(point.output_tokens_per_s * 3)


def test_glm5_single_stream_ceiling_is_far_above_the_measured_11():
    dep = deploy("glm-5-nvfp4")
    assert (dep.gpu.slug, dep.gpus, dep.layout.tp) == ("rtx-pro-6000", 8, 8)
    report = analyze(dep, input_len=256, output_len=128)
    assert report.single_stream_tokens_per_s > 5 * 11
    assert report.weight_memory.model_bytes == pytest.approx(441e9, rel=0.02)
    assert report.kv.max_concurrency > 256
    by_level = {p.concurrency: p.total_tokens_per_s for p in report.throughput}
    assert by_level[64] > 757.54  # DESIGN.md's measured total tok/s at 64


def test_h200_ref_single_stream_is_memory_bound():
    report = analyze(deploy("h200-ref"), input_len=256, output_len=128)
    assert report.gpu == "h200" and report.gpus == 1
    assert report.single_stream.bound == "memory"
    # k of 32 experts and the attention of 16 layers, bf16, at 4.8 TB/s, plus 100 us.
    assert 1000 < report.single_stream_tokens_per_s < 3000


@pytest.mark.parametrize("key", ["tp", "pp", "dp", "ep"])
def test_a_degree_too_large_for_any_machine_is_one_config_error(key):
    # 10**400 overflows a float: it must be refused before any arithmetic, by name
    with pytest.raises(ConfigError, match=f"{key} must be at most 1,048,576"):
        deploy("llama-3.1-8b", gpu="h100", **{key: 10**400})
