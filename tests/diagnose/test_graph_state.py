"""Whether CUDA graphs are on: the log, the command, the engine's default, or not known.

An unknown state is not "off": an attached SGLang or vLLM run captures graphs unless it
was told not to, so it must not be told to turn them on as if they were off. Where
neither the log nor the command says, and no command was recorded, the action is
conditional and the finding ranks below those on known settings.
"""

from __future__ import annotations

from pathlib import Path

from servelab.diagnose.engineconf import engine_config
from servelab.diagnose.findings import Action, Finding, FindingKind, Severity
from servelab.diagnose.run import rank
from tests.diagnose.builders import diagnose, scan, summary, write_run
from tests.diagnose.test_rules import LLAMA, _decode_sweep

_IDLE = {"power_mean_pct": 19.0, "util_mean_pct": 19.0, "gpm_sm_util_mean_pct": 2.6}


def test_a_launched_sglang_or_vllm_without_the_flag_has_graphs_by_default():
    for engine, command in (
        ("sglang", ["python", "-m", "sglang.launch_server", "--model-path", "m"]),
        ("vllm", ["vllm", "serve", "m", "--max-num-seqs", "8"]),
    ):
        conf = engine_config(engine, command, [])
        assert conf.cuda_graphs is not None, engine
        assert conf.cuda_graphs.value is True
        assert conf.cuda_graphs.source.startswith("engine default"), conf.cuda_graphs.source


def test_transformers_serve_without_the_flag_has_no_graphs_by_default():
    conf = engine_config("embedded", ["python", "-m", "transformers.cli.transformers", "serve"], [])
    assert conf.cuda_graphs is not None and conf.cuda_graphs.value is False
    assert conf.cuda_graphs.source.startswith("engine default")


def test_the_flag_and_the_log_come_before_the_default():
    off = engine_config(
        "sglang", ["python", "-m", "sglang.launch_server", "--disable-cuda-graph"], []
    )
    assert off.cuda_graphs is not None and off.cuda_graphs.value is False
    assert off.cuda_graphs.source == "engine command: --disable-cuda-graph"
    skipped = scan(
        "vllm",
        [
            "(EngineCore_DP0 pid=1394) WARNING 03-19 11:07:02 [gpu_model_runner.py:4612] "
            "Skipping CUDA graph capture. To turn on CUDA graph capture, ensure `cudagraph_mode` "
            "was not manually set to `NONE`"
        ],
    )
    conf = engine_config("vllm", ["vllm", "serve", "m"], skipped.events)
    assert conf.cuda_graphs is not None and conf.cuda_graphs.value is False
    assert conf.cuda_graphs.source.startswith("engine.log line")


def test_no_command_no_log_or_no_known_default_is_unknown():
    assert engine_config("vllm", [], []).cuda_graphs is None  # attached: flags not seen
    # transformers serve with a flash attention implementation decides by its device
    flash = ["transformers", "serve", "--attn-implementation", "paged|flash_attention_2"]
    assert engine_config("transformers", flash, []).cuda_graphs is None
    assert engine_config(None, ["anything"], []).cuda_graphs is None


def _launch_overhead(folder: Path, **run: object) -> Finding:
    events = run.pop("events", None)
    built = summary(_decode_sweep(10, nvml=_IDLE, **LLAMA), **run)  # type: ignore[arg-type]
    found = diagnose(write_run(folder, built, events=events), **LLAMA).findings  # type: ignore[arg-type]
    return next(f for f in found if f.kind is FindingKind.LAUNCH_OVERHEAD)


def test_an_attached_vllm_is_not_told_to_turn_on_what_may_be_on(tmp_path: Path):
    finding = _launch_overhead(tmp_path, target_engine="vllm")
    graphs = next(a for a in finding.actions if a.knob == "cuda_graphs")
    assert graphs.conditional and graphs.available
    assert graphs.text.startswith("if CUDA graphs are off"), graphs.text
    assert "--enforce-eager" in graphs.text
    assert any("CUDA graphs" in m for m in finding.missing), finding.missing
    gain = finding.expected_gain
    assert gain is not None
    assert "CUDA graphs on:" not in gain.text or gain.text.startswith("if CUDA graphs are off")


def test_a_launched_sglang_without_the_flag_is_not_told_to_turn_graphs_on(tmp_path: Path):
    engine = {"engine": "sglang", "command": ["python", "-m", "sglang.launch_server"]}
    finding = _launch_overhead(tmp_path, engine=engine, target_engine="sglang")
    assert not [a for a in finding.actions if a.knob == "cuda_graphs"], finding.actions
    seen = next(e for e in finding.evidence if e.what == "CUDA graphs")
    assert seen.value == "on" and not seen.supports
    assert seen.source.startswith("engine default")


def test_a_launched_vllm_with_enforce_eager_is_told_to_drop_it(tmp_path: Path):
    engine = {"engine": "vllm", "command": ["vllm", "serve", "m", "--enforce-eager"]}
    finding = _launch_overhead(tmp_path, engine=engine, target_engine="vllm")
    graphs = next(a for a in finding.actions if a.knob == "cuda_graphs")
    assert not graphs.conditional and "--enforce-eager" in graphs.text


def _finding(kind: FindingKind, impact: float, action: Action) -> Finding:
    return Finding(
        kind=kind,
        title=kind.value,
        severity=Severity.WARNING,
        confidence=0.8,
        evidence=[],
        explanation="",
        actions=[action, Action(text="profile a few decode steps")],
        impact=impact,
    )


def test_a_finding_on_an_unknown_setting_ranks_below_one_on_a_known_setting():
    maybe = _finding(
        FindingKind.LAUNCH_OVERHEAD,
        0.9,
        Action(
            text="if CUDA graphs are off: ...", knob="cuda_graphs", value=True, conditional=True
        ),
    )
    known = _finding(
        FindingKind.KV_CAPACITY, 0.2, Action(text="more KV cache", knob="kv_cache_tokens", value=1)
    )
    assert [f.kind for f in rank([maybe, known])] == ["kv_capacity", "launch_overhead"]
