"""Engine specs from YAML and from options: the issue's example, and one line per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec, Knobs
from servelab.engines.spec import load_spec, parse_assignments, spec_with

ISSUE_EXAMPLE = """\
engine: sglang
model: /models/GLM-5-NVFP4
served_name: glm-5
port: 8000
tp: 8
knobs: {max_running_requests: 1024, cuda_graphs: true, prefix_cache: false}
env: {NCCL_IB_DISABLE: "1"}
extra_args: ["--moe-runner-backend", "flashinfer_cutlass"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_the_issue_example_loads(tmp_path: Path):
    spec = load_spec(write(tmp_path, ISSUE_EXAMPLE))
    assert spec.engine == "sglang" and spec.model == "/models/GLM-5-NVFP4"
    assert (spec.served_name, spec.port, spec.host) == ("glm-5", 8000, None)
    assert spec.layout == {"tp": 8, "pp": 1, "ep": 1, "dp": 1}
    assert spec.knobs == Knobs(max_running_requests=1024, cuda_graphs=True, prefix_cache=False)
    assert spec.env == {"NCCL_IB_DISABLE": "1"}
    assert spec.extra_args == ["--moe-runner-backend", "flashinfer_cutlass"]


def test_layout_block_numbers_in_env_and_a_string_of_extra_args(tmp_path: Path):
    text = (
        "engine: vllm\nmodel: m\nlayout: {tp: 4, dp: 2}\nenv: {NCCL_IB_DISABLE: 1}\n"
        "extra_args: --max-model-len 4096 --tokenizer 'a b'\n"
    )
    spec = load_spec(write(tmp_path, text))
    assert (spec.tp, spec.pp, spec.ep, spec.dp) == (4, 1, 1, 2)
    assert spec.env == {"NCCL_IB_DISABLE": "1"}
    assert spec.extra_args == ["--max-model-len", "4096", "--tokenizer", "a b"]


def test_the_old_constructor_still_works():
    spec = EngineSpec(engine="sim", options={"ttft_ms": 5}, env={"A": "1"}, startup_timeout_s=9)
    assert spec.knobs == Knobs() and spec.tp == 1 and spec.options == {"ttft_ms": 5}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("engine: sglang\nmodle: m\n", "unknown key 'modle' (did you mean 'model'?)"),
        (
            "engine: sglang\nknobs: {max_runing_requests: 8}\n",
            "unknown key 'max_runing_requests' in knobs (did you mean 'max_running_requests'?)",
        ),
        ("engine: sglang\nlayout: {tq: 2}\n", "unknown key 'tq' in layout"),
        ("engine: sglang\ntp: 2\nlayout: {tp: 2}\n", "tp is given both at the top level"),
        ("engine: sglang\ntp: 0\n", "tp: Input should be greater than or equal to 1"),
        ("engine: sglang\nknobs: {mem_fraction: 1.5}\n", "knobs.mem_fraction: Input should be"),
        ("model: m\n", "engine: Field required"),
        ("engine: [sglang\n", "is not YAML"),
        ("- engine: sglang\n", "is not a mapping"),
    ],
)
def test_a_bad_spec_is_one_line(tmp_path: Path, text: str, message: str):
    with pytest.raises(ConfigError) as caught:
        load_spec(write(tmp_path, text))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="no engine spec at"):
        load_spec(tmp_path / "nope.yaml")


def test_options_on_top_of_a_file(tmp_path: Path):
    base = load_spec(write(tmp_path, ISSUE_EXAMPLE))
    spec = spec_with(
        base,
        fields={"tp": 4, "port": None, "model": "/models/other"},
        knobs={"prefix_cache": True, "mem_fraction": 0.85},
        env={"CUDA_VISIBLE_DEVICES": "0,1"},
        extra_args=["--log-level", "debug"],
        source="command line",
    )
    assert (spec.tp, spec.port, spec.model) == (4, 8000, "/models/other")
    assert spec.knobs.given() == {
        "max_running_requests": 1024,
        "cuda_graphs": True,
        "prefix_cache": True,
        "mem_fraction": 0.85,
    }
    assert spec.env == {"NCCL_IB_DISABLE": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert spec.extra_args[-2:] == ["--log-level", "debug"]


def test_options_alone_need_an_engine():
    with pytest.raises(ConfigError, match="no engine given"):
        spec_with(None, fields={}, knobs={}, env={}, extra_args=[], source="command line")


def test_knob_values_are_typed_and_env_values_are_text():
    knobs = parse_assignments(
        ["cuda_graphs=false", "max_running_requests=64", "mem_fraction=0.9", "kv_cache_dtype=fp8"],
        option="--knob",
        typed=True,
    )
    assert knobs == {
        "cuda_graphs": False,
        "max_running_requests": 64,
        "mem_fraction": 0.9,
        "kv_cache_dtype": "fp8",
    }
    assert parse_assignments(["A=1", "B=x=y"], option="--env", typed=False) == {
        "A": "1",
        "B": "x=y",
    }
    with pytest.raises(ConfigError, match="--env 'A' is not KEY=VALUE"):
        parse_assignments(["A"], option="--env", typed=False)
