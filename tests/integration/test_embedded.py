"""The real embedded engine (transformers serve on the CPU) driven over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.bench.knee import find_knee
from servelab.bench.quality.plan import QualityPlan
from servelab.bench.quality.results import load_quality
from servelab.bench.results import LevelSummary
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.workload import WorkloadSpec
from servelab.diagnose.cpu_layers import OP_FLOOR_NAME, ROOFLINE_NAME
from servelab.engines.base import EngineSpec
from servelab.engines.launcher import RunningEngine, launch_engine
from servelab.probe.nvml import open_nvml_with_reason
from tests.conftest import SERVELAB, DemoRun
from tests.sessions import session_left

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    os.environ.setdefault("SERVELAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    log = tmp_path_factory.mktemp("embedded") / "engine.log"
    engine = launch_engine(EngineSpec(engine="embedded", model="tiny"), log_path=log)
    yield engine
    engine.stop()
    assert engine.process.poll() is not None


def test_sweep_on_the_embedded_engine_is_exact(embedded: RunningEngine, tmp_path: Path):
    config = BenchConfig(
        url=embedded.url,
        model=embedded.spec.served_name,
        tokenizer=embedded.spec.model,
        pinning_fields=embedded.adapter.pinning_fields,
        has_tokenize=embedded.adapter.has_tokenize,
        engine="embedded",
        levels=[1, 4],
        num_requests=8,
        warmup=1,
        workload=WorkloadSpec(input_len=64, output_len=32),
        out=tmp_path / "run",
        metrics_url=embedded.url,
    )
    summary = run_bench(config).summary
    # transformers serve has no /metrics: the engine's telemetry says so instead of guessing
    engine_telemetry = [level.telemetry.engine for level in summary.levels if level.telemetry]
    assert len(engine_telemetry) == 2
    assert not any(t.available for t in engine_telemetry)
    assert all(t.reason for t in engine_telemetry)
    records = [
        json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    ]
    assert summary.run.workload["input_len_method"] == "tokenizer"
    for level in summary.levels:
        assert (level.completed, level.failed) == (8, 0)
        assert level.total_output_tokens == 8 * 32
        assert not level.output_tokens_estimated
        assert level.mean_tpot_ms is not None and level.mean_tpot_ms > 0
    measured = [r for r in records if not r["warmup"]]
    # one streamed chunk per token, every output runs to max_tokens (EOS is disabled)
    assert all(len(r["chunk_offsets_ns"]) == r["output_tokens"] == 32 for r in measured)
    assert all(r["chunk_tokens"] is None and r["finish_reason"] == "length" for r in measured)
    # exact inputs: the server's count is the prompt plus the same chat-template overhead
    assert all(r["input_tokens_target"] == 64 for r in measured)
    assert len({r["prompt_tokens"] - r["input_tokens_target"] for r in measured}) == 1


def test_quality_on_the_embedded_engine_reports_greedy_agreement_without_logprobs(
    embedded: RunningEngine, tmp_path: Path
):
    """transformers serve rejects `logprobs`: the probe compares greedy answers only, and
    says why it has no logprobs."""
    config = BenchConfig(
        url=embedded.url,
        model=embedded.spec.served_name,
        pinning_fields=embedded.adapter.pinning_fields,
        has_tokenize=embedded.adapter.has_tokenize,
        engine="embedded",
        levels=[2],
        num_requests=4,
        warmup=0,
        workload=WorkloadSpec(input_len=16, output_len=8),
        out=tmp_path / "run",
        quality=QualityPlan(prompts=3),  # one probe of each length class
    )
    summary = run_bench(config).summary
    quality = load_quality(tmp_path / "run")
    assert quality is not None and quality.engine == "transformers"
    assert not quality.logprobs_available
    assert quality.logprobs_reason == "transformers serve rejects `logprobs`"
    assert quality.forced_method is None and quality.errors == {}
    kinds = {c.kind: c for c in quality.comparisons}
    assert set(kinds) == {"determinism", "batch_invariance"}
    for comparison in kinds.values():
        m = comparison.metrics
        assert comparison.primary_metric == "divergence_share"
        assert m.probes == 3 and m.forced_tokens == 0 and m.mean_abs_dlogprob is None
        assert 0 <= m.exact_match_rate <= 1 and m.median_first_divergence is not None
        assert comparison.verdict in ("within_floor", "drift")
    assert summary.quality is not None and summary.quality.logprobs_available is False
    assert summary.levels[0].quality_probes == 3


def _gpus_nvml_sees() -> int:
    """What the run's probe finds on this host: 0 without NVML or without a GPU."""
    source, _ = open_nvml_with_reason()
    if source is None:
        return 0
    try:
        return source.device_count()
    finally:
        source.close()


@pytest.mark.timing
def test_servelab_run_end_to_end(demo_run: DemoRun):
    out, result = demo_run.out, demo_run.result
    assert result.returncode == 0, result.stderr[-2000:]
    assert demo_run.elapsed_s < 180
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete"
    # the adaptive sweep: from 1, doubling, until two levels past the knee it found
    levels = [lv["max_concurrency"] for lv in summary["levels"]]
    assert levels == [2**i for i in range(len(levels))]
    assert summary["sweep_stop"]["reason"] == "knee", summary["sweep_stop"]
    knee = find_knee([LevelSummary.model_validate(lv) for lv in summary["levels"]])
    assert knee.found and knee.levels_past == 2 and knee.concurrency == levels[-3]
    assert all(lv["failed"] == 0 and lv["completed"] > 0 for lv in summary["levels"])
    report = (out / "report.md").read_text()
    for part in (
        "## 1. Goal and targets",
        "## 2. Machine",
        "## 3. Engine",
        "transformers.cli.transformers",
        "## 4. Results",
        f"| {levels[-1]} |",
        f"The knee is at concurrency {knee.concurrency} ",
        "## 5. Replayed against measured",
        "## 6. Findings",
        "### Server warnings",
        "## 7. Status",
        "](plots/throughput.png)",
    ):
        assert part in report
    assert (out / "plots" / "throughput.png").read_bytes().startswith(b"\x89PNG")
    assert "<svg" in (out / "report.html").read_text()
    gpus_here = _gpus_nvml_sees()
    assert ("No NVIDIA GPU visible" in report) == (gpus_here == 0)
    events = json.loads((out / "engine_events.json").read_text())
    assert events["engine"] == "embedded" and events["lines"] > 0
    assert "engine_ready" in {event["kind"] for event in events["events"]}
    # transformers' continuous-batching logger at INFO: the cache it built is an event
    cache = [e for e in events["events"] if e["kind"] == "kv_cache_capacity"]
    assert len(cache) == 1 and cache[0]["fields"]["num_sectors"] > 0, events["events"]
    probe = json.loads((out / "probe.json").read_text())
    assert probe["schema"] == "servelab.probe/1"
    assert ("no-nvidia-gpu" in [v["code"] for v in probe["verdicts"]]) == (gpus_here == 0)
    assert "Uvicorn running" in (out / "engine.log").read_text()
    # the cache is given in tokens, sized for the sweep's cap; no share of memory
    command = summary["engine"]["command"]
    assert "--cb-max-memory-percent" not in command
    blocks = int(command[command.index("--cb-num-blocks") + 1])
    cap = int(summary["run"]["load"]["sweep"].split("up to ")[1].split()[0])
    assert blocks >= cap  # a 192-token request takes one 256-token block
    assert levels[-1] <= cap
    # the engine's CPU is measured at every level
    assert all(lv["engine_cpu"]["cores"] > 0 for lv in summary["levels"])
    assert session_left(summary["engine"]["pid"]) == []  # it led its session: all of it ended
    assert f"report: {out / 'report.html'}" in result.stderr
    if gpus_here == 0:
        _cpu_layers_hold_the_measured_step(json.loads((out / "diagnosis.json").read_text()))


def _cpu_layers_hold_the_measured_step(diagnosis: dict) -> None:
    """On the CPU the gap has its layers: the model's roofline from the probe's measured
    rates at the engine's threads and the eager op floor, each below the measured step
    (a ceiling the engine beat would be a wrong model), the engine's own layer last."""
    points = diagnosis["layers"]
    assert points and points[0]["point"] == "single stream", points
    for point in points:
        layers = {layer["name"]: layer for layer in point["layers"]}
        ceilings = [layers[ROOFLINE_NAME], layers[OP_FLOOR_NAME]]
        assert all(c["available"] and c["ms_per_token"] > 0 for c in ceilings), ceilings
        measured = point["layers"][-1]
        assert measured["available"] and measured["ms_per_token"] is not None, measured
        assert all(c["ms_per_token"] <= measured["ms_per_token"] for c in ceilings), point


def test_the_demo_says_it_was_given_no_price(demo_run: DemoRun):
    """No price, no GPU sampled: the demo says both, where the numbers would be."""
    no_price = "no price given (--gpu-hour-price or --machine-hour-price)"
    assert f"price: {no_price}" in demo_run.result.stdout.splitlines()
    report = (demo_run.out / "report.md").read_text()
    assert f"- Price: {no_price}." in report
    assert "Energy per token: not measured: GPU power was not sampled (give --gpus)." in report
    summary = json.loads((demo_run.out / "summary.json").read_text())
    assert summary["price"] is None
    assert all(lv["cost"]["usd_per_m_total_tokens"] is None for lv in summary["levels"])


def test_run_against_an_existing_endpoint(start_sim, tmp_path: Path):
    sim = start_sim(ttft_ms=5, itl_ms=2)
    out = tmp_path / "run"
    result = subprocess.run(
        [*SERVELAB, "run", "--url", sim.url, "--concurrency", "1,2,4", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = (out / "report.md").read_text()
    assert "The launch command" not in report and "did not launch this engine" in report
    assert sim.url in report
    assert not (out / "engine.log").exists()


def test_without_a_tokenizer_lengths_are_calibrated_from_usage(embedded, tmp_path: Path):
    config = BenchConfig(
        url=embedded.url,
        levels=[2],
        num_requests=4,
        warmup=0,
        workload=WorkloadSpec(input_len=100, output_len=8),
        out=tmp_path / "run",
    )
    summary = run_bench(config).summary
    assert summary.run.workload["input_len_method"] == "calibrated"
    assert summary.run.target["pinning_fields"] == []  # 422 to ignore_eos, then min_tokens
    assert any("ignore_eos" in note for note in summary.run.notes)
    level = summary.levels[0]
    assert level.completed == 4
    assert summary.run.workload["tokens_per_word"] > 0
    # close but not exact: within 15% of 100 tokens plus the chat template
    assert 100 <= level.total_input_tokens / 4 <= 100 * 1.15 + 10


def test_run_launches_the_engine_of_a_spec(tmp_path: Path):
    spec = tmp_path / "sim.yaml"
    spec.write_text(
        "engine: sim\nserved_name: capped\nknobs: {max_running_requests: 2}\n"
        "options: {ttft_ms: 5, itl_ms: 2}\n"
    )
    out = tmp_path / "run"
    result = subprocess.run(
        [
            *(*SERVELAB, "run", "--engine", str(spec), "--concurrency", "1,2,4"),
            *("--out", str(out), "--gpu-hour-price", "2.5"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine"]["engine"] == "sim" and summary["run"]["target"]["model"] == "capped"
    # one GPU by the spec's layout at $2.50 an hour, each level priced from its own fields
    price = "$2.50 an hour (1 GPU x $2.50 per GPU-hour; GPUs: the engine spec's layout (one GPU)"
    assert f"price: {price}; servelab run --gpu-hour-price)" in result.stdout.splitlines()
    assert summary["price"]["usd_per_hour"] == 2.5 and summary["price"]["gpus"] == 1
    for lv in summary["levels"]:
        usd = lv["cost"]["usd_per_m_output_tokens"]
        assert usd == pytest.approx(2.5 / 3600 / lv["output_throughput"] * 1e6)
    assert [lv["completed"] for lv in summary["levels"]] == [16, 16, 20]
    # the simulator's /metrics, read beside the load: never more than its cap of 2 running
    running = [lv["telemetry"]["engine"]["running_max"] for lv in summary["levels"]]
    assert running[-1] == 2 and max(running) == 2
    report = (out / "report.md").read_text()
    assert "The launch command" in report and "--max-running-requests 2" in report
    assert f"- Price: {price}" in report and "- Cost at the " in report
    assert session_left(summary["engine"]["pid"]) == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--url", "http://127.0.0.1:9"], "give --url (an endpoint) or --engine"),
        (["--preset", "tiny"], "--preset is for the embedded engine"),
        (["--model", "m"], "--model names the served model of --url"),
    ],
)
def test_run_refuses_an_engine_spec_with_what_does_not_go_with_it(
    tmp_path: Path, extra: list[str], message: str
):
    spec = tmp_path / "sim.yaml"
    spec.write_text("engine: sim\n")
    result = subprocess.run(
        [*SERVELAB, "run", "--engine", str(spec), *extra, "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_worker_that_dies_sizing_its_cache_is_named(tmp_path: Path):
    """transformers serve with a cache share too small for its batch tokens: its worker
    dies at the first request (HTTP 503); servelab names the cause and the knob, exit 5."""
    from servelab.engines.embedded import ensure_model

    spec = tmp_path / "starved.yaml"
    spec.write_text(
        f"engine: transformers\nmodel: {ensure_model('tiny')}\ndevice: cpu\n"
        "env: {OMP_NUM_THREADS: '1', HF_HUB_OFFLINE: '1', HF_HUB_DISABLE_UPDATE_CHECK: '1'}\n"
        "knobs: {mem_fraction: 0.0001}\n"
    )
    result = subprocess.run(
        [*SERVELAB, "bench", "--engine", str(spec), "--concurrency", "1", "--num-requests", "2",
         "--runs-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 5, result.stderr[-2000:]
    error = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1, result.stderr[-2000:]
    assert "refused its first request (HTTP 503)" in error[0]
    assert "kv_cache_sizing_failed" in error[0] and "num_sectors = -" in error[0]
    assert "kv_cache_tokens" in error[0]
    assert "Traceback" not in result.stderr
