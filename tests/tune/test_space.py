"""The space file: what a study may vary, measure and require, each bad input one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineSpec
from servelab.engines.spec import parse_spec
from servelab.tune.params import apply_params, param_from_yaml
from servelab.tune.prune import check_fit, layout_model
from servelab.tune.space import load_space, parse_space
from servelab.tune.targets import parse_constraint, read_metric
from tests.report.builders import bench_summary
from tests.unit.helpers import level_summary


def level(concurrency: int, **fields: Any) -> Any:
    return level_summary(concurrency, fields.pop("total_throughput")).model_copy(update=fields)


BASE: dict[str, Any] = {
    "engine": "sim",
    "options": {"profile": "glm5-rtxpro6000-tp8", "time_scale": 10},
    "knobs": {"max_running_requests": 64},
}


def space(**fields: Any) -> Any:
    document = {
        "base": BASE,
        "space": {"knobs.max_running_requests": [128, 256]},
        "load": {"concurrency": [1, 128]},
        "objective": "total_throughput@128",
        **fields,
    }
    return parse_space(document, source="space.yaml", text="", default_name="story")


def test_a_full_space_file_reads_and_keeps_the_base_value_as_a_candidate(tmp_path: Path):
    spec = tmp_path / "base.yaml"
    spec.write_text(yaml.safe_dump(BASE))
    path = tmp_path / "cap.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "base": "base.yaml",
                "space": {
                    "knobs.max_running_requests": [128, 256],
                    "env.NCCL_ALGO": ["Ring", None],
                    "args.--enable-mixed-chunk": [True, False],
                },
                "workload": {"input_len": 256, "output_len": 128},
                "load": {"concurrency": [1, 128], "duration": "10s"},
                "objective": ["total_throughput@128", "single_stream_tok_s"],
                "constraints": ["p99_ttft_ms <= 2000", "error_rate <= 0.01"],
                "trials": 6,
            }
        )
    )
    loaded = load_space(path)
    assert loaded.name == "cap"
    cap = loaded.param("knobs.max_running_requests")
    assert cap is not None and cap.choices == [128, 256, 64] and cap.base_value == 64
    switch = loaded.param("args.--enable-mixed-chunk")
    assert switch is not None and switch.base_value is False and switch.choices == [True, False]
    assert [o.label for o in loaded.objectives] == [
        "total_throughput at 128",
        "single_stream_tok_s at 1",
    ]
    assert [o.direction for o in loaded.objectives] == ["maximize", "maximize"]
    ttft, errors = loaded.constraints
    assert (ttft.at, errors.at) == (128.0, None)
    assert loaded.load.duration_s == 10.0
    assert loaded.grid_size() == 3 * 2 * 2
    assert loaded.document["base"]["options"]["profile"] == "glm5-rtxpro6000-tp8"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"spaec": {}}, "unknown key 'spaec'"),
        ({"space": {"knobs.max_runing_requests": [8]}}, "no knob 'max_runing_requests'"),
        ({"space": {"knob.x": [1]}}, "not a parameter path"),
        ({"space": {"knobs.mem_fraction": {"low": 0.5, "high": 0.9}}}, "the base sets no value"),
        ({"space": {"knobs.max_running_requests": {"low": 9, "high": 3}}}, "low must be below"),
        ({"space": {"knobs.max_running_requests": []}}, "nothing to try"),
        ({"space": {"knobs.max_running_requests": [0]}}, "does not make a valid spec"),
        ({"space": {"layout": [{"tp": 4}], "tp": [2]}}, "both layout and tp"),
        ({"space": {"layout": [{"tq": 4}]}}, "unknown key 'tq' in a layout"),
        ({"objective": "total_throughput@64"}, "level 64 is not among"),
        ({"objective": "throughput"}, "unknown metric 'throughput'"),
        ({"objective": "error_rate"}, "a constraint, not an objective"),
        ({"load": {"concurrency": [8]}, "objective": "single_stream_tok_s"}, "needs concurrency 1"),
        ({"objective": "request_goodput"}, "goodput needs SLOs"),
        ({"constraints": ["p99_ttft_ms = 5"]}, "write it as METRIC"),
        ({"objective": ["total_throughput", "total_throughput"]}, "the same"),
        ({"load": {"concurrency": [1.5]}}, "whole numbers"),
        ({"sampler": "grid", "space": {"knobs.mem_fraction": {"low": 0.1, "high": 0.5}}}, ""),
    ],
)
def test_each_bad_space_is_one_clear_error(fields: dict[str, Any], message: str):
    if fields.get("sampler") == "grid":
        fields = {
            **fields,
            "base": {**BASE, "knobs": {"max_running_requests": 64, "mem_fraction": 0.3}},
        }
        message = "grid needs lists"
    with pytest.raises(ConfigError) as caught:
        space(**fields)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_or_broken_file_is_one_line(tmp_path: Path):
    with pytest.raises(ConfigError, match="no space file"):
        load_space(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("base: [unclosed\n")
    with pytest.raises(ConfigError, match="is not YAML"):
        load_space(broken)


def test_parameters_set_knobs_layouts_env_options_and_native_flags():
    base = parse_spec(
        {
            "engine": "sglang",
            "model": "/m",
            "tp": 8,
            "env": {"NCCL_ALGO": "Tree"},
            "extra_args": ["--num-continuous-decode-steps", "1", "--enable-mixed-chunk"],
        },
        source="test",
    )
    spec = apply_params(
        base,
        {
            "layout": "tp=4,pp=2",
            "knobs.max_running_requests": 256,
            "env.NCCL_ALGO": None,
            "args.--num-continuous-decode-steps": 4,
            "args.--enable-mixed-chunk": False,
            "options.python": "/usr/bin/python3",
        },
    )
    assert (spec.tp, spec.pp) == (4, 2)
    assert spec.knobs.max_running_requests == 256
    assert "NCCL_ALGO" not in spec.env
    assert spec.extra_args == ["--num-continuous-decode-steps", "4"]
    assert spec.options["python"] == "/usr/bin/python3"
    flag = param_from_yaml("args.--num-continuous-decode-steps", [2, 4], base, source="s")
    assert flag.base_value == 1 and flag.choices == [2, 4, 1]


def test_ranges_are_int_or_float_widened_to_the_base_and_listed_when_small():
    base = EngineSpec(engine="sim", knobs={"max_running_requests": 8, "mem_fraction": 0.95})
    cap = param_from_yaml(
        "knobs.max_running_requests", {"low": 16, "high": 64, "step": 16}, base, source="s"
    )
    assert (cap.kind, cap.low, cap.high) == ("int", 8, 64)
    assert cap.grid_values() == [8, 24, 40, 56]
    logged = param_from_yaml(
        "knobs.max_running_requests", {"low": 16, "high": 4096, "log": True}, base, source="s"
    )
    assert logged.grid_values() is None and logged.contains(1000) and not logged.contains(5000)
    fraction = param_from_yaml("knobs.mem_fraction", {"low": 0.5, "high": 0.9}, base, source="s")
    assert (fraction.kind, fraction.high) == ("float", 0.95)


def test_constraints_read_at_the_objective_level_and_error_rate_over_the_sweep():
    loaded = space(
        constraints=["p99_ttft_ms <= 2000", "error_rate < 0.05", "total_throughput@1 >= 50"]
    )
    ttft, errors, floor = loaded.constraints
    summary = bench_summary(
        [
            level(
                1,
                level=0,
                total_throughput=40.0,
                p99_ttft_ms=100.0,
                completed=10,
                failed=0,
            ),
            level(
                128,
                level=1,
                total_throughput=900.0,
                p99_ttft_ms=3000.0,
                completed=90,
                failed=10,
            ),
        ]
    )
    assert read_metric(summary, "p99_ttft_ms", ttft.at) == 3000.0
    assert ttft.violation(3000.0) == pytest.approx(0.5)
    assert read_metric(summary, "error_rate", None) == pytest.approx(10 / 110)
    assert errors.violation(10 / 110) > 0
    assert floor.violation(read_metric(summary, "total_throughput", 1.0)) == pytest.approx(0.2)
    assert ttft.violation(None) == 1.0
    with pytest.raises(ConfigError, match="drop the @level"):
        parse_constraint("error_rate@1 <= 0", loaded.load, loaded.objectives[0], source="s")


def test_layouts_that_cannot_run_are_pruned_with_the_reason():
    sim = {"model": "glm-5-nvfp4", "gpu": "rtx-pro-6000", "gpus": 8, "weights": "nvfp4"}
    too_many = check_fit(EngineSpec(engine="sim", tp=8, pp=2, options=sim), None, 8)
    assert not too_many.ok and too_many.reason == "tp=8,pp=2 needs 16 GPUs; 8 available"
    small = check_fit(EngineSpec(engine="sim", tp=2, options={**sim, "gpus": 2}), None, 2)
    assert not small.ok and "does not fit" in (small.reason or "")
    fits = check_fit(EngineSpec(engine="sim", tp=4, pp=2, options=sim), None, 8)
    assert fits.ok and fits.deployment is not None
    unknown = check_fit(EngineSpec(engine="vllm", model="/no/such/model", tp=2), None, None)
    assert unknown.ok and unknown.deployment is None
    # SGLang's DP attention runs its dp ranks inside the tp group: 8 GPUs, not 64
    dp_attention = EngineSpec(
        engine="sglang", model="/no/such/model", tp=8, dp=8, extra_args=["--enable-dp-attention"]
    )
    assert check_fit(dp_attention, None, 8).ok
    plain_dp = dp_attention.model_copy(update={"extra_args": []})
    assert check_fit(plain_dp, None, 8).reason == "tp=8,dp=8 needs 64 GPUs; 8 available"


def test_the_model_account_weighs_all_reduces_prefill_and_the_kv_cache():
    sim = {"model": "glm-5-nvfp4", "gpu": "rtx-pro-6000", "gpus": 8, "weights": "nvfp4"}

    def account(tp: int, pp: int, input_len: int, cap: int | None = None) -> Any:
        fit = check_fit(EngineSpec(engine="sim", tp=tp, pp=pp, options=sim), None, 8)
        assert fit.deployment is not None
        return layout_model(
            fit.deployment,
            load=128,
            cap=cap,
            input_len=input_len,
            output_len=128,
            fits=True,
            time_scale=10,
        )

    tp8, tp4, tp2 = account(8, 1, 256), account(4, 2, 256), account(2, 4, 256)
    assert tp8.pp_bubble_fraction == 0 and tp4.pp_bubble_fraction > 0
    assert tp8.allreduce_ms > tp4.allreduce_ms > tp2.allreduce_ms > 0
    assert tp8.allreduce_bytes == 128 * 6144 * 2
    assert account(8, 1, 256, cap=64).batch == 64
    # the cycle: 128 decode steps and the batch's prefill, in the simulator's time
    for a in (tp8, tp4, tp2):
        cycle_s = (128 * a.step_ms + a.prefill_ms) / 1000
        assert a.total_tokens_per_s == pytest.approx(10 * a.batch * 384 / cycle_s, rel=1e-6)
        assert a.output_tokens_per_s == pytest.approx(a.total_tokens_per_s / 3, rel=1e-6)
    long = account(8, 1, 8192)
    assert long.batch == long.kv_max_requests < 128
    assert long.reason.endswith(
        f"the KV cache holds only {long.kv_max_requests} requests of this length"
    )
    assert "prefilling the prompts" in long.reason


def test_the_space_kept_with_a_study_holds_no_secret():
    text = (
        "base:\n  engine: sim\n  env: {HF_TOKEN: hf-planted-0001, NCCL_ALGO: Ring}\n"
        "  extra_args: [--api-key, sk-planted-0002, --hf-token=tok-planted-0003]\n"
        "space:\n  knobs.max_running_requests: [128]  # the cap\n"
    )
    parsed = parse_space(yaml.safe_load(text), source="s.yaml", text=text, default_name="s")
    kept = parsed.text + json.dumps(parsed.document)
    for planted in ("hf-planted-0001", "sk-planted-0002", "tok-planted-0003"):
        assert planted not in kept
    assert "# the cap" in parsed.text and "--hf-token=***" in parsed.text
    assert parsed.document["base"]["env"] == {"HF_TOKEN": "***", "NCCL_ALGO": "Ring"}
    assert parsed.base.env["HF_TOKEN"] == "hf-planted-0001"  # what launches keeps it


def test_a_secret_is_not_a_searched_setting():
    with pytest.raises(ConfigError, match=r"space: args.--api-key names a secret"):
        space(space={"args.--api-key": ["sk-a", "sk-b"]})


def test_a_joining_worker_takes_secret_env_values_from_its_own_environment(monkeypatch):
    from servelab.tune.study import _with_local_secrets

    masked = {**BASE, "env": {"HF_TOKEN": "***"}}
    stored = space(base=masked)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="sets HF_TOKEN, a secret the study does not store"):
        _with_local_secrets(stored)
    monkeypatch.setenv("HF_TOKEN", "hf-here-0004")
    assert _with_local_secrets(stored).base.env == {"HF_TOKEN": "hf-here-0004"}
    flag = space(base={**BASE, "extra_args": ["--api-key", "***"]})
    with pytest.raises(ConfigError, match="passes a secret option"):
        _with_local_secrets(flag)
