"""What the engine's log says beside the numbers, each read from lines built from the
engines' own format strings (tests/fixtures/engine_logs/events): a hang is an error, custom
all-reduce without P2P or NCCL over shared memory is the links' word in comm_latency, a
cap SGLang lowered at start-up is the cap in force, and prefill batches that fill the
budget are the step budget's evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.diagnose.engineconf import engine_config
from servelab.diagnose.findings import FindingKind, Severity
from tests.diagnose.builders import diagnose, level, scan, summary, write_run
from tests.diagnose.test_rules import GLM, _decode_sweep

EVENTS = Path(__file__).parents[1] / "fixtures" / "engine_logs" / "events"


def _lines(kind: str, engine: str, **fields: object) -> list[str]:
    cases = json.loads((EVENTS / f"{kind}.json").read_text())
    return [
        c["line"]
        for c in cases
        if c["engine"] == engine and all(c["fields"].get(k) == v for k, v in fields.items())
    ]


def _steady(tmp_path: Path, engine: str, lines: list[str]):
    run = summary([level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20)], target_engine=engine)
    return diagnose(write_run(tmp_path, run, events=scan(engine, lines)))


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_hang_in_the_log_is_an_error_though_no_request_failed(tmp_path: Path, engine: str):
    lines = [
        line
        for line in _lines("engine_hang", engine)
        if "soft=True" not in line and "waiting" not in line.lower()
    ]
    assert lines, engine
    diagnosis = _steady(tmp_path, engine, lines[:1])
    errors = [f for f in diagnosis.findings if f.kind is FindingKind.ERRORS]
    assert errors and errors[0].severity is Severity.CRITICAL, diagnosis.findings
    assert "hung" in errors[0].title and errors[0].evidence[0].what == "engine_hang"


def test_a_soft_watchdog_dump_is_not_a_hang(tmp_path: Path):
    soft = [line for line in _lines("engine_hang", "sglang") if "soft=True" in line]
    assert soft
    diagnosis = _steady(tmp_path, "sglang", soft)
    assert not [f for f in diagnosis.findings if f.kind is FindingKind.ERRORS]


@pytest.mark.parametrize(
    ("kind", "fields", "critical"),
    [
        ("custom_allreduce_off", {"reason": "no p2p"}, True),
        ("nccl_transport", {"transport": "SHM"}, True),
        ("custom_allreduce_off", {"reason": "unsupported world size"}, False),
    ],
)
def test_the_engines_word_on_its_collectives_is_comm_latency_evidence(
    tmp_path: Path, kind: str, fields: dict[str, str], critical: bool
):
    lines = _lines(kind, "vllm", **fields) or _lines(kind, "sglang", **fields)
    assert lines, (kind, fields)
    engine = "vllm" if _lines(kind, "vllm", **fields) else "sglang"
    run = summary(_decode_sweep(1.1, **GLM), target_engine=engine)
    found = diagnose(write_run(tmp_path, run, events=scan(engine, lines)), **GLM).findings
    comm = next(f for f in found if f.kind is FindingKind.COMM_LATENCY)
    logged = [e for e in comm.evidence if e.source.startswith("engine.log line")]
    assert logged, comm.evidence
    assert (comm.severity is Severity.CRITICAL) is critical, (comm.severity, logged)


def test_a_cap_sglang_lowered_at_start_up_is_the_cap_in_force():
    lines = _lines("running_cap_lowered", "sglang", reason="kv cache")
    assert lines
    events = scan("sglang", lines[:1]).events
    conf = engine_config(
        "sglang",
        ["python", "-m", "sglang.launch_server", "--max-running-requests", "256"],
        events,
        reported={"max_running_requests": (256, "/get_server_info")},
    )
    assert conf.running_cap is not None
    assert conf.running_cap.value == events[0].fields["in_force"] < 256
    assert "lowered at start-up" in conf.running_cap.source
