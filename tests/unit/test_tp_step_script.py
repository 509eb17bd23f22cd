"""benchmarks/gpu/tp_step.py runs its ranks on the CPU (gloo) with the tiny preset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from servelab.engines.embedded import get_preset
from tests.ci import require_module

require_module("torch")

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu" / "tp_step.py"


def test_tp_step_script_on_cpu(tmp_path: Path):
    out = tmp_path / "tp.json"
    command = [sys.executable, str(SCRIPT), "--preset", "tiny", "--device", "cpu"]
    # Batch 3 at tp 2 pads ep's token slices (2 + 1 real tokens).
    command += ["--tp", "1,2", "--batch", "1,3", "--context", "8", "--experts", "both"]
    command += ["--warmup", "1", "--iters", "2", "--json-out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| tp | experts | batch | KV heads/rank |" in result.stdout

    document = json.loads(out.read_text())
    preset = get_preset("tiny")
    layers = preset.num_hidden_layers
    assert (document["device"], document["dtype"], document["preset"]) == ("cpu", "float32", "tiny")
    assert document["context"] == 8
    assert document["p2p_disabled"] in (True, False)
    assert document["schema"] == "servelab.bench.tp_step/2"
    assert document["embedding"] == "vocab-parallel, all_reduce"
    assert document["errors"] == []
    rows = document["rows"]
    assert [(row["tp"], row["experts"], row["batch"]) for row in rows] == [
        (tp, mode, batch) for tp in (1, 2) for mode in ("tp", "ep") for batch in (1, 3)
    ]
    for row in rows:
        issued = row["collectives_per_step"]
        if row["tp"] == 1:
            assert issued == {} and row["max_abs_diff"] == 0.0
        else:
            # 2 per layer and the vocab-parallel embedding's, then the logits' gather.
            expected = {"all_reduce": 2 * layers + 1, "all_gather": 1}
            if row["experts"] == "ep":
                expected["all_to_all"] = 2 * layers  # every tiny layer is MoE
            assert issued == expected
        assert row["model_collectives_per_step"] == issued
        assert row["collectives_match_model"] is True
        # tiny has 2 KV heads: split at tp 1 and 2.
        assert (row["kv_heads"], row["kv_heads_per_rank"]) == ("split", 2 // row["tp"])
        assert row["check_passed"] and row["max_abs_diff"] <= document["tolerance"]
        assert row["eager_ms"] > 0 and row["compute_ms"] > 0
        assert row["comm_ms"] == row["eager_ms"] - row["compute_ms"]
        assert row["graph_ms"] is None and "skipped" in row["graph_error"]


def test_tp_step_script_rejects_a_tp_the_heads_cannot_split():
    command = [sys.executable, str(SCRIPT), "--preset", "tiny", "--device", "cpu", "--tp", "8"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--tp 8" in lines[0] and "heads" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
