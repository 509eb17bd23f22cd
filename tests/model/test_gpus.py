"""The GPU catalogue: figures, lookups by slug and by NVML name, PCIe arithmetic."""

from __future__ import annotations

import pydantic
import pytest

from servelab.core.errors import ConfigError
from servelab.model.gpus import (
    GPUS,
    GpuSpec,
    UnknownGpuError,
    gpu_by_slug,
    gpu_for_nvml_name,
    pcie_bandwidth_bytes_s,
)

GIB = 2**30


def test_catalogue_holds_the_expected_gpus():
    assert set(GPUS) == {"h100", "h200", "b200", "rtx-pro-6000", "l40s", "a100", "rtx-5090"}
    for slug, spec in GPUS.items():
        assert spec.slug == slug


@pytest.mark.parametrize(
    ("slug", "memory_gib", "bandwidth_tb_s", "bf16_tflops", "fp8_tflops", "fp4_tflops", "watts"),
    [
        ("h100", 80, 3.35, 989.5, 1979, None, 700),
        ("h200", 141, 4.8, 989.5, 1979, None, 700),
        ("b200", 180, 8.0, 2250, 4500, 9000, 1000),
        ("rtx-pro-6000", 96, 1.6, 500, 1000, 2000, 600),
        ("l40s", 48, 0.864, 362.05, 733, None, 350),
        ("a100", 80, 2.039, 312, None, None, 400),
        ("rtx-5090", 32, 1.792, 209.5, 419, 1676, 575),
    ],
)
def test_datasheet_figures(
    slug, memory_gib, bandwidth_tb_s, bf16_tflops, fp8_tflops, fp4_tflops, watts
):
    spec = gpu_by_slug(slug)
    assert spec.memory_bytes == memory_gib * GIB
    assert spec.memory_bandwidth_bytes_s == pytest.approx(bandwidth_tb_s * 1e12)
    assert spec.bf16_dense_flops == pytest.approx(bf16_tflops * 1e12)
    for value, expected in ((spec.fp8_dense_flops, fp8_tflops), (spec.fp4_dense_flops, fp4_tflops)):
        assert value == (None if expected is None else pytest.approx(expected * 1e12))
    assert spec.power_limit_w == watts


def test_links():
    assert gpu_by_slug("h100").nvlink_bandwidth_bytes_s == pytest.approx(900e9)
    assert gpu_by_slug("h200").nvlink_bandwidth_bytes_s == pytest.approx(900e9)
    assert gpu_by_slug("b200").nvlink_bandwidth_bytes_s == pytest.approx(1.8e12)
    assert gpu_by_slug("a100").nvlink_bandwidth_bytes_s == pytest.approx(600e9)
    pro = gpu_by_slug("rtx-pro-6000")
    assert pro.nvlink_bandwidth_bytes_s is None
    assert (pro.pcie_gen, pro.pcie_width) == (5, 16)
    assert (gpu_by_slug("l40s").pcie_gen, gpu_by_slug("l40s").pcie_width) == (4, 16)
    assert pro.pcie_bandwidth_bytes_s == pytest.approx(63.0e9, rel=1e-3)


def test_assumed_figures_are_marked_and_name_real_fields():
    assert "bf16_dense_flops" in gpu_by_slug("rtx-pro-6000").assumed
    assert "bf16_dense_flops" in gpu_by_slug("rtx-5090").assumed
    assert gpu_by_slug("h200").assumed == ()
    for spec in GPUS.values():
        assert set(spec.assumed) <= set(GpuSpec.model_fields)


def test_specs_are_frozen():
    with pytest.raises(pydantic.ValidationError):
        gpu_by_slug("h200").power_limit_w = 1


def test_gpu_by_slug_is_forgiving_about_case_and_spaces():
    assert gpu_by_slug(" H200 ").slug == "h200"


def test_unknown_slug_is_a_key_error_and_a_config_error_listing_valid_slugs():
    with pytest.raises(KeyError) as info:
        gpu_by_slug("h300")
    error = info.value
    assert isinstance(error, UnknownGpuError)
    assert isinstance(error, ConfigError)
    message = str(error)
    assert message.startswith("unknown GPU 'h300'")  # not quoted as a KeyError repr
    for slug in GPUS:
        assert slug in message


@pytest.mark.parametrize(
    ("nvml_name", "slug"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA GeForce RTX 5090", "rtx-5090"),
        ("nvidia h200", "h200"),
        # Siblings with other figures are not matched to these entries.
        ("NVIDIA H200 NVL", None),
        ("NVIDIA H100 PCIe", None),
        ("NVIDIA GB200", None),
        ("NVIDIA A100 80GB PCIe", None),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", None),
        ("NVIDIA GeForce RTX 5090 Laptop GPU", None),
        ("Tesla T4", None),
    ],
)
def test_gpu_for_nvml_name(nvml_name, slug):
    spec = gpu_for_nvml_name(nvml_name)
    assert (spec.slug if spec else None) == slug


@pytest.mark.parametrize(
    ("gen", "width", "gb_s"),
    [(3, 16, 15.75), (4, 16, 31.51), (5, 16, 63.02), (6, 16, 121.0), (5, 8, 31.51), (4, 1, 1.969)],
)
def test_pcie_bandwidth_per_direction(gen, width, gb_s):
    assert pcie_bandwidth_bytes_s(gen, width) / 1e9 == pytest.approx(gb_s, rel=1e-3)


@pytest.mark.parametrize(("gen", "width"), [(7, 16), (0, 16), (5, 0)])
def test_pcie_bandwidth_refuses_unknown_links(gen, width):
    with pytest.raises(ValueError):
        pcie_bandwidth_bytes_s(gen, width)
