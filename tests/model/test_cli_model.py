"""`servelab model`: tables, --json, --compare and bad input (one line, exit code 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from servelab.cli.model import model
from tests.model.test_calibration import H200_PROBE

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command()(model)
runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, list(args))


def test_tables_for_the_design_deployment():
    result = _run("--model", "glm-5-nvfp4", "--input-len", "256", "--output-len", "128")
    assert result.exit_code == 0, result.output
    for text in (
        "glm-5-nvfp4 on 8x rtx-pro-6000, tp=8",
        "single-stream ceiling",
        "KV capacity",
        "Decode step",
        "all-reduce (157)",
        "Throughput ceiling by concurrency (256 in, 128 out)",
        "Assumptions",
    ):
        assert text in result.output


def test_json_document():
    result = _run("--model", "glm-5-nvfp4", "--json", "--batch", "64", "--context", "320")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["schema"] == "servelab.model/1"
    assert document["layout"] == "tp=8"
    assert document["step"]["batch"] == 64 and document["step"]["context_tokens"] == 320
    assert document["single_stream_tokens_per_s"] > 55
    assert document["weights"]["attention"] == "bf16"
    assert document["kv"]["max_concurrency"] == document["throughput"][-1]["concurrency"]


def test_compare_layouts_side_by_side():
    args = ["--model", "glm-5-nvfp4", "--compare", "tp=8", "--compare", "tp=4,pp=2"]
    result = _run(*args)
    assert result.exit_code == 0, result.output
    assert "8x tp=8" in result.output and "8x tp=4,pp=2" in result.output
    document = json.loads(_run(*args, "--json").output)
    assert [r["layout"] for r in document["reports"]] == ["tp=8", "tp=4,pp=2"]


def test_calibrate_and_flags():
    result = _run(
        "--model", "h200-ref", "--calibrate", str(H200_PROBE), "--kv-dtype", "fp8",
        "--step-overhead-us", "50", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["kv_dtype"] == "fp8" and document["step_overhead_us"] == 50
    assert document["calibration"][0]["name"] == "memory bandwidth"
    assert "Calibrated from the probe" in _run("--model", "h200-ref", "--calibrate",
                                               str(H200_PROBE)).output  # fmt: skip


def test_config_json_path(tmp_path):
    from tests.model.hf_configs import LLAMA_31_8B

    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_31_8B))
    result = _run("--model", str(path), "--gpu", "h100", "--gpus", "2", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["layout"] == "tp=2"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "nope"], "unknown model 'nope'"),
        (["--model", "llama-3.1-8b"], "say which GPU"),
        (["--model", "llama-3.1-8b", "--gpu", "h999"], "unknown GPU 'h999'"),
        (["--model", "llama-3.1-8b", "--gpu", "h100", "--weights", "fp3"], "unknown weight"),
        (["--model", "glm-5-nvfp4", "--tp", "3"], "64 attention heads do not divide by tp=3"),
        (["--model", "glm-5-nvfp4", "--gpus", "8", "--pp", "3"], "do not divide into pp=3"),
        (["--model", "glm-5-nvfp4", "--gpus", "4"], "does not fit"),
        (["--model", "glm-5-nvfp4", "--compare", "tp=x"], "tp must be a positive"),
        (["--model", "glm-5-nvfp4", "--kv-dtype", "int2"], "unknown KV cache dtype"),
        (["--model", "glm-5-nvfp4", "--batch", "0"], "--batch must be at least 1"),
        (["--model", "glm-5-nvfp4", "--calibrate", str(H200_PROBE)], "not rtx-pro-6000"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(args, message):
    result = _run(*args)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_as_a_subprocess():
    base = [sys.executable, "-m", "servelab", "model", "--model", "h200-ref"]
    done = subprocess.run([*base, "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gpu"] == "h200"
    bad = subprocess.run([*base, "--tp", "3"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "tp=3" in bad.stderr
