"""Running the tuner, with a stand-in for it (tests/fixtures/tune): neither engine's real
tuner can run on the test machines (SGLang has no CPU build, vLLM's needs CUDA). The
stand-ins take the real tuners' flags and derive the file name on their own, so a wrong
flag or a plan that disagrees with the tuner about the shape fails here."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from servelab.core.errors import ConfigError, EngineSetupError
from servelab.engines.base import EngineSpec
from servelab.tune.kernels import plan_kernels, run_tuner, stage_config
from tests.tune.kernels.checkpoints import DEEPSEEK_V3, QWEN3_30B_A3B, write_checkpoint

FIXTURES = Path(__file__).parents[2] / "fixtures" / "tune"
STANDIN = {
    "vllm": FIXTURES / "standin_benchmark_moe.py",
    "sglang": FIXTURES / "standin_tuning_fused_moe_triton.py",
}


def standin_plan(engine, model, *, gpu="NVIDIA H200", tuner=None, **spec_fields):
    spec = EngineSpec(
        engine=engine, model=str(model), options={"python": sys.executable}, **spec_fields
    )
    return plan_kernels(
        spec,
        gpu_name=gpu,
        tuner_script=tuner or STANDIN[engine],
        triton_version="3.4.0",
    )


@pytest.mark.parametrize(
    ("engine", "layout"),
    [
        ("vllm", {"tp": 4}),
        ("vllm", {"tp": 4, "dp": 2, "ep": 8}),
        ("sglang", {"tp": 8}),
        ("sglang", {"tp": 8, "ep": 2}),
    ],
)
def test_the_tuner_writes_the_file_the_plan_names(tmp_path, engine, layout):
    model = write_checkpoint(tmp_path / "dsv3", DEEPSEEK_V3)
    plan = standin_plan(engine, model, **layout)
    run = run_tuner(plan, work_dir=tmp_path / "tuner", env={"STANDIN_GPU_NAME": "NVIDIA H200"})
    assert run.ok, run.message
    assert run.file == str(tmp_path / "tuner" / plan.file_name)
    assert run.batch_sizes[:3] == [1, 2, 4] and run.batch_sizes[-1] == 4096
    assert "Writing best config" in Path(run.log).read_text()


def test_an_h200_nvl_gets_vllms_folded_name(tmp_path):
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    plan = standin_plan("vllm", model, gpu="NVIDIA H200 NVL", tp=2)
    run = run_tuner(plan, work_dir=tmp_path / "t", env={"STANDIN_GPU_NAME": "NVIDIA H200 NVL"})
    assert run.ok and Path(run.file).name == "E=128,N=384,device_name=NVIDIA_H200.json"


def test_a_file_under_another_name_is_a_disagreement(tmp_path):
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    plan = standin_plan("sglang", model, gpu="NVIDIA H100 80GB HBM3", tp=2)
    run = run_tuner(plan, work_dir=tmp_path / "t", env={"STANDIN_GPU_NAME": "NVIDIA H200"})
    assert run.status == "no_file"
    assert run.other_files == ["E=128,N=384,device_name=NVIDIA_H200.json"]
    assert "instead" in run.message


def test_a_failing_tuner_says_why(tmp_path):
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    plan = standin_plan("vllm", model, tp=2)
    run = run_tuner(plan, work_dir=tmp_path / "t", env={"STANDIN_EXIT": "3"})
    assert (run.status, run.exit_code) == ("failed", 3)
    assert run.message == (
        "the tuner ended with exit code 3: RuntimeError: no CUDA GPUs are available"
    )


def test_a_slow_tuner_is_stopped_at_the_timeout(tmp_path):
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    plan = standin_plan("vllm", model, tp=2)
    started = time.monotonic()
    run = run_tuner(plan, work_dir=tmp_path / "t", timeout_s=0.5, env={"STANDIN_SLEEP_S": "60"})
    assert (run.status, run.exit_code, run.file) == ("timeout", None, None)
    assert time.monotonic() - started < 15


def test_a_table_that_is_not_one_is_refused(tmp_path):
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    script = tmp_path / "bad_tuner.py"
    name = "E=128,N=384,device_name=NVIDIA_H200.json"
    script.write_text(f"import sys\nopen(sys.argv[-1] + '/{name}', 'w').write('[1, 2]')\n")
    plan = standin_plan("vllm", model, tp=2, tuner=script)
    assert run_tuner(plan, work_dir=tmp_path / "t").status == "bad_file"


def test_no_tuner_script_or_no_tuner_dtype(tmp_path):
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    spec = EngineSpec(engine="vllm", model=str(model), options={"python": sys.executable})
    plan = plan_kernels(spec, gpu_name="NVIDIA H200")
    with pytest.raises(EngineSetupError, match="source tree, not its wheel"):
        run_tuner(plan, work_dir=tmp_path / "t")
    int4 = plan_kernels(spec, gpu_name="NVIDIA H200", dtype="int4_w4a16")
    with pytest.raises(ConfigError, match="cannot tune int4_w4a16"):
        run_tuner(int4, work_dir=tmp_path / "t")


def test_staging_for_sglang_keeps_the_packaged_files(tmp_path):
    packaged = tmp_path / "pkg" / "configs"
    (packaged / "triton_3_4_0").mkdir(parents=True)
    (packaged / "triton_3_2_0").mkdir()
    (packaged / "triton_3_2_0" / "E=8,N=7168,device_name=NVIDIA_H200.json").write_text("{}")
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    spec = EngineSpec(engine="sglang", model=str(model), tp=4)
    plan = plan_kernels(spec, gpu_name="NVIDIA H200", config_dir=packaged, triton_version="3.4.0")
    tuned = tmp_path / plan.file_name
    tuned.write_text(json.dumps({"1": {"BLOCK_SIZE_M": 16}}))
    root = stage_config(plan, tuned, tmp_path / "candidate")
    assert (root / "configs" / "triton_3_4_0" / plan.file_name).read_text() == tuned.read_text()
    assert (root / "configs" / "triton_3_2_0" / "E=8,N=7168,device_name=NVIDIA_H200.json").exists()
    # pointed at the staged folder, the plan finds its file there
    spec_b = plan.with_config(spec, root)
    again = plan_kernels(
        spec_b, gpu_name="NVIDIA H200", config_dir=packaged, triton_version="3.4.0"
    )
    assert again.status == "present"
    with pytest.raises(ConfigError, match="not empty"):
        stage_config(plan, tuned, root)


def test_staging_for_vllm_keeps_a_user_folder_already_set(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "E=8,N=7168,device_name=NVIDIA_H200.json").write_text("{}")
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    spec = EngineSpec(
        engine="vllm", model=str(model), tp=4, env={"VLLM_TUNED_CONFIG_FOLDER": str(mine)}
    )
    plan = plan_kernels(spec, gpu_name="NVIDIA H200")
    tuned = tmp_path / plan.file_name
    tuned.write_text("{}")
    root = stage_config(plan, tuned, tmp_path / "candidate")
    assert sorted(p.name for p in root.iterdir()) == sorted(
        ["E=8,N=7168,device_name=NVIDIA_H200.json", plan.file_name]
    )
    assert plan.with_config(spec, root).env["VLLM_TUNED_CONFIG_FOLDER"] == str(root)
