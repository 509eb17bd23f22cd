"""Each rule on hand-built runs: what it needs to fire, what stops it, what it says is missing.

Measured times are set relative to the model's own (the rules compare the two), so the
cases hold whatever the model's figures are.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.diagnose.findings import FindingKind, Severity
from servelab.diagnose.modelview import ModelView
from servelab.model import deploy
from tests.diagnose.builders import (
    INPUT_LEN,
    OUTPUT_LEN,
    client,
    diagnose,
    kinds,
    level,
    scan,
    summary,
    telemetry,
    write_run,
)

LLAMA = {"model": "llama-3.1-8b", "gpu": "h200"}
GLM = {"model": "glm-5-nvfp4", "gpu": "rtx-pro-6000", "tp": 8}


def model_tpot(batch: float, **deployment: object) -> float:
    name = str(deployment.pop("model"))
    view = ModelView(deployment=deploy(name, **deployment))  # type: ignore[arg-type]
    return view.tpot_ms(batch, INPUT_LEN, OUTPUT_LEN)


def running(n: float, *, queued: float = 0.0, kv: float = 0.2) -> dict[str, float]:
    return {
        "running_mean": n,
        "running_max": n,
        "queued_mean": queued,
        "queued_max": queued,
        "kv_usage_mean": kv,
        "kv_usage_max": kv,
    }


def capped_sweep(*, kv: float = 0.2, metrics: bool = True) -> list:
    """64 -> 128 plateaus: the batch stays at 64, TTFT jumps, TPOT stays."""

    def eng(n, q):
        return telemetry(engine=running(n, queued=q, kv=kv)) if metrics else None

    return [
        level(0, 32, total_tps=440, tpot_ms=115, ttft_ms=800, telemetry=eng(32, 0)),
        level(1, 64, total_tps=760, tpot_ms=131, ttft_ms=820, telemetry=eng(64, 0)),
        level(2, 128, total_tps=806, tpot_ms=133, ttft_ms=9300, telemetry=eng(64, 64)),
    ]


# --- errors --------------------------------------------------------------------------


def test_a_fault_rate_is_an_errors_finding_whatever_the_load(tmp_path: Path):
    run = summary(
        [
            level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20, completed=80, failed=20),
            level(1, 4, total_tps=400, tpot_ms=10, ttft_ms=20, completed=80, failed=20),
        ]
    )
    found = diagnose(write_run(tmp_path, run))
    top = found.findings[0]
    assert top.kind is FindingKind.ERRORS and top.severity is Severity.CRITICAL
    assert "20%" in top.title
    assert "every load" in top.explanation


def test_errors_that_grow_with_load_say_so(tmp_path: Path):
    run = summary(
        [
            level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20, completed=100),
            level(1, 64, total_tps=400, tpot_ms=10, ttft_ms=20, completed=95, failed=5),
        ]
    )
    errors = diagnose(write_run(tmp_path, run)).findings[0]
    assert errors.kind is FindingKind.ERRORS and errors.severity is Severity.WARNING
    assert "grow with load" in errors.explanation


def test_no_failures_no_errors_finding(tmp_path: Path):
    run = summary([level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20)])
    assert "errors" not in kinds(diagnose(write_run(tmp_path, run)))


# --- client_bound --------------------------------------------------------------------


def test_a_starved_client_at_the_deciding_level_is_critical(tmp_path: Path):
    lagging = client(
        client_bound=True, client_bound_reason="worker over 90% of a core", max_cpu_pct=99
    )
    run = summary(
        [
            level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20),
            level(
                1,
                2048,
                total_tps=900,
                tpot_ms=10,
                ttft_ms=900,
                client=lagging,
                telemetry=telemetry(engine=running(400)),
            ),
        ]
    )
    top = diagnose(write_run(tmp_path, run)).findings[0]
    assert top.kind is FindingKind.CLIENT_BOUND and top.severity is Severity.CRITICAL
    assert {e.source.split(" level")[0] for e in top.evidence} >= {
        "summary.json",
        "engine metrics (sglang)",
    }
    assert any("--workers" in a.text or "free cores" in a.text for a in top.actions)


def test_client_lag_with_the_load_delivered_is_only_information(tmp_path: Path):
    lagging = client(client_bound=True, client_bound_reason="p99 loop lag 1 ms > 10% of ITL")
    run = summary(
        [
            level(
                0,
                32,
                total_tps=500,
                tpot_ms=5,
                ttft_ms=20,
                client=lagging,
                little=31.8,
                telemetry=telemetry(engine=running(32)),
            ),
        ]
    )
    found = [
        f for f in diagnose(write_run(tmp_path, run)).findings if f.kind is FindingKind.CLIENT_BOUND
    ]
    assert len(found) == 1 and found[0].severity is Severity.INFO
    assert any(not e.supports for e in found[0].evidence)


# --- running_request_cap and kv_capacity ---------------------------------------------


def test_the_story_plateau_is_the_running_cap(tmp_path: Path):
    run = summary(capped_sweep())
    diagnosis = diagnose(write_run(tmp_path, run), engine="sglang", **GLM)
    top = diagnosis.findings[0]
    assert top.kind is FindingKind.RUNNING_REQUEST_CAP and top.severity is Severity.CRITICAL
    assert "64" in top.title
    assert top.actions[0].flags[0] == "--max-running-requests"
    assert int(top.actions[0].flags[1]) > 64
    assert top.expected_gain is not None and top.expected_gain.factor > 1.1


def test_a_running_cap_is_phrased_in_each_engines_flags(tmp_path: Path):
    run = summary(capped_sweep())
    folder = write_run(tmp_path, run)
    flags = {
        engine: next(
            f
            for f in diagnose(folder, engine=engine).findings
            if f.kind is FindingKind.RUNNING_REQUEST_CAP
        ).actions[0]
        for engine in ("sglang", "vllm", "sim")
    }
    assert flags["sglang"].flags[0] == "--max-running-requests"
    assert flags["vllm"].flags[0] == "--max-num-seqs"
    assert flags["sim"].flags[0] == "--max-running-requests"
    plain = next(f for f in diagnose(folder).findings if f.kind is FindingKind.RUNNING_REQUEST_CAP)
    assert plain.actions[0].knob == "max_running_requests" and not plain.actions[0].flags


def test_the_cap_in_the_engine_command_is_evidence(tmp_path: Path):
    command = ["python3", "-m", "sglang.launch_server", "--max-running-requests", "64"]
    run = summary(capped_sweep(metrics=False), engine={"engine": "sglang", "command": command})
    cap = diagnose(write_run(tmp_path, run)).findings[0]
    assert cap.kind is FindingKind.RUNNING_REQUEST_CAP
    assert any(e.source == "engine command: --max-running-requests 64" for e in cap.evidence)
    assert cap.severity is Severity.CRITICAL  # the command and the sweep agree


def test_the_same_plateau_with_a_full_cache_is_kv_capacity(tmp_path: Path):
    run = summary(capped_sweep(kv=0.97))
    found = kinds(diagnose(write_run(tmp_path, run)))
    assert found[0] == "kv_capacity"
    assert "running_request_cap" not in found


def test_kv_capacity_from_the_logged_cache_size(tmp_path: Path):
    log = scan(
        "sglang",
        ["[2026-11-29 15:06:29 TP0] KV Cache is allocated. #tokens: 24576, KV size: 2.00 GB"],
    )
    run = summary(capped_sweep(kv=0.6))  # 64 x 384 tokens fill 24,576
    kv = diagnose(write_run(tmp_path, run, events=log)).findings[0]
    assert kv.kind is FindingKind.KV_CAPACITY
    assert any("engine.log line 1" in e.source for e in kv.evidence)


def test_a_cache_of_fewer_full_requests_than_ran_bounds_the_gain_by_what_it_holds(tmp_path: Path):
    """64 ran at once, but the logged cache holds 16,384 tokens: 42.7 requests of 384 at
    full length. A preempted request runs its tokens again, so fewer than 64 may have been
    doing work that lasted: the estimate is 128 / 64, the most 128 / 42.7."""
    log = scan(
        "sglang",
        ["[2026-11-29 15:06:29 TP0] KV Cache is allocated. #tokens: 16384, KV size: 1.33 GB"],
    )
    run = summary(capped_sweep(kv=0.97))
    kv = diagnose(write_run(tmp_path, run, events=log)).findings[0]
    assert kv.kind is FindingKind.KV_CAPACITY
    gain = kv.expected_gain
    assert gain is not None and gain.metric == "total throughput"
    assert gain.factor == pytest.approx(128 / 64, rel=0.01)
    assert gain.high == pytest.approx(128 / (16_384 / 384), rel=0.01) and gain.low == 1.0


def test_work_the_preemptions_threw_away_widens_the_caches_most(tmp_path: Path):
    """Each preemption discards at most one request's tokens: the most grows by the
    preemptions per completed request of the level."""
    log = scan(
        "sglang",
        ["[2026-11-29 15:06:29 TP0] KV Cache is allocated. #tokens: 16384, KV size: 1.33 GB"],
    )
    rows = [
        {"kind": "metrics", "t_ns": t, "raw": {"vllm:num_preemptions_total": [[{}, n]]}}
        for t, n in ((10**9, 0.0), (2 * 10**9, 12.0))
    ]
    run = summary(capped_sweep(kv=0.97))
    kv = diagnose(write_run(tmp_path, run, events=log, metric_rows=rows)).findings[0]
    assert kv.kind is FindingKind.KV_CAPACITY and kv.expected_gain is not None
    heaviest = max(run.levels, key=lambda lv: lv.max_concurrency or 0)
    preempted = next(e.value for e in kv.evidence if e.what == "preemptions during concurrency 128")
    redone = 1 + float(preempted) / heaviest.completed
    assert redone > 1
    assert kv.expected_gain.high == pytest.approx(128 / (16_384 / 384) * redone, rel=0.01)
    assert kv.expected_gain.factor == pytest.approx(128 / 64, rel=0.01)


def test_preemptions_are_kv_pressure(tmp_path: Path):
    rows = [
        {"kind": "metrics", "t_ns": t, "raw": {"vllm:num_preemptions_total": [[{}, n]]}}
        for t, n in ((10**9, 0.0), (2 * 10**9, 12.0))
    ]
    run = summary(capped_sweep(kv=0.5))
    kv = diagnose(write_run(tmp_path, run, metric_rows=rows)).findings[0]
    assert kv.kind is FindingKind.KV_CAPACITY
    assert any(e.what.startswith("preemptions") and e.value == 12 for e in kv.evidence)


def test_a_plateau_without_metrics_or_log_says_what_it_cannot_tell(tmp_path: Path):
    run = summary(capped_sweep(metrics=False))
    cap = diagnose(write_run(tmp_path, run)).findings[0]
    assert cap.kind is FindingKind.RUNNING_REQUEST_CAP
    assert cap.severity is Severity.WARNING and cap.confidence < 0.5
    assert any("cannot be told from a full KV cache" in m for m in cap.missing)


# --- launch_overhead, comm_latency, memory_bound -------------------------------------


def _decode_sweep(ratio: float, *, nvml: dict | None = None, **deployment: object) -> list:
    """Levels at 1, 4 and 16 whose TPOT is `ratio` x the model's at their batch."""
    return [
        level(
            i,
            c,
            total_tps=c
            * (INPUT_LEN + OUTPUT_LEN)
            / (OUTPUT_LEN * ratio * model_tpot(c, **deployment) / 1e3),
            tpot_ms=ratio * model_tpot(c, **deployment),
            ttft_ms=5,
            telemetry=telemetry(engine=running(c), gpu=nvml),
        )
        for i, c in enumerate((1, 4, 16))
    ]


def test_a_fixed_cost_per_step_is_launch_overhead(tmp_path: Path):
    levels = [
        level(
            i,
            c,
            total_tps=100.0 * c,
            tpot_ms=model_tpot(c, **LLAMA) + 20.0,
            ttft_ms=5,
            telemetry=telemetry(engine=running(c)),
        )
        for i, c in enumerate((1, 4, 16))
    ]
    top = diagnose(write_run(tmp_path, summary(levels)), **LLAMA).findings[0]
    assert top.kind is FindingKind.LAUNCH_OVERHEAD
    assert top.severity is Severity.WARNING  # the model alone: one source
    per_step = next(e for e in top.evidence if e.what.startswith("per-step part"))
    assert per_step.value == pytest.approx(20.0, rel=0.05)
    assert top.expected_gain is not None and top.expected_gain.factor > 3


def test_launch_overhead_with_an_idle_gpu_and_graphs_off_is_critical(tmp_path: Path):
    idle = {"power_mean_pct": 19.0, "util_mean_pct": 19.0, "gpm_sm_util_mean_pct": 2.6}
    log = scan(
        "vllm", ["INFO 11-25 08:00:36 [arg_utils.py:1] non-default args: {'enforce_eager': True}"]
    )
    run = summary(_decode_sweep(10, nvml=idle, **LLAMA))
    top = diagnose(write_run(tmp_path, run, events=log), engine="vllm", **LLAMA).findings[0]
    assert top.kind is FindingKind.LAUNCH_OVERHEAD and top.severity is Severity.CRITICAL
    assert top.confidence > 0.8
    assert "--enforce-eager" in top.actions[0].text  # graphs on: vLLM's default, drop the flag


def test_near_the_model_on_one_gpu_is_memory_bound(tmp_path: Path):
    run = summary(_decode_sweep(1.15, **LLAMA))
    found = diagnose(write_run(tmp_path, run), **LLAMA)
    assert found.findings[0].kind is FindingKind.MEMORY_BOUND
    assert found.findings[0].severity is Severity.INFO
    assert "launch_overhead" not in kinds(found)


def test_idle_dram_halves_the_memory_bound_verdict(tmp_path: Path):
    busy = diagnose(write_run(tmp_path / "a", summary(_decode_sweep(1.1, **LLAMA))), **LLAMA)
    idle_gpu = {"power_mean_pct": 70.0, "gpm_dram_bw_util_mean_pct": 5.0}
    idle = diagnose(
        write_run(tmp_path / "b", summary(_decode_sweep(1.1, nvml=idle_gpu, **LLAMA))), **LLAMA
    )
    [a] = [f for f in busy.findings if f.kind is FindingKind.MEMORY_BOUND]
    [b] = [f for f in idle.findings if f.kind is FindingKind.MEMORY_BOUND]
    assert b.confidence == pytest.approx(a.confidence / 2, abs=0.01)


def test_tensor_parallel_near_its_comm_bound_ceiling_is_comm_latency(tmp_path: Path):
    run = summary(_decode_sweep(1.1, **GLM))
    top = diagnose(write_run(tmp_path, run), **GLM).findings[0]
    assert top.kind is FindingKind.COMM_LATENCY
    assert top.severity is Severity.WARNING  # communication-bound, links not known bad
    assert any(m.startswith("probe:") for m in top.missing)


def test_degraded_links_in_the_probe_make_comm_latency_critical(tmp_path: Path):
    from tests.diagnose.probes import story_vm_probe

    probe = story_vm_probe(tmp_path / "probe")
    run = summary(_decode_sweep(1.1, **GLM))
    top = diagnose(write_run(tmp_path / "run", run, probe=probe), **GLM).findings[0]
    assert top.kind is FindingKind.COMM_LATENCY and top.severity is Severity.CRITICAL
    codes = {e.source for e in top.evidence}
    assert "probe verdict p2p-access-denied" in codes and "probe verdict p2p-not-supported" in codes
    p2p = next(a for a in top.actions if "peer-to-peer" in a.text)
    assert p2p.target == "outside"  # the machine, not a setting servelab launches with


def test_one_gpu_has_no_comm_latency(tmp_path: Path):
    run = summary(_decode_sweep(1.1, **LLAMA))
    assert "comm_latency" not in kinds(diagnose(write_run(tmp_path, run), **LLAMA))


def test_a_run_faster_than_the_model_drops_the_model(tmp_path: Path):
    run = summary(_decode_sweep(0.2, **LLAMA))
    diagnosis = diagnose(write_run(tmp_path, run), **LLAMA)
    assert diagnosis.deployment is None
    assert any("faster than" in note for note in diagnosis.notes)
    assert not diagnosis.sources["model"].available


def test_the_time_scale_of_a_simulator_is_undone(tmp_path: Path):
    scaled = [
        lv.model_copy(update={"mean_tpot_ms": lv.mean_tpot_ms / 10})
        for lv in _decode_sweep(1.1, **LLAMA)
    ]
    diagnosis = diagnose(write_run(tmp_path, summary(scaled)), time_scale=10, **LLAMA)
    assert diagnosis.findings[0].kind is FindingKind.MEMORY_BOUND


# --- prefill_compute, moe_config_missing, accuracy_warning ---------------------------


def test_long_prompts_at_one_stream_are_prefill_compute(tmp_path: Path):
    run = summary(
        [level(0, 1, total_tps=900, tpot_ms=10, ttft_ms=2000, input_len=8192, output_len=128)],
        input_len=8192,
    )
    top = diagnose(write_run(tmp_path, run)).findings[0]
    assert top.kind is FindingKind.PREFILL_COMPUTE and top.severity is Severity.WARNING


def test_ttft_under_a_queue_is_not_prefill(tmp_path: Path):
    run = summary(
        [
            level(
                0,
                64,
                total_tps=900,
                tpot_ms=10,
                ttft_ms=5000,
                telemetry=telemetry(engine=running(32, queued=32)),
            )
        ]
    )
    assert "prefill_compute" not in kinds(diagnose(write_run(tmp_path, run)))


SGLANG_LOG = (
    Path(__file__).resolve().parents[1] / "engines" / "data" / "logs" / "sglang_startup.log"
)
VLLM_LOG = Path(__file__).resolve().parents[1] / "engines" / "data" / "logs" / "vllm_startup.log"


def _lines(path: Path, needle: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if needle in line]


@pytest.mark.parametrize(
    ("engine", "path", "needle"),
    [
        ("sglang", SGLANG_LOG, "Using default MoE kernel config"),
        ("vllm", VLLM_LOG, "Using default MoE config"),
    ],
)
def test_a_default_moe_kernel_config_in_the_log(
    tmp_path: Path, engine: str, path: Path, needle: str
):
    run = summary([level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20)], target_engine=engine)
    (tmp_path / "engine.log").write_text("\n".join(_lines(path, needle)) + "\n")
    diagnosis = diagnose(write_run(tmp_path, run))  # the engine.log is scanned as `engine`
    top = diagnosis.findings[0]
    assert top.kind is FindingKind.MOE_CONFIG_MISSING and top.severity is Severity.WARNING
    assert top.expected_gain is None and top.missing
    assert any("E=" in str(e.value) or "experts" in str(e.value) for e in top.evidence)


def test_deepgemm_scale_format_is_an_accuracy_warning(tmp_path: Path):
    lines = _lines(SGLANG_LOG, "DeepGemm is enabled but the scale_fmt")
    run = summary([level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20)])
    top = diagnose(write_run(tmp_path, run, events=scan("sglang", lines))).findings[0]
    assert top.kind is FindingKind.ACCURACY_WARNING
    assert top.evidence[0].source == "engine.log line 1"
    assert "x4" in top.evidence[0].what  # the same line from the launcher and three ranks


def test_the_whole_recorded_sglang_startup(tmp_path: Path):
    """The story's SGLang log beside its plateau: the cap first, the log's warnings after."""
    run = summary(capped_sweep(), target_engine="sglang")
    (tmp_path / "engine.log").write_text(SGLANG_LOG.read_text())
    found = kinds(diagnose(write_run(tmp_path, run), **GLM))
    assert found[0] == "running_request_cap"
    assert {"moe_config_missing", "accuracy_warning"} <= set(found)


# --- slo_violation, not_saturated ----------------------------------------------------


def test_slos_that_break_under_load(tmp_path: Path):
    slo = {"ttft": 200.0, "tpot": 50.0}
    run = summary(
        [
            level(
                0,
                1,
                total_tps=100,
                tpot_ms=20,
                ttft_ms=50,
                slo_ms=slo,
                good_fraction=1.0,
                p90_tpot_ms=21,
            ),
            level(
                1,
                8,
                total_tps=700,
                tpot_ms=40,
                ttft_ms=90,
                slo_ms=slo,
                good_fraction=0.95,
                p90_tpot_ms=45,
            ),
            level(
                2,
                32,
                total_tps=900,
                tpot_ms=70,
                ttft_ms=400,
                slo_ms=slo,
                good_fraction=0.3,
                p90_tpot_ms=80,
            ),
        ]
    )
    slo_finding = next(
        f
        for f in diagnose(write_run(tmp_path, run)).findings
        if f.kind is FindingKind.SLO_VIOLATION
    )
    assert "up to concurrency 8" in slo_finding.title
    assert {"ttft", "tpot"} <= {
        e.what.split()[1].lower() for e in slo_finding.evidence if e.unit == "x"
    }


def test_a_sweep_that_still_grows_is_not_saturated(tmp_path: Path):
    run = summary(
        [
            level(0, 1, total_tps=100, tpot_ms=10, ttft_ms=20),
            level(1, 2, total_tps=190, tpot_ms=10, ttft_ms=20),
            level(2, 4, total_tps=370, tpot_ms=10, ttft_ms=20),
        ]
    )
    found = diagnose(write_run(tmp_path, run))
    [finding] = [f for f in found.findings if f.kind is FindingKind.NOT_SATURATED]
    assert finding.severity is Severity.INFO
    assert finding.actions[0].flags[0] == "--concurrency"
    assert finding.actions[0].target == "load"  # a bench setting: tune never seeds it
    assert finding.missing  # no model: where the knee is expected cannot be said


def test_with_the_model_not_saturated_says_where_the_knee_is_expected(tmp_path: Path):
    run = summary(_decode_sweep(1.1, **LLAMA))
    found = diagnose(write_run(tmp_path, run), **LLAMA)
    [finding] = [f for f in found.findings if f.kind is FindingKind.NOT_SATURATED]
    assert any(e.source.startswith("model") for e in finding.evidence)


# --- evidence against -----------------------------------------------------------------


def test_a_busy_gpu_speaks_against_host_overhead(tmp_path: Path):
    busy = {"power_mean_pct": 85.0, "util_mean_pct": 100.0, "gpm_sm_util_mean_pct": 80.0}
    idle = {"power_mean_pct": 19.0, "util_mean_pct": 19.0, "gpm_sm_util_mean_pct": 2.6}
    found = {}
    for name, nvml in (("busy", busy), ("idle", idle)):
        run = summary(_decode_sweep(10, nvml=nvml, **LLAMA))
        diagnosis = diagnose(write_run(tmp_path / name, run), **LLAMA)
        found[name] = next(f for f in diagnosis.findings if f.kind is FindingKind.LAUNCH_OVERHEAD)
    assert found["busy"].confidence < found["idle"].confidence / 1.5
    assert (
        found["busy"].severity is Severity.WARNING and found["idle"].severity is Severity.CRITICAL
    )
    assert any(not e.supports for e in found["busy"].evidence)
    assert "the GPU is busy" in found["busy"].explanation


def test_a_configured_cap_above_every_load_is_not_the_limit(tmp_path: Path):
    command = ["vllm", "serve", "m", "--max-num-seqs", "256"]
    run = summary(capped_sweep(), engine={"engine": "vllm", "command": command})
    cap = next(
        f
        for f in diagnose(write_run(tmp_path, run)).findings
        if f.kind is FindingKind.RUNNING_REQUEST_CAP
    )
    # set but not binding: said as such, never as the cause, and no cap to raise
    assert cap.severity is Severity.INFO, cap
    assert "does not bind" in cap.title and "64" in cap.title  # the engine's own counts
    assert not any(a.flags for a in cap.actions), cap.actions
    configured = next(e for e in cap.evidence if e.source.startswith("engine command"))
    assert not configured.supports


def test_a_slow_engine_dilutes_the_collectives(tmp_path: Path):
    """Far above a comm-bound model, the engine's own excess is the larger part."""
    run = summary(_decode_sweep(8, **GLM))
    found = diagnose(write_run(tmp_path, run), **GLM)
    assert found.findings[0].kind is FindingKind.LAUNCH_OVERHEAD
    comm = next(f for f in found.findings if f.kind is FindingKind.COMM_LATENCY)
    assert comm.impact < 0.1


def test_the_story_plateau_with_its_vm_probe_is_still_the_cap(tmp_path: Path):
    from tests.diagnose.probes import story_vm_probe

    probe = story_vm_probe(tmp_path / "probe")
    run = summary(capped_sweep())
    found = diagnose(write_run(tmp_path / "run", run, probe=probe), engine="sglang", **GLM)
    assert kinds(found)[0] == "running_request_cap"
    assert "comm_latency" in kinds(found)


def test_kv_usage_implies_the_cache_size(tmp_path: Path):
    """vLLM's names carry no capacity: 12 running at 75% usage fill a cache of 12 requests."""
    levels = [
        level(
            0,
            4,
            total_tps=400,
            tpot_ms=5,
            ttft_ms=10,
            input_len=64,
            output_len=64,
            telemetry=telemetry(engine=running(4, kv=0.25)),
        ),
        level(
            1,
            16,
            total_tps=1200,
            tpot_ms=5,
            ttft_ms=12,
            input_len=64,
            output_len=64,
            telemetry=telemetry(engine=running(12, queued=4, kv=0.75)),
        ),
        level(
            2,
            64,
            total_tps=1210,
            tpot_ms=5,
            ttft_ms=900,
            input_len=64,
            output_len=64,
            telemetry=telemetry(engine=running(12, queued=52, kv=0.75)),
        ),
    ]
    found = diagnose(write_run(tmp_path, summary(levels, input_len=64, output_len=64)))
    assert kinds(found)[0] == "kv_capacity"
    assert "running_request_cap" not in kinds(found)


def test_a_run_where_nothing_succeeded(tmp_path: Path):
    run = summary([level(0, 4, total_tps=1, tpot_ms=10, ttft_ms=20, completed=0, failed=16)])
    found = diagnose(write_run(tmp_path, run), **LLAMA)
    assert kinds(found) == ["errors"]
    assert found.findings[0].severity is Severity.CRITICAL
    assert found.layers == []


def test_an_open_loop_sweep_late_arrivals_are_the_client(tmp_path: Path):
    late = client(
        client_bound=True, client_bound_reason="p99 schedule lag", p99_schedule_lag_ms=80.0
    )
    levels = [
        level(
            0,
            1,
            total_tps=100,
            tpot_ms=10,
            ttft_ms=20,
            load_mode="request_rate",
            max_concurrency=None,
            request_rate=10.0,
            little=2.0,
        ),
        level(
            1,
            1,
            total_tps=900,
            tpot_ms=10,
            ttft_ms=20,
            load_mode="request_rate",
            max_concurrency=None,
            request_rate=100.0,
            little=20.0,
            client=late,
        ),
    ]
    found = diagnose(write_run(tmp_path, summary(levels)))
    top = found.findings[0]
    assert top.kind is FindingKind.CLIENT_BOUND and top.severity is not Severity.INFO
    assert not found.knee.found
