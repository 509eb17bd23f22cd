"""`tune kernels` through Typer's runner: the plan as text and JSON, and every bad input
as one line and a non-zero exit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from servelab.cli import tune_kernels as cli
from tests.tune.kernels.checkpoints import DEEPSEEK_V3, write_checkpoint

runner = CliRunner()
app = typer.Typer()
app.command()(cli.kernels)


@app.callback()
def _group() -> None:
    """A group, so the command is invoked by name as `servelab tune kernels` will be."""


def invoke(*args: str):
    return runner.invoke(app, ["kernels", *args], catch_exceptions=False)


def spec_file(tmp_path: Path, **fields) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"engine": "sglang", "model": "glm-5-nvfp4", "tp": 8, **fields}))
    return path


def test_plan_as_json(tmp_path):
    model = write_checkpoint(tmp_path / "dsv3", DEEPSEEK_V3)
    configs = tmp_path / "configs"
    (configs / "triton_3_4_0").mkdir(parents=True)
    spec = spec_file(tmp_path, model=str(model), options={"python": sys.executable})
    result = invoke(
        "--engine",
        str(spec),
        "--gpu-name",
        "NVIDIA H200",
        "--config-dir",
        str(configs),
        "--triton-version",
        "3.4.0",
        "--json",
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["file_name"] == (
        "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    )
    assert plan["status"] == "missing"
    assert plan["searched"] == [str(configs / "triton_3_4_0" / plan["file_name"])]
    assert plan["tuner"]["argv"][:2] == [
        sys.executable,
        "benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py",
    ]
    assert plan["install"]["installed"] is False  # sglang is not in this venv


def test_plan_as_text(tmp_path):
    result = invoke("--engine", str(spec_file(tmp_path)), "--gpu-name", "NVIDIA H200")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "E=257,N=256,device_name=NVIDIA_H200.json" in text.replace(" ", "")
    assert "moe_config_missing" in text
    assert "not checked" in text


def test_no_gpu_and_no_gpu_name(tmp_path, monkeypatch):
    monkeypatch.setattr(cli, "probe_gpu_name", lambda: None)
    result = invoke("--engine", str(spec_file(tmp_path)))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: no NVIDIA GPU visible here to name the file after (give --gpu-name, e.g. "
        '"NVIDIA H200")'
    ]


@pytest.mark.parametrize(
    ("fields", "args", "message"),
    [
        ({"engine": "sim"}, [], "works on vllm and sglang specs, not 'sim'"),
        ({"model": "llama-3.1-8b"}, [], "has no routed experts"),
        ({"tp": 3}, [], "does not split 3 ways"),
        ({}, ["--dtype", "nvfp4"], "--dtype 'nvfp4' is not one of sglang's"),
        ({}, ["--block-shape", "128"], "--block-shape '128' is not two sizes"),
        ({}, ["--tuner-timeout", "90"], "is not a duration"),
        ({}, ["--config-dir", "/no/such/folder"], "--config-dir /no/such/folder does not exist"),
        ({}, ["--tuner", "/no/such/tuner.py"], "is not a file"),
        ({"model": "org/not-here"}, [], "neither a servelab preset nor a local checkpoint"),
    ],
)
def test_bad_input_is_one_line(tmp_path, fields, args, message):
    result = invoke("--engine", str(spec_file(tmp_path, **fields)), "--gpu-name", "X", *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert "Traceback" not in result.output


def test_missing_spec_file(tmp_path):
    result = invoke("--engine", str(tmp_path / "none.yaml"), "--gpu-name", "X")
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: no engine spec at {tmp_path / 'none.yaml'}"


def test_run_without_the_engine_installed(tmp_path):
    model = write_checkpoint(tmp_path / "dsv3", DEEPSEEK_V3)
    spec = spec_file(tmp_path, engine="vllm", model=str(model), options={"python": sys.executable})
    result = invoke("--engine", str(spec), "--gpu-name", "NVIDIA H200", "--run")
    assert result.exit_code == 5, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: vllm is not installed here (vllm is not importable)")


def test_the_ab_runs_get_enough_requests_for_a_noise_band():
    """Four requests per stream are four blocks: no band, never kept; the A/B asks for eight."""
    from servelab.cli.tune_kernels import _ab_requests
    from servelab.core.errors import ConfigError

    assert _ab_requests(None, [8, 16]) == 128
    assert _ab_requests(80, [16]) == 80
    with pytest.raises(ConfigError, match="4 blocks of requests: too few for a noise band"):
        _ab_requests(64, [16])
