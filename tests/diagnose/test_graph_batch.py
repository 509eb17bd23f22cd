"""The largest CUDA-graph batch: read from the command and the log, and the rule that uses it.

A decode batch above the largest captured size runs eager (SGLang's `can_run`, vLLM's
capture sizes). The flag names are the engines' own (SGLang 0.5.23's
`--cuda-graph-max-bs-decode`, `--cuda-graph-max-bs` before it; vLLM's
`--max-cudagraph-capture-size`); the recorded logs are tests/engines/data/logs.
Expected gains are derived by hand from the levels' TPOTs (the rule's docstring).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.diagnose.engineconf import engine_config
from servelab.diagnose.findings import Finding, FindingKind, Severity
from servelab.engines.signatures import scan_log
from tests.diagnose.builders import diagnose, level, scan, summary, telemetry, write_run
from tests.diagnose.test_rules import LLAMA, model_tpot, running

LOGS = Path(__file__).parents[1] / "engines" / "data" / "logs"
SGLANG = ["python", "-m", "sglang.launch_server", "--model-path", "/models/m"]
VLLM = ["vllm", "serve", "/models/m"]

# --- reading it -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "flags", "value", "flag"),
    [
        ("sglang", ["--cuda-graph-max-bs-decode", "48"], 48, "--cuda-graph-max-bs-decode"),
        ("sglang", ["--cuda-graph-max-bs", "24"], 24, "--cuda-graph-max-bs"),
        # the list filtered by the maximum: 8 is the largest size SGLang keeps
        (
            "sglang",
            ["--cuda-graph-bs", "1", "2", "8", "32", "--cuda-graph-max-bs", "16"],
            8,
            "--cuda-graph-bs",
        ),
        (
            "sglang",
            ["--cuda-graph-config", '{"decode": {"backend": "full", "max_bs": 40}}'],
            40,
            "--cuda-graph-config",
        ),
        ("vllm", ["--max-cudagraph-capture-size", "16"], 16, "--max-cudagraph-capture-size"),
        (
            "vllm",
            ["--cudagraph-capture-sizes", "1", "2", "4", "12", "--max-num-seqs", "64"],
            12,
            "--cudagraph-capture-sizes",
        ),
        ("vllm", ["-cc", '{"cudagraph_capture_sizes": [1, 2, 4, 8, 24]}'], 24, "-cc"),
        ("vllm", ["-cc.max_cudagraph_capture_size=56"], 56, "-cc"),
    ],
)
def test_the_command_says_it(engine: str, flags: list[str], value: int, flag: str):
    command = (SGLANG if engine == "sglang" else VLLM) + flags

    conf = engine_config(engine, command, [])

    assert conf.cuda_graph_max_batch is not None
    assert conf.cuda_graph_max_batch.value == value
    assert conf.cuda_graph_max_batch.source.startswith("engine command: ")
    assert conf.cuda_graph_flag == flag


@pytest.mark.parametrize(
    ("log", "engine", "value", "line", "flag"),
    [
        # the newer capture line (and server_args' cuda_graph_max_bs_decode)
        ("sglang_graph_capture.log", "sglang", 32, 4, "--cuda-graph-max-bs-decode"),
        # the older `Capture cuda graph bs [...]` of the releases with --cuda-graph-max-bs
        ("sglang_startup.log", "sglang", 64, 20, "--cuda-graph-max-bs"),
        # the engine's resolved compilation_config, after its non-default args
        ("vllm_graph_capture.log", "vllm", 16, 3, "--max-cudagraph-capture-size"),
        ("vllm_startup.log", "vllm", 512, 6, "--max-cudagraph-capture-size"),
    ],
)
def test_else_the_log_says_it(log: str, engine: str, value: int, line: int, flag: str):
    conf = engine_config(engine, [], scan_log(LOGS / log, engine))

    assert conf.cuda_graph_max_batch is not None
    assert conf.cuda_graph_max_batch.value == value
    assert conf.cuda_graph_max_batch.source.startswith(f"engine.log line {line} ")
    assert conf.cuda_graph_flag == flag


def test_the_command_comes_before_the_log():
    events = scan_log(LOGS / "sglang_graph_capture.log", "sglang")

    conf = engine_config("sglang", [*SGLANG, "--cuda-graph-max-bs-decode", "96"], events)

    assert conf.cuda_graph_max_batch is not None and conf.cuda_graph_max_batch.value == 96


def test_no_setting_no_graphs_or_no_such_engine_says_nothing():
    assert engine_config("sglang", SGLANG, []).cuda_graph_max_batch is None  # default unknown
    assert engine_config("vllm", [], []).cuda_graph_max_batch is None
    eager = scan("vllm", [_VLLM_EAGER]).events
    assert engine_config("vllm", [], eager).cuda_graph_max_batch is None  # 0: none captured
    assert (
        engine_config("sglang", [*SGLANG, "--cuda-graph-max-bs", "0"], []).cuda_graph_max_batch
        is None
    )
    tf = ["transformers", "serve", "--cuda-graph-max-bs", "8"]
    assert engine_config("transformers", tf, []).cuda_graph_max_batch is None


_VLLM_EAGER = (
    "(EngineCore_DP0 pid=90) INFO 12-02 08:01:10 [core.py:98] Initializing a V1 LLM engine "
    "(v0.13.0) with config: model='/models/m', compilation_config={'cudagraph_capture_sizes': "
    "[], 'max_cudagraph_capture_size': 0}"
)

# --- the rule ---------------------------------------------------------------------------


def _levels(tpots: dict[int, float], *, counts: bool = True) -> list:
    """Closed-loop levels of these TPOTs, their running batch their concurrency."""
    return [
        level(
            i,
            c,
            total_tps=c * 384 / (128 * tpot / 1e3),
            tpot_ms=tpot,
            ttft_ms=5,
            telemetry=telemetry(engine=running(c)) if counts else None,
        )
        for i, (c, tpot) in enumerate(sorted(tpots.items()))
    ]


def _finding(folder: Path, levels: list, command: list[str], **options: object) -> Finding | None:
    run = summary(levels, engine={"engine": command[0], "command": command[1:]})
    found = diagnose(write_run(folder, run), **options).findings
    return next((f for f in found if f.kind is FindingKind.CUDA_GRAPH_BATCH), None)


def _sglang(*flags: str) -> list[str]:
    return ["sglang", *SGLANG, *flags]


def test_batches_above_the_largest_graph_are_a_finding_with_their_gain(tmp_path: Path):
    levels = _levels({8: 10.0, 16: 11.0, 64: 40.0})

    finding = _finding(tmp_path, levels, _sglang("--cuda-graph-max-bs-decode", "16"))

    assert finding is not None and finding.severity is Severity.WARNING
    assert finding.levels == [2]
    assert "(16)" in finding.title and "concurrency 64" in finding.title
    configured = finding.evidence[0]
    assert (configured.what, configured.value) == ("largest CUDA-graph batch", 16)
    assert configured.source == "engine command: --cuda-graph-max-bs-decode 16"
    assert finding.actions[0].flags == ["--cuda-graph-max-bs-decode", "64"]
    assert finding.actions[0].engine == "sglang"
    gain = finding.expected_gain
    assert gain is not None and gain.metric == "decode speed at concurrency 64"
    # replayed at 16: 11 ms; eager at 64: 40 ms; the batch grew 4x.
    # most: 40 / 11; least: 40 / (11 x 4) < 1, so 1; point (no model): 40 / (11 x 2.5).
    assert gain.high == pytest.approx(40 / 11, rel=5e-3)
    assert gain.low == 1.0
    assert gain.factor == pytest.approx(40 / 27.5, rel=5e-3)
    assert "halfway" in gain.text
    assert finding.impact == pytest.approx(1 - 27.5 / 40, rel=1e-2)


def test_with_the_model_the_point_is_the_model_s_growth_of_the_step(tmp_path: Path):
    # Replayed TPOT twice the model's at 16; at 64, twice the model's times 1.8 more.
    m16, m64 = model_tpot(16, **LLAMA), model_tpot(64, **LLAMA)
    levels = _levels({16: 2 * m16, 64: 2 * m64 * 1.8})

    finding = _finding(tmp_path, levels, _sglang("--cuda-graph-max-bs-decode", "16"), **LLAMA)

    assert finding is not None and finding.expected_gain is not None
    # T / (T_16 x m64 / m16) = 2 m64 1.8 / (2 m16 x m64 / m16) = 1.8
    assert finding.expected_gain.factor == pytest.approx(1.8, rel=1e-2)
    assert "the model's growth" in finding.expected_gain.text


def test_without_the_engine_s_counts_the_batch_is_the_concurrency_within_the_cap(tmp_path: Path):
    levels = _levels({8: 10.0, 16: 11.0, 64: 40.0}, counts=False)
    command = _sglang("--cuda-graph-max-bs-decode", "16", "--max-running-requests", "32")

    finding = _finding(tmp_path, levels, command)

    assert finding is not None
    batch = next(e for e in finding.evidence if e.what == "running batch at concurrency 64")
    assert batch.value == 32 and "at most the running cap 32" in batch.source
    assert any(m.startswith("metrics: no running count") for m in finding.missing)
    assert "upper bound" in finding.explanation
    assert finding.actions[0].flags == ["--cuda-graph-max-bs-decode", "32"]
    gain = finding.expected_gain
    assert gain is not None and gain.high == pytest.approx(40 / 11, rel=5e-3)
    # the batch grew 2x: least 40 / 22
    assert gain.low == pytest.approx(40 / 22, rel=5e-3)


def test_a_vllm_run_read_from_its_log_names_vllm_s_flag(tmp_path: Path):
    lines = (LOGS / "vllm_graph_capture.log").read_text().splitlines()
    run = summary(_levels({4: 8.0, 16: 8.5, 48: 20.0}), target_engine="vllm")

    found = diagnose(write_run(tmp_path, run, events=scan("vllm", lines))).findings
    finding = next(f for f in found if f.kind is FindingKind.CUDA_GRAPH_BATCH)

    assert finding.evidence[0].source.startswith("engine.log line 3 (engine_config)")
    assert finding.actions[0].flags == ["--max-cudagraph-capture-size", "48"]


def test_an_explicit_list_is_extended_not_overridden(tmp_path: Path):
    command = ["vllm", *VLLM, "--cudagraph-capture-sizes", "1", "2", "4", "8", "16"]

    finding = _finding(tmp_path, _levels({16: 8.5, 40: 20.0}), command)

    assert finding is not None and finding.actions[0].flags == []
    assert "make 40 the largest size --cudagraph-capture-sizes captures" in finding.actions[0].text


def test_no_replayed_level_no_gain(tmp_path: Path):
    finding = _finding(
        tmp_path, _levels({32: 20.0, 64: 40.0}), _sglang("--cuda-graph-max-bs-decode", "16")
    )

    assert finding is not None and finding.expected_gain is None
    assert finding.severity is Severity.INFO
    assert any("no level ran at or below" in m for m in finding.missing)


def test_a_step_that_grows_no_faster_than_its_batch_is_information(tmp_path: Path):
    # 16 -> 64: TPOT 11 -> 12 ms, no more than the replayed steps' own growth would give
    finding = _finding(
        tmp_path, _levels({16: 11.0, 64: 12.0}), _sglang("--cuda-graph-max-bs-decode", "16")
    )

    assert finding is not None and finding.severity is Severity.INFO
    assert finding.expected_gain is not None and finding.expected_gain.factor < 1.1
    against = [e for e in finding.evidence if not e.supports]
    assert [e.value for e in against] == [11.0, 12.0]


@pytest.mark.parametrize(
    "command",
    [
        _sglang("--cuda-graph-max-bs-decode", "16", "--disable-cuda-graph"),  # graphs off
        _sglang("--cuda-graph-max-bs-decode", "64"),  # every batch replayed
        _sglang(),  # the default's size is not guessed
        ["transformers", "transformers", "serve", "/models/m"],  # no such setting
    ],
)
def test_nothing_without_graphs_a_limit_or_a_batch_above_it(tmp_path: Path, command: list[str]):
    assert _finding(tmp_path, _levels({8: 10.0, 16: 11.0, 64: 40.0}), command) is None
