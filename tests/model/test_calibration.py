"""Calibration from `servelab probe --comm` documents: the real H200 file and crafted sweeps."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from servelab.core.errors import ConfigError
from servelab.model.analysis import analyze
from servelab.model.calibration import apply_calibration, calibration_from_probe
from servelab.model.comm import comm_model
from servelab.model.deployment import replaced_figures
from servelab.model.gpus import gpu_by_slug
from servelab.model.perf import decode_step, deploy

H200_PROBE = (
    Path(__file__).resolve().parents[2] / "benchmarks/gpu/results/h200-probe/probe-comm.json"
)


@pytest.fixture
def probe() -> dict:
    return json.loads(H200_PROBE.read_text())


def _with_sweep(probe: dict, world_size: int = 8) -> dict:
    """The H200 document with a two-GPU P2P pair and an 8-rank all-reduce sweep added."""
    document = copy.deepcopy(probe)
    point = {"min_time_us": 1.0, "max_time_us": 1.0}
    document["comm"]["p2p"] = [
        {
            "gpu_a": 0,
            "gpu_b": 1,
            "p2p_access_reported": True,
            "copy_verified": True,
            "a_to_b": [
                {**point, "size_bytes": 4096, "time_us": 6.0, "bandwidth_gb_s": 0.68},
                {**point, "size_bytes": 2**28, "time_us": 5000.0, "bandwidth_gb_s": 53.7},
            ],
            "b_to_a": [
                {**point, "size_bytes": 4096, "time_us": 7.0, "bandwidth_gb_s": 0.59},
                {**point, "size_bytes": 2**28, "time_us": 6600.0, "bandwidth_gb_s": 40.7},
            ],
        }
    ]
    document["comm"]["allreduce"] = {
        "world_size": world_size,
        "backend": "nccl",
        "device_type": "cuda",
        "dtype": "bfloat16",
        "warmup_iterations": 5,
        "iterations": 20,
        "points": [
            {
                "size_bytes": 1024,
                "count": 512,
                "dtype": "bfloat16",
                "time_us": 20.0,
                "algbw_gb_s": 0.05,
                "busbw_gb_s": 0.09,
            },
            {
                "size_bytes": 1 << 20,
                "count": 1 << 19,
                "dtype": "bfloat16",
                "time_us": 60.0,
                "algbw_gb_s": 17.5,
                "busbw_gb_s": 30.6,
            },
        ],
    }
    return document


def test_real_h200_probe(probe):
    calibration = calibration_from_probe(H200_PROBE)
    assert calibration.gpu_slug == "h200"
    assert calibration.memory_bandwidth_bytes_s == pytest.approx(4258.07e9, rel=1e-4)
    assert calibration.bf16_flops == pytest.approx(780.27e12, rel=1e-4)
    assert calibration.fp8_flops == pytest.approx(1472.66e12, rel=1e-4)
    # One GPU: no P2P pair and no all-reduce were measured, so links keep the datasheet.
    assert calibration.allreduce == () and calibration.link_bandwidth_bytes_s is None
    assert calibration_from_probe(probe) == calibration.model_copy(update={"source": "<dict>"})


def test_real_probe_replaces_memory_and_matmul_rates():
    gpu = gpu_by_slug("h200")
    calibrated, replaced = apply_calibration(gpu, calibration_from_probe(H200_PROBE))
    assert calibrated.memory_bandwidth_bytes_s == pytest.approx(4258.07e9, rel=1e-4)
    assert calibrated.bf16_dense_flops == pytest.approx(780.27e12, rel=1e-4)
    assert [r.name for r in replaced] == ["memory bandwidth", "bf16 matmul", "fp8 matmul"]
    assert replaced[0].datasheet == pytest.approx(4800)
    assert replaced[0].calibrated == pytest.approx(4258.07, rel=1e-4)


def test_calibrated_ceiling_is_lower_by_the_bandwidth_ratio():
    plain = deploy("h200-ref")
    measured = deploy("h200-ref", calibration=H200_PROBE)
    busy_plain = decode_step(plain, 1, 384).gpu_busy_s
    busy_measured = decode_step(measured, 1, 384).gpu_busy_s
    assert busy_measured / busy_plain == pytest.approx(4800 / 4258.07, rel=1e-3)
    report = analyze(measured, input_len=256, output_len=128)
    assert [r.name for r in report.calibration][:1] == ["memory bandwidth"]
    assert not any("datasheet peaks" in note for note in report.assumptions)


def test_fp4_rate_scales_with_fp8s_measured_fraction(probe):
    document = copy.deepcopy(probe)
    for device in document["comm"]["devices"]:
        device["catalogue_slug"] = "b200"
    gpu = gpu_by_slug("b200")
    calibrated, replaced = apply_calibration(gpu, calibration_from_probe(document))
    fraction = 1472.66e12 / gpu.fp8_dense_flops
    assert calibrated.fp4_dense_flops == pytest.approx(gpu.fp4_dense_flops * fraction, rel=1e-4)
    assert "fp8's measured fraction" in replaced[-1].how


def test_measured_all_reduce_sweep_is_interpolated(probe):
    calibration = calibration_from_probe(_with_sweep(probe))
    assert calibration.allreduce_world_size == 8
    assert calibration.link_bandwidth_bytes_s == pytest.approx(40.7e9)  # slowest direction
    assert calibration.send_latency_s == pytest.approx(7e-6)
    comm = comm_model(gpu_by_slug("h200"), calibration)
    assert comm.allreduce_s(512, 8) == pytest.approx(20e-6)  # below the sweep: its floor
    middle = 1024 + (1 << 20) / 2
    assert comm.allreduce_s(middle, 8) == pytest.approx(40e-6, rel=1e-3)
    assert comm.allreduce_s(2 << 20, 8) == pytest.approx(120e-6)  # above: its algbw
    # Other rank counts: the sweep's floor and best bus bandwidth in the formula.
    assert comm.allreduce_s(1 << 20, 4) == pytest.approx(20e-6 + (1 << 20) * 1.5 / 30.6e9)


def test_link_replacements_are_reported(probe, tmp_path):
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(_with_sweep(probe)))
    dep = deploy("h200-ref", calibration=path)
    names = [r.name for r in replaced_figures(dep)]
    assert "GPU-to-GPU link bandwidth" in names
    assert "all-reduce latency" in names
    assert any(name.startswith("all-reduce time by size (8 ranks)") for name in names)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema="other/1"), "not a servelab probe document"),
        (lambda d: d.update(comm=None), "has no measurements"),
        (
            lambda d: d["comm"].update(memory_copy=None, matmul=None),
            "holds no usable measurement",
        ),
    ],
)
def test_bad_probe_documents(probe, change, message):
    change(probe)
    with pytest.raises(ConfigError, match=message):
        calibration_from_probe(probe)


def test_probe_of_another_gpu_is_refused():
    with pytest.raises(ConfigError, match="measured h200 GPUs, not rtx-pro-6000"):
        deploy("glm-5-nvfp4", calibration=H200_PROBE)


def test_unreadable_probe_files(tmp_path):
    with pytest.raises(ConfigError, match="no probe file"):
        calibration_from_probe(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ConfigError, match="is not JSON"):
        calibration_from_probe(bad)
