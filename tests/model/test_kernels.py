"""Kernels per decode step by layer kind, the kernel floor, and its calibration by a probe."""

from __future__ import annotations

import copy
import json

import pytest
from typer.testing import CliRunner

from servelab.core.errors import ConfigError
from servelab.model import (
    KernelStyle,
    Layout,
    ModelConfig,
    analyze,
    calibration_from_probe,
    count_kernels,
    decode_step,
    deploy,
    gpu_by_slug,
    kernel_counts,
    kernel_floor,
)
from servelab.model.deployment import replaced_figures
from servelab.model.gpus import EAGER_KERNEL_US, GRAPH_EMPTY_KERNEL_US, GRAPH_KERNEL_US
from servelab.model.kernels import KERNEL_TABLES
from tests.model.test_calibration import H200_PROBE
from tests.model.test_cli_model import app

UNFUSED, FUSED = KERNEL_TABLES[KernelStyle.UNFUSED], KERNEL_TABLES[KernelStyle.FUSED]


def test_h200_ref_unfused_is_the_profiled_step():
    """torch.profiler on an H200: 1,482 kernels, 90 per layer, 42 outside the layers."""
    counts = kernel_counts(deploy("h200-ref"))
    assert counts.style == "unfused"
    assert counts.per_step == 1482
    assert counts.attention == 16 * 49 and counts.moe == 16 * 41
    assert (counts.attention + counts.moe) / 16 == 90
    outside = counts.embedding + counts.other + counts.final_norm + counts.lm_head
    assert outside + counts.sampling == 42
    assert counts.collectives == counts.dense_mlp == counts.shared_experts == 0


def test_fused_counts_each_custom_op_once():
    counts = kernel_counts(deploy("h200-ref", kernels="fused"))
    per_layer = (FUSED.norm + FUSED.gqa + FUSED.qk_norm) + (
        FUSED.norm + FUSED.router + FUSED.dispatch + FUSED.expert_gemms
    )
    per_layer += FUSED.activation + FUSED.combine
    assert counts.per_step == 16 * per_layer + 1 + 2 + 1 + 1 + 4
    assert counts.per_step < kernel_counts(deploy("h200-ref")).per_step / 5


def test_dense_layers_and_shared_experts(moe: ModelConfig):
    """Layer 0 dense, layer 1 MoE with one ungated shared expert."""
    counts = count_kernels(moe, Layout(), KernelStyle.UNFUSED)
    t = UNFUSED
    assert counts.dense_mlp == t.norm + t.dense_mlp + t.residual
    routed = t.router + t.dispatch + t.expert_gemms + t.activation + t.combine
    assert counts.moe == t.norm + routed + t.residual
    assert counts.shared_experts == t.shared_experts
    gated = moe.model_copy(update={"shared_expert_gate": True})
    assert count_kernels(gated, Layout(), KernelStyle.UNFUSED).shared_experts == (
        t.shared_experts + t.shared_gate
    )


def test_mla_and_its_indexer(mla: ModelConfig):
    t = FUSED
    with_dsa = count_kernels(mla, Layout(), KernelStyle.FUSED).attention
    assert with_dsa == 3 * (t.norm + t.mla + t.dsa_indexer)
    plain = mla.model_copy(update={"sparse_attention": None})
    assert count_kernels(plain, Layout(), KernelStyle.FUSED).attention == 3 * (t.norm + t.mla)
    no_rank = plain.model_copy(
        update={"mla": plain.mla.model_copy(update={"q_lora_rank": None})}  # type: ignore[union-attr]
    )
    attention = count_kernels(no_rank, Layout(), KernelStyle.FUSED).attention
    assert attention == 3 * (t.norm + t.mla_no_q_rank)


def test_parallelism_adds_its_collectives(moe: ModelConfig):
    alone = count_kernels(moe, Layout(), KernelStyle.FUSED)
    tp = count_kernels(moe, Layout(tp=2), KernelStyle.FUSED)
    assert tp.collectives == 2 * moe.layers + 2  # 2 per layer, the embedding's, the gather
    assert tp.per_step - alone.per_step == tp.collectives
    ep = count_kernels(moe, Layout(tp=2, ep=2), KernelStyle.FUSED)
    assert ep.collectives - tp.collectives == 2 * len(moe.moe_layers)  # dispatch, combine
    assert count_kernels(moe, Layout(pp=2), KernelStyle.FUSED).collectives == 1


def test_the_floor_is_the_kernels_or_the_gpu_work_whichever_is_longer():
    dep = deploy("h200-ref")
    step = decode_step(dep, 1, 544)
    floor = kernel_floor(dep, 1, 544)
    assert (floor.eager_us_per_kernel, floor.graph_us_per_kernel) == (
        EAGER_KERNEL_US,
        GRAPH_KERNEL_US,
    )
    assert floor.gpu_work_s == pytest.approx(step.gpu_busy_s + step.communication_s)
    assert floor.graph_floor_s == pytest.approx(1482 * 2.8e-6 + step.overhead_s)
    assert floor.eager_floor_s == pytest.approx(1482 * 7.0e-6 + step.overhead_s)
    assert floor.graph_floor_s > 9 * step.step_s  # h200-ref: kernel-latency bound
    assert floor.graph_tokens_per_s == pytest.approx(1 / floor.graph_floor_s)
    # A large model at a large batch is bound by its bytes: the floor is the roofline.
    big = deploy("llama-3.1-70b", gpu="h200", gpus=4)
    wide = kernel_floor(big, 64, 2048)
    assert wide.graph_floor_s == pytest.approx(decode_step(big, 64, 2048).step_s)
    assert wide.eager_floor_s >= wide.graph_floor_s


def test_the_style_comes_from_the_preset_or_the_caller():
    assert deploy("h200-ref").kernels is KernelStyle.UNFUSED  # served by transformers
    assert deploy("glm-5-nvfp4").kernels is KernelStyle.FUSED
    assert deploy("glm-5-nvfp4", kernels="unfused").kernels is KernelStyle.UNFUSED
    with pytest.raises(ConfigError, match="unknown kernel style"):
        deploy("h200-ref", kernels="compiled")


def test_every_gpu_states_where_its_latencies_come_from():
    for slug in ("h100", "h200"):
        assert "measured" in gpu_by_slug(slug).kernel_latency_source
    assert gpu_by_slug("b200").kernel_latency_source.startswith("assumed")


def _launch_probe(eager_us: float, graph_us: float) -> dict:
    document = copy.deepcopy(json.loads(H200_PROBE.read_text()))
    row = {
        "device": "cuda:0",
        "kernels": 1000,
        "elements": 1024,
        "eager_us_per_kernel": eager_us,
        "eager_min_us_per_kernel": eager_us,
        "eager_max_us_per_kernel": eager_us,
        "graph_us_per_kernel": graph_us,
        "graph_min_us_per_kernel": graph_us,
        "graph_max_us_per_kernel": graph_us,
        "graph_replays": 5,
        "chain_verified": True,
    }
    cpu = {**row, "device": "cpu", "eager_us_per_kernel": 1.0, "graph_us_per_kernel": None}
    broken = {**row, "device": "cuda:1", "eager_us_per_kernel": 99.0, "chain_verified": False}
    document["comm"]["launch"] = [row, {**row, "device": "cuda:2"}, cpu, broken]
    return document


def test_a_probes_launch_chain_calibrates_the_floor():
    calibration = calibration_from_probe(_launch_probe(eager_us=10.7, graph_us=1.1))
    assert calibration.eager_kernel_s == pytest.approx(10.7e-6)  # not the CPU, not the broken
    assert calibration.graph_kernel_s == pytest.approx(1.1e-6)
    dep = deploy("h200-ref", calibration=calibration)
    floor = kernel_floor(dep, 1, 544)
    assert floor.eager_us_per_kernel == pytest.approx(10.7)
    # Empty kernels replay faster than a decode step's: scaled, not copied.
    assert floor.graph_us_per_kernel == pytest.approx(GRAPH_KERNEL_US * 1.1 / GRAPH_EMPTY_KERNEL_US)
    assert "launch chain" in floor.source
    names = {r.name: r for r in replaced_figures(dep)}
    assert names["eager dispatch per kernel"].datasheet == EAGER_KERNEL_US
    assert names["graph replay per kernel"].calibrated == pytest.approx(3.08)


def test_a_probe_of_launches_alone_is_a_usable_calibration():
    document = _launch_probe(eager_us=8.0, graph_us=1.0)
    comm = document["comm"]
    for part in ("memory_copy", "matmul", "p2p", "allreduce"):
        comm[part] = None
    assert calibration_from_probe(document).eager_kernel_s == pytest.approx(8e-6)


def test_the_report_and_the_cli_show_the_floor_beside_the_roofline():
    report = analyze(deploy("h200-ref"), input_len=512, output_len=64)
    assert report.kernel_floor.graph_floor_s > report.single_stream.step_s
    result = CliRunner().invoke(app, ["--model", "h200-ref", "--input-len", "512"])
    assert result.exit_code == 0, result.output
    for text in ("roofline", "kernel floor, CUDA graphs", "kernel floor, eager", "1,482"):
        assert text in result.output
    document = json.loads(
        CliRunner().invoke(app, ["--model", "h200-ref", "--kernels", "fused", "--json"]).output
    )
    assert document["kernel_floor"]["kernels"]["style"] == "fused"
    assert document["kernel_floor"]["graph_floor_s"] > 0
