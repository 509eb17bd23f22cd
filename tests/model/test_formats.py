"""Weight formats: bits per value and the conventional plans."""

from __future__ import annotations

import pytest

from servelab.core.errors import ConfigError
from servelab.model.formats import (
    FORMAT_BITS,
    KV_DTYPE_BYTES,
    Format,
    KvDtype,
    parse_format,
    parse_kv_dtype,
    weight_plan,
)


def test_bits_per_value():
    assert FORMAT_BITS[Format.BF16] == 16
    assert FORMAT_BITS[Format.FP8] == 8
    assert FORMAT_BITS[Format.NVFP4] == 4 + 8 / 16
    assert FORMAT_BITS[Format.INT4] == 4 + 16 / 128
    assert KV_DTYPE_BYTES[KvDtype.BF16] == 2 and KV_DTYPE_BYTES[KvDtype.FP8] == 1


def test_plans_keep_embeddings_and_routers_bf16():
    for fmt in Format:
        if fmt == Format.FP32:
            continue
        plan = weight_plan(fmt)
        assert plan.embeddings == plan.router == Format.BF16
        assert plan.mlp == fmt


def test_an_fp32_checkpoint_is_fp32_throughout():
    plan = weight_plan("fp32")
    assert {plan.attention, plan.mlp, plan.embeddings, plan.router} == {Format.FP32}
    assert FORMAT_BITS[Format.FP32] == 32 and KV_DTYPE_BYTES[KvDtype.FP32] == 4


def test_four_bit_plans_keep_attention_bf16_unless_told():
    assert weight_plan("nvfp4").attention == Format.BF16
    assert weight_plan("int4").attention == Format.BF16
    assert weight_plan("fp8").attention == Format.FP8
    assert weight_plan("nvfp4", attention="fp8").attention == Format.FP8


def test_bad_names():
    with pytest.raises(ConfigError, match=r"unknown weight format 'fp3'.*bf16, fp8, nvfp4, int4"):
        parse_format("fp3")
    with pytest.raises(ConfigError, match="unknown KV cache dtype"):
        parse_kv_dtype("int8")
    assert parse_format(" NVFP4 ") == Format.NVFP4
