"""benchmarks/gpu/decode_step.py runs end to end on the CPU with the tiny preset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.engines.embedded import get_preset
from tests.ci import require_module

require_module("torch")
require_module("transformers")

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu" / "decode_step.py"


def test_decode_step_script_on_cpu(tmp_path: Path):
    out = tmp_path / "decode.json"
    command = [sys.executable, str(SCRIPT), "--preset", "tiny", "--device", "cpu"]
    command += ["--batch", "1,2", "--context", "16", "--warmup", "1", "--iters", "3"]
    # 16 tokens per prefill forward: the batch of 2 is prefilled in two chunks.
    command += ["--prefill-chunk-tokens", "16", "--json-out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| batch | experts | eager ms | graph ms |" in result.stdout

    document = json.loads(out.read_text())
    preset = get_preset("tiny")
    assert document["device"] == "cpu"
    assert document["dtype"] == "float32"
    assert document["parameters"] == preset.parameter_count()
    assert document["weight_bytes"] == 4 * preset.parameter_count()
    rows = document["rows"]
    assert [(row["batch"], row["experts"]) for row in rows] == [
        (1, "grouped_mm"),
        (1, "eager"),
        (2, "grouped_mm"),
        (2, "eager"),
    ]
    for row in rows:
        assert row["error"] is None, row
        assert row["eager_ms"] > 0
        assert row["eager_tok_s"] == pytest.approx(row["batch"] / row["eager_ms"] * 1e3)
        assert row["graph_ms"] is None
        assert "CUDA" in row["graph_error"]
        top_k = preset.num_experts_per_tok
        assert top_k <= row["experts_per_layer"] <= min(preset.num_experts, row["batch"] * top_k)
        # layers x (keys + values) x batch x KV heads x (16 + 1) slots x head dim x 4 bytes
        slots = preset.num_key_value_heads * 17 * preset.head_dim
        assert row["kv_bytes"] == preset.num_hidden_layers * 2 * row["batch"] * slots * 4
        assert 0 < row["floor_weights_ms"] < row["floor_ms"]
        assert row["weight_bytes_touched"] < document["weight_bytes"]
