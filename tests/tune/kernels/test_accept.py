"""Run-and-accept end to end: the stand-in tuner (see test_run) makes the file, then the
A/B runs launch real simulator engines through bench_engine. The simulator does not read
MoE configs, so the test's B transform does what a faster kernel would: it sets the
engine's user-folder variable (as the default transform does) and shortens the
simulator's inter-token time. Accepting a real kernel config on a real engine is not
tested here: no test machine can run either engine's tuner."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from servelab.bench.results import BenchSummary
from servelab.bench.session import BenchConfig
from servelab.bench.workload import WorkloadSpec
from servelab.engines.base import EngineSpec
from servelab.store import RunDir
from servelab.tune.kernels import decide_runs, plan_kernels, tune_kernels
from tests.tune.kernels.checkpoints import QWEN3_30B_A3B, write_checkpoint
from tests.tune.kernels.test_run import STANDIN

ITL_MS = 8.0


def setup(tmp_path: Path):
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    vllm = EngineSpec(engine="vllm", model=str(model), tp=2, options={"python": sys.executable})
    plan = plan_kernels(vllm, gpu_name="NVIDIA H200", tuner_script=STANDIN["vllm"])
    sim = EngineSpec(engine="sim", options={"ttft_ms": 5, "itl_ms": ITL_MS}, startup_timeout_s=60)
    bench = BenchConfig(
        url="http://127.0.0.1",
        levels=[4],
        num_requests=32,
        warmup=1,
        workload=WorkloadSpec(input_len=16, output_len=16),
        workers=1,
    )
    return plan, sim, bench


def faster_by(factor: float):
    def transform(spec: EngineSpec, root: Path) -> EngineSpec:
        spec = spec.model_copy(update={"options": {**spec.options, "itl_ms": ITL_MS / factor}})
        return spec.model_copy(update={"env": {**spec.env, "VLLM_TUNED_CONFIG_FOLDER": str(root)}})

    return transform


def engine_env(run_dir: str) -> dict[str, str]:
    summary = RunDir(Path(run_dir)).load_summary(BenchSummary)
    return yaml.safe_load(summary.engine["spec"]).get("env", {})


def test_a_faster_b_is_kept(tmp_path):
    plan, sim, bench = setup(tmp_path)
    result = tune_kernels(
        plan,
        sim,
        bench,
        out=tmp_path / "out",
        tuner_timeout_s=60,
        with_config=faster_by(2),
        tuner_env={"STANDIN_GPU_NAME": "NVIDIA H200"},
    )
    assert result.tuner.ok, result.tuner.message
    assert result.kept, result.reason
    (level,) = result.ab.decision.levels
    assert level.passed and level.band_lo > 1 and level.ratio > 1.3
    kept = Path(result.folder)
    assert (kept / plan.file_name).is_file()
    assert result.env == {"VLLM_TUNED_CONFIG_FOLDER": str(kept)}
    # B ran with the variable pointing at the staged folder; A without it
    assert engine_env(result.ab.b_run_dir)["VLLM_TUNED_CONFIG_FOLDER"] == str(kept)
    assert "VLLM_TUNED_CONFIG_FOLDER" not in engine_env(result.ab.a_run_dir)
    # the decision is the runs': read again from their folders, it is the same
    assert decide_runs(Path(result.ab.a_run_dir), Path(result.ab.b_run_dir)).keep


def test_a_b_no_faster_is_dropped(tmp_path):
    plan, sim, bench = setup(tmp_path)
    result = tune_kernels(
        plan,
        sim,
        bench,
        out=tmp_path / "out",
        tuner_timeout_s=60,
        with_config=faster_by(1),
        tuner_env={"STANDIN_GPU_NAME": "NVIDIA H200"},
    )
    assert result.tuner.ok
    assert not result.kept and result.folder is None and result.env == {}
    (level,) = result.ab.decision.levels
    assert not level.passed
    assert "noise band" in level.reason or "worth keeping" in level.reason
    assert 0.9 < level.ratio < 1.1
    assert not (tmp_path / "out" / "candidate").exists()  # dropped
    assert (tmp_path / "out" / "tuner" / plan.file_name).is_file()  # the tuner's output stays


def test_a_tuner_that_fails_runs_no_ab(tmp_path):
    plan, sim, bench = setup(tmp_path)
    result = tune_kernels(plan, sim, bench, out=tmp_path / "out", tuner_env={"STANDIN_EXIT": "1"})
    assert (result.kept, result.ab) == (False, None)
    assert result.reason.startswith("the tuner ended with exit code 1")
