"""The best trial's lead is checked against the noise of the trials' own requests: a best
2% ahead of the runner-up (an H200 study: 8,374 against 8,207 tok/s) is within noise."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

from servelab.store import RunDir
from servelab.tune.noise import best_noise
from servelab.tune.results import ObjectiveSpec, StudyResult, TrialRow
from tests.report.builders import bench_summary
from tests.unit.helpers import level_summary

OBJECTIVE = ObjectiveSpec(metric="total_throughput", at=8, direction="maximize", unit="tok/s")


def _records(n: int, *, e2e_ms: float, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        e2e = e2e_ms * (1 + rng.uniform(-0.1, 0.1))
        rows.append(
            {
                "index": i,
                "level": 0,
                "warmup": False,
                "ok": True,
                "t_send_ns": i * 1000,
                "t_end_ns": i * 1000 + int(e2e * 1e6),
                "chunk_offsets_ns": [int(e2e * 1e5), int(e2e * 1e6)],
                "output_tokens": 32,
                "prompt_tokens": 64,
            }
        )
    return rows


def _trial(
    folder: Path, number: int, total: float, *, concurrency: int = 8, n: int = 64, seed: int = 0
) -> TrialRow:
    run = folder / "trials" / f"{number:03d}"
    run.mkdir(parents=True)
    RunDir(run).write_json(
        "summary.json",
        bench_summary([level_summary(concurrency, total)]).model_dump(mode="json", by_alias=True),
    )
    rows = _records(n, e2e_ms=100.0 * 8374 / total, seed=seed)
    (run / "requests.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return TrialRow(
        number=number,
        state="complete",
        role="search",
        params={},
        values=[total],
        feasible=True,
        run_dir=f"trials/{number:03d}",
    )


def test_a_best_two_percent_ahead_is_within_noise_and_the_default_far_behind_is_not(
    tmp_path: Path,
):
    best = _trial(tmp_path, 1, 8374.0, seed=1)
    runner = _trial(tmp_path, 4, 8207.0, seed=2)
    default = _trial(tmp_path, 0, 5000.0, seed=3)
    checks = best_noise(best, [(runner, "runner-up"), (default, "default")], OBJECTIVE, tmp_path)
    by_trial = {c.trial: c for c in checks}
    assert by_trial[4].within_noise is True and by_trial[4].band_lo < 1 < by_trial[4].band_hi
    assert by_trial[4].text.startswith("trial 4 (runner-up): best is +2.0%, band ")
    assert by_trial[4].text.endswith("of their own requests: within noise")
    assert by_trial[0].within_noise is False and by_trial[0].band_lo > 1
    assert by_trial[0].text.endswith("beyond noise")


def test_a_level_of_one_block_says_no_band(tmp_path: Path):
    best = _trial(tmp_path, 1, 8374.0, concurrency=64, n=64, seed=1)
    runner = _trial(tmp_path, 2, 8207.0, concurrency=64, n=64, seed=2)
    objective = OBJECTIVE.model_copy(update={"at": 64})
    (check,) = best_noise(best, [(runner, "runner-up")], objective, tmp_path)
    assert check.within_noise is None and check.band_lo is None
    assert check.text == "trial 2 (runner-up): best is +2.0%; no band: one block of 64 requests"


def test_a_trial_run_on_another_host_says_where(tmp_path: Path):
    best = _trial(tmp_path, 1, 8374.0, seed=1)
    away = TrialRow(
        number=3,
        state="complete",
        role="search",
        params={},
        values=[8300.0],
        feasible=True,
        run_dir="trials/003",
        host="gpu-b",
    )
    (check,) = best_noise(best, [(away, "runner-up")], OBJECTIVE, tmp_path)
    assert check.within_noise is None
    assert "trial 3's run directory is not here (it ran on gpu-b)" in check.text


def test_the_study_document_keeps_the_checks_and_reads_without_them():
    fields = {
        "name": "s",
        "storage": "sqlite:///study.db",
        "engine": "sim",
        "workload": "w",
        "objectives": [OBJECTIVE.model_dump()],
        "sampler": "grid",
        "trials": [],
    }
    old = StudyResult.model_validate(fields)  # a study.json written before the checks
    assert old.best_noise == [] and old.confirmation is None
