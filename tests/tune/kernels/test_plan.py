"""The plan: E and N of real checkpoints at several layouts (checked against files the
engines ship), the folder check on real folders, the missing-file log line against
servelab's own log signature, and the tuner command."""

from __future__ import annotations

import sys

import pytest

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.engines.signatures import EventKind, SignatureMatcher
from servelab.tune.kernels import find_install, plan_kernels
from tests.tune.kernels.checkpoints import (
    DEEPSEEK_V3,
    GLM_45,
    MIXTRAL_8X7B,
    QWEN3_30B_A3B,
    write_checkpoint,
)

H200 = "NVIDIA H200"
H100 = "NVIDIA H100 80GB HBM3"
RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def plan(engine, model, gpu=H200, *, tp=1, ep=1, dp=1, env=None, extra_args=(), **options):
    spec = EngineSpec(
        engine=engine,
        model=str(model),
        tp=tp,
        ep=ep,
        dp=dp,
        env=env or {},
        extra_args=list(extra_args),
    )
    return plan_kernels(spec, gpu_name=gpu, **options)


# --- the file name for real models -----------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "tp", "ep", "file_name"),
    [
        # the DESIGN.md deployment: GLM-5 NVFP4 on 8 RTX PRO 6000 at TP 8
        ("sglang", 8, 1, f"E=257,N=256,device_name={RTX_PRO.replace(' ', '_')}.json"),
        ("vllm", 8, 1, f"E=256,N=256,device_name={RTX_PRO.replace(' ', '_')}.json"),
        # expert parallel: no shared-expert fusion in SGLang, whole intermediates
        ("sglang", 8, 8, f"E=32,N=2048,device_name={RTX_PRO.replace(' ', '_')}.json"),
        ("vllm", 8, 8, f"E=32,N=2048,device_name={RTX_PRO.replace(' ', '_')}.json"),
        ("sglang", 8, 2, f"E=128,N=512,device_name={RTX_PRO.replace(' ', '_')}.json"),
    ],
)
def test_glm5_preset(engine, tp, ep, file_name):
    p = plan(engine, "glm-5-nvfp4", RTX_PRO, tp=tp, ep=ep)
    assert p.file_name == file_name
    assert p.dtype is None  # NVFP4 has no Triton dtype: said in a note
    assert any("NVFP4" in note for note in p.notes)
    assert p.tuner is None and "preset" in (p.tuner_unavailable or "")


def test_vllm_flattens_data_parallel_into_the_moe_layer(tmp_path):
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    assert plan("vllm", model, tp=2, dp=2).file_name == "E=128,N=192,device_name=NVIDIA_H200.json"
    assert plan("vllm", model, tp=2, dp=2, ep=4).file_name == (
        "E=32,N=768,device_name=NVIDIA_H200.json"
    )
    # SGLang's MoE is split by tp / ep only.
    assert plan("sglang", model, tp=2, dp=2).file_name == "E=128,N=384,device_name=NVIDIA_H200.json"


@pytest.mark.parametrize(
    ("engine", "config", "gpu", "tp", "dtype", "shipped"),
    [
        # Each `shipped` is a file in the engine's repository (vllm .../fused_moe/configs/,
        # sglang .../fused_moe_triton/configs/[triton_X_Y_Z/]): the model it was tuned for,
        # at the layout and GPU given here, must get exactly that name.
        ("vllm", QWEN3_30B_A3B, H200, 4, "auto", "E=128,N=192,device_name=NVIDIA_H200.json"),
        ("vllm", QWEN3_30B_A3B, H200, 2, "auto", "E=128,N=384,device_name=NVIDIA_H200.json"),
        (
            "vllm",
            QWEN3_30B_A3B,
            H200,
            4,
            "fp8_w8a8",
            "E=128,N=192,device_name=NVIDIA_H200,dtype=fp8_w8a8.json",
        ),
        (
            "sglang",
            QWEN3_30B_A3B,
            H100,
            4,
            "auto",
            "E=128,N=192,device_name=NVIDIA_H100_80GB_HBM3.json",
        ),
        (
            "vllm",
            MIXTRAL_8X7B,
            H100,
            2,
            "auto",
            "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json",
        ),
        (
            "sglang",
            MIXTRAL_8X7B,
            H100,
            2,
            "auto",
            "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json",
        ),
        (
            "sglang",
            DEEPSEEK_V3,
            H200,
            8,
            "auto",
            "E=257,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json",
        ),
        (
            "sglang",
            DEEPSEEK_V3,
            H100,
            16,
            "auto",
            "E=257,N=128,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,"
            "block_shape=[128, 128].json",
        ),
        (
            "vllm",
            DEEPSEEK_V3,
            H200,
            8,
            "auto",
            "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json",
        ),
        # GLM-4.5: SGLang fuses its shared expert (161), vLLM does not (160)
        (
            "sglang",
            GLM_45,
            H200,
            8,
            "fp8_w8a8",
            "E=161,N=192,device_name=NVIDIA_H200,dtype=fp8_w8a8.json",
        ),
        (
            "vllm",
            GLM_45,
            H200,
            8,
            "fp8_w8a8",
            "E=160,N=192,device_name=NVIDIA_H200,dtype=fp8_w8a8.json",
        ),
    ],
)
def test_real_checkpoints_get_the_shipped_names(tmp_path, engine, config, gpu, tp, dtype, shipped):
    model = write_checkpoint(tmp_path / "model", config)
    assert plan(engine, model, gpu, tp=tp, dtype=dtype).file_name == shipped


def test_shared_expert_fusion_follows_the_spec(tmp_path):
    model = write_checkpoint(tmp_path / "dsv3", DEEPSEEK_V3)
    fused = plan("sglang", model, tp=8)
    unfused = plan("sglang", model, tp=8, extra_args=["--disable-shared-experts-fusion"])
    assert (fused.experts, fused.fused_shared_experts) == (257, 1)
    assert (unfused.experts, unfused.fused_shared_experts) == (256, 0)
    # The tuner adds the shared expert for DeepSeek-V3 unless told not to.
    assert "--disable-shared-experts-fusion" not in fused.tuner.argv
    assert "--disable-shared-experts-fusion" in unfused.tuner.argv
    # 64 routed experts: SGLang's DeepSeek fuses only with 256
    small = write_checkpoint(tmp_path / "small", DEEPSEEK_V3, n_routed_experts=64)
    assert plan("sglang", small, tp=8).experts == 64
    # Qwen3-MoE has no shared expert to fuse
    qwen = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    assert plan("sglang", qwen, tp=1).experts == 128


def test_checkpoint_dtype_and_block_shape(tmp_path):
    fp8 = write_checkpoint(tmp_path / "dsv3", DEEPSEEK_V3)
    p = plan("vllm", fp8, tp=8)
    assert (p.dtype, p.block_shape) == ("fp8_w8a8", (128, 128))
    # an explicit block shape wins; a 16-bit --dtype names none, and refuses one
    assert plan("vllm", fp8, tp=8, block_shape=(64, 64)).file_name.endswith(
        "block_shape=[64,64].json"
    )
    assert (
        plan("vllm", fp8, tp=8, dtype="bf16").file_name
        == "E=256,N=256,device_name=NVIDIA_H200.json"
    )
    with pytest.raises(ConfigError, match="block shape goes with a quantized"):
        plan("vllm", fp8, tp=8, dtype="bf16", block_shape=(128, 128))


@pytest.mark.parametrize(
    ("engine", "model", "layout", "message"),
    [
        ("vllm", "llama-3.1-8b", {}, "no routed experts"),
        ("vllm", "glm-5-nvfp4", {"tp": 8, "ep": 4}, "vllm cannot take ep=4"),
        ("sglang", "glm-5-nvfp4", {"tp": 4, "ep": 8}, "ep to divide tp"),
        ("sglang", "glm-5-nvfp4", {"tp": 3}, "does not split 3 ways"),
        ("vllm", "zai-org/GLM-5", {}, "neither a servelab preset nor a local checkpoint"),
        ("sim", "glm-5-nvfp4", {}, "works on vllm and sglang specs"),
    ],
)
def test_bad_plans_say_why(engine, model, layout, message):
    with pytest.raises(ConfigError, match=message):
        plan(engine, model, **layout)


def test_bad_dtype_lists_the_choices():
    with pytest.raises(ConfigError, match="not one of vllm's") as caught:
        plan("vllm", "glm-5-nvfp4", tp=8, dtype="int8_w8a8")
    assert "fp8_w8a16" in str(caught.value)


# --- the folder check, on real folders --------------------------------------------------------


def test_vllm_finds_the_packaged_file_and_prefers_the_user_folder(tmp_path):
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    packaged, user = tmp_path / "pkg" / "configs", tmp_path / "mine"
    packaged.mkdir(parents=True)
    user.mkdir()
    name = "E=128,N=192,device_name=NVIDIA_H200.json"

    missing = plan("vllm", model, tp=4, config_dir=packaged)
    assert (missing.status, missing.found) == ("missing", None)
    assert missing.searched == [str(packaged / name)]

    (packaged / name).write_text("{}")
    present = plan("vllm", model, tp=4, config_dir=packaged)
    assert (present.status, present.found) == ("present", str(packaged / name))

    env = {"VLLM_TUNED_CONFIG_FOLDER": str(user)}
    (user / name).write_text("{}")
    preferred = plan("vllm", model, tp=4, config_dir=packaged, env=env)
    assert preferred.searched == [str(user / name), str(packaged / name)]
    assert preferred.found == str(user / name)
    assert preferred.user_folder == str(user)


def test_sglang_reads_its_triton_version_folder_then_falls_back(tmp_path):
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    configs = tmp_path / "fused_moe_triton" / "configs"
    name = "E=128,N=192,device_name=NVIDIA_H200.json"
    for version in ("triton_3_2_0", "triton_3_3_1", "triton_3_4_0"):
        (configs / version).mkdir(parents=True)

    missing = plan("sglang", model, tp=4, config_dir=configs, triton_version="3.4.0")
    assert missing.status == "missing"
    assert missing.searched[0] == str(configs / "triton_3_4_0" / name)

    (configs / "triton_3_2_0" / name).write_text("{}")
    (configs / "triton_3_3_1" / name).write_text("{}")
    fallback = plan("sglang", model, tp=4, config_dir=configs, triton_version="3.4.0")
    assert fallback.status == "fallback"
    assert fallback.found == str(configs / "triton_3_3_1" / name)  # the newest other version

    (configs / "triton_3_4_0" / name).write_text("{}")
    present = plan("sglang", model, tp=4, config_dir=configs, triton_version="3.4.0")
    assert (present.status, present.found) == ("present", str(configs / "triton_3_4_0" / name))

    unknown = plan("sglang", model, tp=4, config_dir=configs)
    assert unknown.status == "unchecked"  # no Triton version: which folder is unknown


def test_sglang_user_folder_replaces_the_packaged_one(tmp_path):
    model = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    packaged = tmp_path / "pkg" / "configs"
    (packaged / "triton_3_4_0").mkdir(parents=True)
    (packaged / "triton_3_4_0" / "E=128,N=192,device_name=NVIDIA_H200.json").write_text("{}")
    user = tmp_path / "mine"
    user.mkdir()
    p = plan(
        "sglang",
        model,
        tp=4,
        config_dir=packaged,
        triton_version="3.4.0",
        env={"SGLANG_MOE_CONFIG_DIR": str(user)},
    )
    assert p.status == "missing"
    assert p.searched == [str(user / "configs" / "triton_3_4_0" / p.file_name)]


def test_no_folder_known_is_unchecked():
    p = plan("vllm", "glm-5-nvfp4", tp=8)
    assert (p.status, p.searched, p.config_dir) == ("unchecked", [], None)


# --- the log line of a missing file is servelab's moe_config_missing --------------------------


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_missing_line_is_the_moe_config_missing_signature(tmp_path, engine):
    model = write_checkpoint(tmp_path / "dsv3", DEEPSEEK_V3)
    configs = tmp_path / "configs"
    (configs / "triton_3_4_0").mkdir(parents=True)
    p = plan(engine, model, tp=8, config_dir=configs, triton_version="3.4.0")
    assert p.missing_signature == "moe_config_missing"
    assert p.signature_name == f"{engine}.moe_default_config"
    matcher = SignatureMatcher(engine)
    (event,) = matcher.feed(f"WARNING 11-03 15:51:20 [fused_moe.py:690] {p.missing_line}")
    assert event.kind is EventKind.MOE_CONFIG_MISSING
    assert event.fields["config_file"] == p.file_name
    assert event.fields["config_path"] == p.searched[0]


# --- the tuner command --------------------------------------------------------------------------


def test_vllm_tuner_command(tmp_path):
    model = write_checkpoint(tmp_path / "dsv3", DEEPSEEK_V3)
    p = plan("vllm", model, tp=4, dp=2, ep=8, extra_args=["--trust-remote-code"])
    assert p.tuner is not None and p.tuner.writes_to == "save_dir"
    assert p.tuner.argv[1:] == [
        "benchmarks/kernels/benchmark_moe.py",
        "--model",
        str(model),
        "--tp-size",
        "8",
        "--enable-expert-parallel",
        "--dtype",
        "fp8_w8a8",
        "--tune",
        "--trust-remote-code",
    ]
    assert p.tuner.argv_in(tmp_path / "out")[-2:] == ["--save-dir", str(tmp_path / "out")]
    assert not p.tuner.script_found


def test_sglang_tuner_command_and_what_it_cannot_tune(tmp_path):
    model = write_checkpoint(tmp_path / "dsv3", DEEPSEEK_V3)
    p = plan("sglang", model, tp=8, ep=2)
    assert p.tuner.argv[1:] == [
        "benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py",
        "--model",
        str(model),
        "--tp-size",
        "8",
        "--ep-size",
        "2",
        "--dtype",
        "fp8_w8a8",
        "--tune",
        "--disable-shared-experts-fusion",
    ]
    assert p.tuner.argv_in(tmp_path) == p.tuner.argv  # it writes into its working folder
    qwen = write_checkpoint(tmp_path / "qwen", QWEN3_30B_A3B)
    int4 = plan("vllm", qwen, tp=1, dtype="int4_w4a16")
    assert int4.tuner is None
    assert "cannot tune int4_w4a16" in int4.tuner_unavailable


# --- the installed engine, found through its interpreter -----------------------------------------


def test_find_install_locates_vllm_without_importing_it(tmp_path):
    checkout = tmp_path / "vllm-src"
    package = checkout / "vllm"
    (package / "model_executor/layers/fused_moe/configs").mkdir(parents=True)
    (package / "__init__.py").write_text("raise SystemExit('imported')\n")
    (package / "envs.py").write_text('VLLM_TUNED_CONFIG_FOLDER = "x"\n')
    (checkout / "benchmarks/kernels").mkdir(parents=True)
    (checkout / "benchmarks/kernels/benchmark_moe.py").write_text("")
    found = find_install("vllm", sys.executable, env={"PYTHONPATH": str(checkout)})
    assert found.installed, found.reason
    assert found.config_dir == str(package / "model_executor/layers/fused_moe/configs")
    assert found.user_folder_supported is True
    assert found.tuner_script == str(checkout / "benchmarks/kernels/benchmark_moe.py")
    assert not find_install("vllm", sys.executable, env={"PYTHONPATH": str(tmp_path)}).installed


@pytest.mark.parametrize(
    "module", ["srt/layers/moe/fused_moe_triton", "srt/layers/moe/moe_runner/triton_utils"]
)
def test_find_install_locates_either_sglang_layout(tmp_path, module):
    package = tmp_path / "python" / "sglang"
    (package / module / "configs").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / module / "fused_moe_triton_config.py").write_text("# no user folder here\n")
    found = find_install("sglang", sys.executable, env={"PYTHONPATH": str(tmp_path / "python")})
    assert found.config_dir == str(package / module / "configs")
    assert found.user_folder_supported is False  # an SGLang from before SGLANG_MOE_CONFIG_DIR
    assert found.tuner_script is None  # no benchmark/ beside it
