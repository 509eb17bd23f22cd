"""The report's six sections, built from hand-made runs: what each says, and when."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest

from servelab.bench.knee import find_knee
from servelab.bench.prefix import PrefixCacheLevel
from servelab.bench.results import SweepStop
from servelab.bench.turns import TurnStats
from servelab.core.severity import Severity
from servelab.diagnose.findings import Evidence, FindingKind
from servelab.engines.signatures import KIND_INFO, EventKind
from servelab.probe.verdict import Verdict
from servelab.report.document import Bullets, Code, Figure, KeyValues, Paragraph, Table
from servelab.report.plots import PLOT_KEYS
from servelab.report.sections import build_report
from servelab.report.targets import parse_target
from tests.diagnose.builders import diagnose, level, summary, write_run
from tests.report.builders import (
    bench_summary,
    blocks,
    diagnosis,
    event,
    finding,
    h200_probe,
    log_scan,
    records,
    report_run,
    subsection,
    sweep,
    texts,
    with_summary,
)

SGLANG = {
    "engine": "sglang",
    "model": "glm-5",
    "command": [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/GLM 5",
        "--max-running-requests",
        "64",
        "--json-model-override-args",
        '{"rope": "x"}',
    ],
    "spec": "engine: sglang\nmodel: /models/GLM 5\noptions:\n  max_running_requests: 64\n",
}


def section(run, key: str, targets=()):
    report = build_report(run, targets=[parse_target(t) for t in targets])
    return next(s for s in report.sections if s.key == key)


def test_six_sections_in_order_with_their_subsections():
    report = build_report(report_run())
    assert [s.key for s in report.sections] == [
        "targets",
        "machine",
        "engine",
        "results",
        "findings",
        "status",
    ]
    by_key = {s.key: s for s in report.sections}
    assert [s.key for s in by_key["status"].subsections] == ["done", "in-progress", "next"]
    assert [s.key for s in by_key["findings"].subsections] == ["warnings"]
    assert report.title == "servelab report: hand-built"
    assert "status complete" in report.subtitle
    assert build_report(report_run(), title="State of the union").title == "State of the union"


# -- 1. goal -------------------------------------------------------------------------------


def test_goal_marks_each_target_met_or_not_with_its_tone():
    goal = section(report_run(), "targets", ["total=1000", "total=5000", "ttft_p99=2s"])
    (table,) = blocks(goal, Table)
    assert table.header == ["target", "goal", "result", "where"]
    assert [row[0] for row in table.rows] == ["total=1000", "total=5000", "ttft_p99=2s"]
    assert [row[2] for row in table.rows] == ["met", "not met", "met"]
    assert table.tones == ["good", "bad", "good"]
    assert table.rows[1][3] == "not met: best 1,200 tok/s at concurrency 32 (24% of the target)"
    tally = blocks(goal, Paragraph)[-1]
    assert (tally.text, tally.tone) == ("2 of 3 targets met.", "bad")
    all_met = blocks(section(report_run(), "targets", ["total=1000"]), Paragraph)[-1]
    assert (all_met.text, all_met.tone) == ("1 of 1 targets met.", "good")


def test_goal_states_the_endpoint_and_workload_and_without_targets_how_to_give_them():
    goal = section(report_run(), "targets")
    assert not blocks(goal, Table)
    first, second = (p.text for p in blocks(goal, Paragraph))
    assert "http://127.0.0.1:8000 (chat API), model tiny" in first
    assert "256 input tokens, 128 output tokens" in first
    assert "No targets were given" in second and "--target total=1000" in second


# -- 2. machine ----------------------------------------------------------------------------


def test_machine_without_a_probe_says_so_and_lists_the_runs_host_facts():
    run = report_run(bench_summary(host={"hostname": "box", "cpus": 64, "machine": "x86_64"}))
    machine = section(run, "machine")
    first = blocks(machine, Paragraph)[0].text
    assert first.startswith("No probe.json in the run")
    assert "servelab probe" in first
    (facts,) = blocks(machine, KeyValues)
    assert facts.rows == [("hostname", "box"), ("cpus", "64"), ("machine", "x86_64")]
    assert not blocks(machine, Table)


def test_machine_with_a_probe_lists_verdicts_worst_first_and_the_gpu_table():
    probe = h200_probe()
    critical = Verdict(
        code="p2p-not-supported",
        severity=Severity.CRITICAL,
        title="No GPU peer-to-peer",
        evidence=["nvidia-smi topo -p2p r: NS"],
        meaning="all-reduce goes through the host",
        action="run on bare metal",
    )
    ok = critical.model_copy(update={"code": "ecc", "severity": Severity.OK, "title": "ECC on"})
    # given best first, so the section has to sort them
    shuffled = [ok, *reversed(probe.verdicts), critical]
    run = report_run(probe=probe.model_copy(update={"verdicts": shuffled}))
    machine = section(run, "machine")
    assert blocks(machine, Paragraph)[0].text.startswith(f"Probed {probe.created_utc}")
    (verdicts,) = blocks(machine, Bullets)
    heads = [text for _, text, _ in verdicts.items]
    assert heads == [
        "critical: No GPU peer-to-peer [p2p-not-supported]",
        "warning: NUMA node unknown for 1 GPU [numa-unknown]",
        f"info: {probe.verdicts[1].title} [virtual-machine]",
        "ok: ECC on [ecc]",
    ]
    assert [tone for tone, _, _ in verdicts.items] == ["bad", "warn", "info", "good"]
    critical_sub = verdicts.items[0][2]
    assert critical_sub == [
        "nvidia-smi topo -p2p r: NS",
        "why it matters: all-reduce goes through the host",
        "try: run on bare metal",
    ]
    assert verdicts.items[3][2] == ["nvidia-smi topo -p2p r: NS"]  # no advice for an ok
    host = dict(blocks(machine, KeyValues)[0].rows)
    assert host["virtualization"] == probe.virtualization.summary
    (gpus,) = blocks(machine, Table)
    assert gpus.header[1].startswith("GPU0")
    assert ["name", "NVIDIA H200"] in gpus.rows
    assert any(p.text.startswith("Rates not measured") for p in blocks(machine, Paragraph))


# -- 3. engine -----------------------------------------------------------------------------


def test_engine_shows_the_exact_launch_command_and_the_spec():
    run = report_run(bench_summary(engine=SGLANG, target={"engine": "sglang"}))
    engine = section(run, "engine")
    command, spec = blocks(engine, Code)
    assert (command.text, command.language) == (shlex.join(SGLANG["command"]), "console")
    assert shlex.split(command.text) == SGLANG["command"]
    assert "'/models/GLM 5'" in command.text
    assert (spec.text, spec.language) == (SGLANG["spec"], "yaml")
    facts = dict(blocks(engine, KeyValues)[0].rows)
    assert facts == {
        "engine": "sglang",
        "version": "not recorded",
        "model": "glm-5",
        "endpoint": "http://127.0.0.1:8000",
    }


def test_an_attached_run_did_not_launch_its_engine():
    engine = section(report_run(), "engine")
    assert not blocks(engine, Code)
    assert any("did not launch" in p.text for p in blocks(engine, Paragraph))
    assert dict(blocks(engine, KeyValues)[0].rows)["engine"] == "openai"


def test_the_version_is_the_one_the_engines_log_announced():
    scan = log_scan(
        event(EventKind.ENGINE_VERSION, Severity.INFO, 3, "sglang 0.5.6 starting", version="0.5.6")
    )
    run = report_run(bench_summary(engine=SGLANG, versions={"transformers": "5.24.0"}), events=scan)
    assert dict(blocks(section(run, "engine"), KeyValues)[0].rows)["version"] == "0.5.6"


def test_the_version_of_an_engine_beside_servelab_is_its_packages():
    """embedded and transformers serve run in servelab's environment: its transformers."""
    for engine in ("embedded", "transformers"):
        run = report_run(
            bench_summary(target={"engine": engine}, versions={"transformers": "5.24.0"})
        )
        facts = dict(blocks(section(run, "engine"), KeyValues)[0].rows)
        assert facts["version"] == "transformers 5.24.0"
    elsewhere = report_run(
        bench_summary(target={"engine": "vllm"}, versions={"transformers": "5.24.0"})
    )
    assert dict(blocks(section(elsewhere, "engine"), KeyValues)[0].rows)["version"] == (
        "not recorded"
    )


def test_gpu_memory_not_released_is_marked_bad():
    run = report_run(bench_summary(engine={**SGLANG, "gpu_memory_released": 0}))
    last = blocks(section(run, "engine"), Paragraph)[-1]
    assert (last.text, last.tone) == ("GPU memory after the engine stopped: NOT released.", "bad")


# -- 4. results ----------------------------------------------------------------------------


def test_results_have_the_sweep_table_and_the_knee():
    levels = sweep()
    results = section(report_run(), "results")
    table = blocks(results, Table)[0]
    assert table.header[0] == "concurrency"
    assert [row[0] for row in table.rows] == ["1", "8", "32", "64"]
    assert table.rows[2][1] == "1,200.0"
    knee = find_knee(levels)
    assert knee.found and knee.concurrency == 32
    sentence = next(p for p in blocks(results, Paragraph) if "knee" in p.text.lower())
    assert sentence.text == knee.explanation[0].upper() + knee.explanation[1:] + "."
    assert sentence.tone == "info"
    assert not any(p.text.startswith("The sweep ended") for p in blocks(results, Paragraph))


def test_results_say_why_the_sweep_stopped():
    stop = SweepStop(reason="knee", level=3, explanation="two levels past the knee at 32")
    run = with_summary(report_run(), sweep_stop=stop)
    paragraphs = [p.text for p in blocks(section(run, "results"), Paragraph)]
    assert "The sweep ended: two levels past the knee at 32." in paragraphs
    every_level = with_summary(
        report_run(), sweep_stop=SweepStop(reason="levels", level=None, explanation="all ran")
    )
    assert "all ran" not in " ".join(texts(section(every_level, "results")))


def test_results_draw_the_plots_that_have_data_and_say_which_are_not_drawn():
    """Levels and streamed requests, no GPU telemetry and no engine metrics."""
    run = report_run(records=records(sweep()))
    results = section(run, "results")
    drawn = [f.plot.key for f in blocks(results, Figure)]
    assert drawn == [
        "throughput",
        "latency",
        "pareto",
        "ttft_distribution",
        "itl_distribution",
    ]
    assert all(f.plot.missing is None for f in blocks(results, Figure))
    absent = blocks(results, Bullets)[-1]
    lines = [text for _, text, _ in absent.items]
    assert len(lines) == len(PLOT_KEYS) - len(drawn)
    assert lines[0] == (
        "Cost per token against interactivity: not drawn, no price given "
        "(--gpu-hour-price or --machine-hour-price)"
    )
    assert lines[1].startswith("Prefix-cache hit rate by concurrency: not drawn, no prefix")
    assert lines[2].startswith("GPU power and activity over time: not drawn, no GPU telemetry")
    assert lines[3].startswith("Engine requests and KV cache over time: not drawn")


def test_results_carry_the_notes_and_a_failed_runs_reason():
    run = dataclasses.replace(
        with_summary(report_run(), status="failed", failure="the endpoint went away"),
        notes=["probe.json left out: not valid"],
    )
    results = section(run, "results")
    failed = next(p for p in blocks(results, Paragraph) if p.text.startswith("The run failed"))
    assert (failed.text, failed.tone) == ("The run failed: the endpoint went away.", "bad")
    assert "probe.json left out: not valid" in texts(results)


# -- 5. findings ---------------------------------------------------------------------------


def test_findings_without_a_diagnosis_say_how_to_get_one():
    findings = section(report_run(), "findings")
    (only,) = blocks(findings, Paragraph)
    assert "servelab diagnose RUN_DIR" in only.text
    warnings = subsection(findings, "warnings")
    assert blocks(warnings, Paragraph)[0].text == (
        "No engine log signatures: the engine was not launched by servelab."
    )


def test_each_finding_comes_with_its_evidence_and_actions():
    levels = sweep()
    cap = finding(
        "Running requests capped at 64",
        severity=Severity.CRITICAL,
        actions=("raise --max-running-requests to 256",),
        gain=1.9,
        evidence=(
            Evidence(what="running requests (max)", value=64, unit="requests", source="metrics"),
            Evidence(what="queue", value=0, source="metrics", supports=False),
        ),
    )
    client = finding("The client lagged", kind=FindingKind.CLIENT_BOUND, severity=Severity.INFO)
    run = report_run(diagnosis=diagnosis(levels, [cap, client]))
    findings = section(run, "findings")
    paragraphs = blocks(findings, Paragraph)
    heads = [p for p in paragraphs if p.text[:2] in ("1.", "2.")]
    assert [(p.text, p.tone) for p in heads] == [
        ("1. critical · running_request_cap · 80% confident: Running requests capped at 64", "bad"),
        ("2. info · client_bound · 80% confident: The client lagged", "info"),
    ]
    assert "why Running requests capped at 64" in [p.text for p in paragraphs]
    first = blocks(findings, Bullets)[0]
    assert first.items[0] == (
        "plain",
        "evidence",
        ["running requests (max): 64 requests [metrics]", "queue: 0 [metrics] (against)"],
    )
    assert first.items[1] == ("good", "try", ["raise --max-running-requests to 256"])
    assert first.items[2] == ("info", "expected: 1.9x", [])
    evidence = blocks(findings, Bullets)[-1]
    assert ("warn", "gpu telemetry: no, no GPU was sampled", []) in evidence.items


def test_a_diagnosed_run_directory_lists_what_diagnose_found(tmp_path: Path):
    """diagnose_run's own document: a run that failed a fifth of its requests."""
    levels = [
        level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20, completed=80, failed=20),
        level(1, 4, total_tps=380, tpot_ms=10, ttft_ms=20),
    ]
    folder = write_run(tmp_path / "run", summary(levels))
    diagnosed = diagnose(folder)
    assert diagnosed.findings
    run = report_run(summary(levels), diagnosis=diagnosed)
    text = texts(section(run, "findings"))
    for i, found in enumerate(diagnosed.findings, 1):
        assert any(t.startswith(f"{i}. ") and t.endswith(found.title) for t in text)
        assert found.explanation in text
        assert all(a.text in text for a in found.actions)


def test_server_warnings_quote_the_log_line_and_the_advice_worst_first():
    scan = log_scan(
        event(EventKind.ENGINE_READY, Severity.INFO, 9, "The server is fired up"),
        event(
            EventKind.MOE_CONFIG_MISSING,
            Severity.WARNING,
            42,
            "Using default MoE kernel config. Performance might be sub-optimal!",
        ).model_copy(update={"count": 8}),
        event(EventKind.OUT_OF_MEMORY, Severity.ERROR, 77, "CUDA out of memory"),
    )
    run = report_run(bench_summary(engine=SGLANG), events=scan)
    warnings = subsection(section(run, "findings"), "warnings")
    assert blocks(warnings, Paragraph)[0].text == "From 500 lines of engine.log:"
    (items,) = blocks(warnings, Bullets)
    assert [(tone, text) for tone, text, _ in items.items] == [
        ("bad", "error out_of_memory"),
        ("warn", "warning moe_config_missing (x8)"),
        ("info", "info engine_ready"),
    ]
    assert items.items[1][2] == [
        "line 42: Using default MoE kernel config. Performance might be sub-optimal!",
        f"try: {KIND_INFO[EventKind.MOE_CONFIG_MISSING].advice}",
    ]
    assert items.items[2][2] == ["line 9: The server is fired up"]  # a fact, no advice


def test_a_scanned_log_with_nothing_in_it_says_so():
    run = report_run(bench_summary(engine=SGLANG), events=log_scan(lines=1234))
    warnings = subsection(section(run, "findings"), "warnings")
    (only,) = blocks(warnings, Paragraph)
    assert (only.text, only.tone) == ("No known signature in 1,234 lines of engine.log.", "good")


# -- 6. status -----------------------------------------------------------------------------


def test_done_lists_the_measured_levels():
    run = report_run(probe=h200_probe())
    done = subsection(section(run, "status"), "done")
    (items,) = blocks(done, Bullets)
    assert [tone for tone, _, _ in items.items] == ["good", "good"]
    assert items.items[0][1] == "machine probed: 2 verdicts"
    assert items.items[1][1] == (
        "4 load levels measured (1, 8, 32, 64): 256 requests completed, 0 failed; "
        "best 1,200 tok/s total"
    )


def test_nothing_measured_is_said():
    run = with_summary(report_run(), levels=[])
    done = subsection(section(run, "status"), "done")
    assert blocks(done, Paragraph)[0].text == "Nothing measured yet."


def test_in_progress_lists_unmet_targets_and_a_run_that_did_not_complete():
    run = with_summary(report_run(), status="interrupted")
    status = section(run, "status", ["total=1000", "total=5000", "goodput=1"])
    (items,) = blocks(subsection(status, "in-progress"), Bullets)
    assert items.items == [
        ("warn", "the run is interrupted", []),
        (
            "bad",
            "target total=5000: not met: best 1,200 tok/s at concurrency 32 (24% of the target)",
            [],
        ),
        ("bad", "target goodput=1: not measured: no level has goodput", []),
    ]
    clean = section(report_run(), "status", ["total=1000"])
    assert blocks(subsection(clean, "in-progress"), Paragraph)[0].text.startswith("Nothing open")


def test_next_lists_every_action_the_largest_expected_gain_first():
    findings = [
        finding("small", actions=("a small change",), gain=1.2),
        finding("none", actions=("no estimate",)),
        finding("big", actions=("a big change", "a second big one"), gain=3.0),
        finding("no action"),
    ]
    run = report_run(diagnosis=diagnosis(sweep(), findings))
    (items,) = blocks(subsection(section(run, "status"), "next"), Bullets)
    assert [(text, sub) for _, text, sub in items.items] == [
        ("a big change (expected 3.0x)", ["for: big"]),
        ("a second big one (expected 3.0x)", ["for: big"]),
        ("a small change (expected 1.2x)", ["for: small"]),
        ("no estimate", ["for: none"]),
    ]


@pytest.mark.parametrize(
    ("findings", "text"),
    [
        (None, "Diagnose the run (servelab diagnose) for the actions."),
        ([], "No action: no finding calls for a change."),
    ],
)
def test_next_without_actions_says_why(findings, text):
    run = report_run(diagnosis=None if findings is None else diagnosis(sweep(), findings))
    assert blocks(subsection(section(run, "status"), "next"), Paragraph)[0].text == text


def test_results_show_the_prefix_cache_and_a_conversations_turns():
    cache = PrefixCacheLevel(
        block_tokens=128,
        block_source="the engine's own report",
        prompt_tokens=14842,
        shared_tokens=11813,
        shareable_tokens=11008,
        ideal_hit_rate=0.742,
        queries=14842.0,
        hits=1484.0,
        hit_rate=0.1,
        engine="vllm",
    )
    turns = [
        TurnStats(
            turn=k,
            completed=6,
            mean_input_tokens=654.0 + 170 * k,
            mean_ttft_ms=50.0 * (k + 1),
            median_ttft_ms=50.0 * (k + 1),
            p99_ttft_ms=60.0 * (k + 1),
            mean_e2e_latency_ms=300.0,
        )
        for k in range(3)
    ]
    levels = [lv.model_copy(update={"prefix_cache": cache, "turns": turns}) for lv in sweep()]
    results = section(report_run(bench_summary(levels)), "results")
    tables = {t.header[2]: t for t in blocks(results, Table)}
    prefix = tables["ideal hit rate"]
    assert prefix.rows[0][2:4] == ["74.2%", "10.0%"]
    by_turn = tables["completed"]
    assert [row[1] for row in by_turn.rows[:3]] == ["0", "1", "2"]
    assert [row[4] for row in by_turn.rows[:3]] == ["50.0", "100.0", "150.0"]
    assert "prefix_cache" in [f.plot.key for f in blocks(results, Figure)]
