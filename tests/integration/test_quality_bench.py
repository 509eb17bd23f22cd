"""`bench --quality` against the simulator: real HTTP on loopback, answers known.

The simulator answers greedily and deterministically, with logprobs in vLLM's shapes, and
plants corruption on request (docs/SIMULATOR.md), so each verdict here is known in
advance. Probe sets are small (8 probes: every length class) and levels short, to keep
the suite's time.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servelab.bench.endpoint import Api
from servelab.bench.quality.client import QualityClient
from servelab.bench.quality.plan import QualityPlan
from servelab.bench.quality.results import QualityResult, load_quality
from servelab.bench.results import BenchSummary
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.sweep import SweepPlan
from servelab.bench.workload import WorkloadSpec
from servelab.cli import app
from servelab.engines.base import EngineSpec
from servelab.engines.launcher import RunningEngine, launch_engine
from tests.conftest import SERVELAB

PROBES = 8
TIMING = {"ttft_ms": 5, "itl_ms": 5}
"""32 output tokens at 5 ms: a level of 16 requests at concurrency 4 lasts about 0.7 s,
longer than a loaded pass of 8 probes (about 0.4 s), so the pass runs under load whole."""
FAST = {"ttft_ms": 1, "itl_ms": 1}
"""Where only the verdicts matter: passes of a fifth the time."""


def _bench_cli(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *SERVELAB,
            *("bench", "--url", url, "--api", "completions", "--concurrency", "2,4"),
            *("--num-requests", "16", "--input-len", "16", "--output-len", "32"),
            *("--warmup", "0", "--quality-prompts", str(PROBES), "--out", str(out)),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "250"},
    )


def _launch(folder: Path, options: dict[str, Any]) -> RunningEngine:
    return launch_engine(
        EngineSpec(engine="sim", options=options, startup_timeout_s=60),
        log_path=folder / "sim.log",
    )


@pytest.fixture(scope="module")
def clean_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEngine]:
    """One clean simulator for the module's clean runs."""
    engine = _launch(tmp_path_factory.mktemp("clean-sim"), TIMING)
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def clean(clean_sim: RunningEngine, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The clean simulator benched with --quality by the CLI: its run dir and stdout."""
    run = tmp_path_factory.mktemp("clean") / "run"
    done = _bench_cli(clean_sim.url, run)
    assert done.returncode == 0, done.stderr[-3000:]
    return run, done.stdout


def _quality(run: Path) -> QualityResult:
    result = load_quality(run)
    assert result is not None
    return result


def test_a_clean_simulator_is_within_floor_with_logprobs(clean: tuple[Path, str]):
    run, stdout = clean
    quality = _quality(run)
    verdicts = {c.kind: c.verdict for c in quality.comparisons}
    assert verdicts == {"determinism": "within_floor", "batch_invariance": "within_floor"}
    # --url to an endpoint of unknown kind: OpenAI's echo + logprobs does the teacher forcing
    assert quality.logprobs_available and quality.logprobs_reason is None
    assert quality.forced_method == "echo"
    for comparison in quality.comparisons:
        m = comparison.metrics
        assert comparison.primary_metric == "mean_abs_dlogprob"
        assert m.probes == PROBES and m.forced_tokens > 0
        assert m.mean_abs_dlogprob == 0 and m.p99_abs_dlogprob == 0
        assert m.top1_agreement is not None and m.exact_match_rate == 1
    assert quality.errors == {} and quality.probe_s > 0
    assert len((run / "quality_probes.jsonl").read_text().splitlines()) == PROBES
    summary = json.loads((run / "summary.json").read_text())
    assert summary["quality"]["verdicts"] == verdicts
    assert summary["quality"]["loaded_level"] == 1
    # the table after the sweep
    assert "Quality" in stdout and "batch_invariance (before vs loaded)" in stdout
    assert "logprobs: available (teacher-forced by echo)" in stdout


def test_the_loaded_pass_is_named_and_in_no_level_count(clean: tuple[Path, str]):
    run, _ = clean
    quality = _quality(run)
    assert (quality.loaded_level, quality.loaded_beside) == (1, "level")  # 4 > 2
    assert quality.loaded_overlap_share == 1 and quality.notes == []
    loaded = next(p for p in quality.passes if p.name == "loaded")
    assert loaded.loaded and len(loaded.readings) == PROBES
    summary = json.loads((run / "summary.json").read_text())
    levels = summary["levels"]
    assert [lv["quality_probes"] for lv in levels] == [None, PROBES]
    assert all((lv["num_requests"], lv["completed"]) == (16, 16) for lv in levels)
    assert any("loaded pass" in note for note in levels[1]["notes"])
    assert len((run / "requests.jsonl").read_text().splitlines()) == 2 * 16


def test_a_wrong_token_against_the_clean_run(clean: tuple[Path, str], tmp_path: Path):
    """`wrong-token` after 3 tokens, compared with --quality-ref the clean run: `broken`
    by not_greedy in every comparison.

    The simulator plants the runner-up in sampling only, so its logits are the clean
    model's and teacher forcing (through the prompt) reads |Δlogprob| = 0. The free-running
    answer gives it away: asked for 2 top logprobs, the simulator lists the emitted token
    and then the position's best, and the emitted one is below it at temperature 0.
    """
    engine = _launch(tmp_path, FAST | {"corrupt": "wrong-token", "corrupt_after_tokens": 3})
    try:
        reference, _ = clean
        done = _bench_cli(engine.url, tmp_path / "run", "--quality-ref", str(reference), "--json")
    finally:
        engine.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout)  # --json carries the block
    assert printed["quality"]["verdicts"] == {
        "determinism": "broken",
        "batch_invariance": "broken",
        "configuration": "broken",
    }
    quality = _quality(tmp_path / "run")
    assert quality.reference_run == str(reference)
    assert set(quality.errors) == {"not_greedy"}
    config = next(c for c in quality.comparisons if c.kind == "configuration")
    assert config.reference == f"{reference}:before" and config.candidate == "before"
    assert all(c.reason.startswith("quality errors: not_greedy x") for c in quality.comparisons)
    before = next(p for p in quality.passes if p.name == "before")
    wrong = [r for r in before.readings if r.error_kind == "not_greedy"]
    assert len(wrong) >= PROBES - 1  # a runner-up tied with the best is an argmax too
    assert all("first at token 3" in (r.error or "") for r in wrong)


def test_a_wrong_token_unseen_by_the_logprobs_is_drift_of_the_answers(
    clean: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The same fault where the answer lists no alternative to the emitted token (top
    logprobs not asked for: the simulator, as vLLM with `logprobs: 0`, then sends the
    sampled token's alone), so not_greedy cannot fire: the configuration comparison is
    `drift` by the greedy answers while |Δlogprob| stays 0 (verdict rule 4)."""
    monkeypatch.setattr("servelab.bench.quality.client.TOP_LOGPROBS", 0)
    engine = _launch(tmp_path, FAST | {"corrupt": "wrong-token", "corrupt_after_tokens": 3})
    reference, _ = clean
    try:
        quality, _ = _bench(
            engine.url,
            tmp_path,
            engine_name="openai",  # the clean run's dialect: teacher forcing by echo
            plan=QualityPlan(prompts=PROBES, reference=reference),
        )
    finally:
        engine.stop()
    assert quality.errors == {} and quality.forced_method == "echo"
    verdicts = {c.kind: c.verdict for c in quality.comparisons}
    # the same wrong token every time: the run agrees with itself
    assert verdicts == {
        "determinism": "within_floor",
        "batch_invariance": "within_floor",
        "configuration": "drift",
    }
    config = next(c for c in quality.comparisons if c.kind == "configuration")
    assert config.primary_metric == "mean_abs_dlogprob" and config.metrics.mean_abs_dlogprob == 0
    assert config.moved == ["divergence_share"] and config.answers_moved_alone
    assert config.metrics.divergence_share == 1 and config.metrics.median_first_divergence == 3
    assert config.reason.startswith(
        "greedy answers moved while teacher-forced scores did not: decode path or sampler"
    )
    assert config.diff and all(entry.position == 3 for entry in config.diff)


def _bench(
    url: str,
    tmp_path: Path,
    *,
    api: Api = Api.COMPLETIONS,
    engine_name: str = "sim",
    plan: QualityPlan | None = None,
    **overrides: Any,
) -> tuple[QualityResult, BenchSummary]:
    config = BenchConfig(
        url=url,
        api=api,
        engine=engine_name,
        out=tmp_path / "run",
        workload=WorkloadSpec(input_len=16, output_len=32),
        warmup=0,
        quality=plan or QualityPlan(prompts=PROBES),
        **({"levels": [1], "num_requests": 4} | overrides),
    )
    summary = run_bench(config).summary
    return _quality(tmp_path / "run"), summary


@pytest.mark.parametrize(
    ("corrupt", "api", "kind"),
    [
        ("nan-logprobs", Api.COMPLETIONS, "nan_logprob"),
        ("reasoning-only", Api.CHAT, "reasoning_only"),
        ("no-finish-reason", Api.COMPLETIONS, "no_finish_reason"),
        ("usage-overcount", Api.COMPLETIONS, "short_stream"),
        ("wrong-token", Api.COMPLETIONS, "not_greedy"),
        ("wrong-token", Api.CHAT, "not_greedy"),  # top_logprobs: 2 on chat
    ],
)
def test_planted_corruption_is_broken_and_named(corrupt: str, api: Api, kind: str, tmp_path):
    engine = _launch(tmp_path, FAST | {"corrupt": corrupt})
    try:
        quality, summary = _bench(engine.url, tmp_path, api=api)
    finally:
        engine.stop()
    assert quality.engine == "vllm"  # the simulator speaks vLLM's dialect
    assert {c.kind: c.verdict for c in quality.comparisons} == {
        "determinism": "broken",
        "batch_invariance": "broken",
    }
    assert kind in quality.errors
    assert all(kind in c.reason for c in quality.comparisons)
    assert summary.quality is not None and summary.quality.errors == sum(quality.errors.values())
    assert summary.status == "complete"  # the sweep is not lost to the probe's findings


def test_an_adaptive_sweep_replays_its_last_level_beside_the_loaded_pass(
    clean_sim: RunningEngine, tmp_path: Path
):
    """Which level of an adaptive sweep is last is known only once it ran: the loaded pass
    runs after it, beside that level's load sent again, unmeasured."""
    quality, summary = _bench(clean_sim.url, tmp_path, sweep=SweepPlan(max_concurrency=2))
    assert [lv.max_concurrency for lv in summary.levels] == [1, 2]
    assert (quality.loaded_level, quality.loaded_beside) == (1, "replay")
    assert quality.loaded_overlap_share is not None and quality.loaded_overlap_share > 0.9
    assert all(lv.quality_probes is None for lv in summary.levels)  # no level was disturbed
    assert {c.kind: c.verdict for c in quality.comparisons}["batch_invariance"] == "within_floor"


def test_a_probe_that_cannot_run_loses_no_sweep(
    clean_sim: RunningEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A pass that raises (a bug, a crash in the client) is a note in quality.json; the
    sweep runs and completes, and no loaded pass is attempted without a before pass."""

    async def crash(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("the probe crashed")

    monkeypatch.setattr(QualityClient, "run_pass", crash)
    quality, summary = _bench(clean_sim.url, tmp_path)
    assert summary.status == "complete" and summary.levels[0].completed == 4
    assert quality.notes == ["the before pass could not run: RuntimeError: the probe crashed"]
    assert quality.passes == [] and quality.comparisons == []
    assert summary.quality is not None and summary.quality.verdicts == {}


@pytest.mark.parametrize("command", ["bench", "run"])
def test_a_reference_without_quality_json_is_one_line_and_exit_2(command: str, tmp_path: Path):
    result = CliRunner().invoke(
        app, [command, "--url", "http://127.0.0.1:9", "--quality-ref", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: --quality-ref {tmp_path}: the run has no quality.json (the reference run "
        "must have been run with --quality)"
    ]


def test_a_reference_of_another_probe_set_is_refused(clean: tuple[Path, str]):
    reference, _ = clean
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            "http://127.0.0.1:9",
            "--quality-ref",
            str(reference),
            "--quality-prompts",
            "4",
        ],
    )
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    assert "its probe set (8 probes, seed 39) is not this run's (4 probes, seed 39)" in line
