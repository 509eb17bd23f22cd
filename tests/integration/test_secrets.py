"""A planted secret never reaches a file servelab writes: every file is grepped for it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import SERVELAB

KEY = "sk-planted-key-7f3a9"
HEADER_KEY = "hdr-planted-key-5c1e"
ENV_SECRET = "env-planted-secret-9b2d"


def _leaks(folder: Path) -> list[str]:
    planted = (KEY, HEADER_KEY, ENV_SECRET)
    return [
        str(path)
        for path in folder.rglob("*")
        if path.is_file() and any(s.encode() in path.read_bytes() for s in planted)
    ]


def _servelab(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVELAB, *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **env},
        check=False,
    )


def test_bench_on_a_launched_engine_writes_no_secret(tmp_path):
    spec = tmp_path / "sim.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "engine": "sim",
                "env": {"MY_SERVICE_TOKEN": ENV_SECRET, "NCCL_IB_DISABLE": "1"},
                "options": {"ttft_ms": 5, "itl_ms": 2},
            }
        )
    )
    runs = tmp_path / "runs"
    result = _servelab(
        "bench",
        "--engine",
        str(spec),
        "--concurrency",
        "2",
        "--num-requests",
        "4",
        "--output-len",
        "4",
        "--header",
        f"X-Api-Key: {HEADER_KEY}",
        "--api-key",
        KEY,
        "--runs-dir",
        str(runs),
        env={},
    )
    assert result.returncode == 0, result.stderr
    assert list(runs.rglob("summary.json")) and list(runs.rglob("engine.log"))
    assert _leaks(runs) == []
    assert KEY not in result.stdout + result.stderr
    summary = next(runs.rglob("summary.json")).read_text()
    assert "--api-key" in summary and "***" in summary  # the option is recorded, masked


def test_api_key_from_the_environment_is_not_written(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=2)
    out = tmp_path / "run"
    result = _servelab(
        "bench",
        "--url",
        sim.url,
        "--concurrency",
        "1",
        "--num-requests",
        "2",
        "--output-len",
        "4",
        "--out",
        str(out),
        env={"SERVELAB_API_KEY": KEY},
    )
    assert result.returncode == 0, result.stderr
    assert _leaks(tmp_path) == []


def test_detached_engine_state_and_spec_hold_no_secret(tmp_path):
    spec = tmp_path / "sim.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "engine": "sim",
                "env": {"HF_TOKEN": ENV_SECRET},
                "options": {"ttft_ms": 5},
            }
        )
    )
    state = tmp_path / "state"
    env = {"SERVELAB_STATE": str(state)}
    up = _servelab("engine", "up", str(spec), "--name", "secret-test", env=env)
    try:
        assert up.returncode == 0, up.stderr
        assert list(state.rglob("engines.json")) and list(state.rglob("spec.json"))
        assert _leaks(state) == []
    finally:
        down = _servelab("engine", "down", "secret-test", env=env)
    assert down.returncode == 0, down.stderr
    assert _leaks(state) == []


# -- a whole tuning study --------------------------------------------------------------------

FLAG_KEY = "sk-planted-flag-3e8c1"
FLAG_TOKEN = "hf-planted-flag-0a4d7"


@pytest.fixture(scope="module")
def postgres_db() -> Iterator[str]:
    """An empty database on a throwaway cluster (skipped where PostgreSQL 15 is missing,
    failed with CI=true), as the tune tests' fixture makes one."""
    from tests.tune.postgres import create_database, require_postgres, start_cluster, stop_cluster

    cluster = start_cluster(require_postgres())
    try:
        yield create_database(cluster, "secrets")
    finally:
        stop_cluster(cluster)


def _study_space(path: Path, **base: object) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "study": path.stem,
                "base": {
                    "engine": "sim",
                    "options": {"ttft_ms": 5, "itl_ms": 2},
                    "startup_timeout_s": 60,
                    **base,
                },
                "space": {"options.itl_ms": [2, 3]},
                "workload": {"input_len": 16, "output_len": 4},
                "load": {"concurrency": [1, 2], "num_requests": 4, "warmup": 0},
                "objective": "output_throughput@2",
                "trials": 2,
            }
        )
    )
    return path


def _storage(kind: str, request: pytest.FixtureRequest) -> list[str]:
    if kind == "sqlite":
        return []
    return ["--storage", request.getfixturevalue("postgres_db")]


def _database_leaks(url: str, planted: tuple[str, ...]) -> list[str]:
    """Every row of every table of the database, as text, grepped for the planted values."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql", 1)) as connection:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        ]
        assert "trial_user_attributes" in tables and "study_user_attributes" in tables
        leaks = []
        for table in tables:
            query = sql.SQL("SELECT t::text FROM {} AS t").format(sql.Identifier(table))
            for (row,) in connection.execute(query):
                leaks += [f"{table}: {row}" for s in planted if s in row]
    return leaks


PLANTED = (KEY, HEADER_KEY, ENV_SECRET, FLAG_KEY, FLAG_TOKEN)


def _all_leaks(folder: Path) -> list[str]:
    return [
        str(path)
        for path in folder.rglob("*")
        if path.is_file() and any(s.encode() in path.read_bytes() for s in PLANTED)
    ]


@pytest.mark.parametrize("storage", ["sqlite", "postgresql"])
def test_a_whole_study_writes_no_secret(storage: str, tmp_path: Path, request):
    """Secrets in the base's env: every file of the study folder (space.yaml, study.json,
    best.yaml, the trials' run directories, the report), the SQLite database's bytes, or
    every row of the PostgreSQL database."""
    space = _study_space(
        tmp_path / f"planted-{storage}.yaml",
        env={"HF_TOKEN": ENV_SECRET, "MY_SERVICE_TOKEN": KEY, "NCCL_IB_DISABLE": "1"},
    )
    out = tmp_path / "study"
    given = _storage(storage, request)
    result = _servelab(
        "tune", "run", str(space), "--out", str(out), "--runs-dir", str(tmp_path / "runs"),
        *given, env={},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (out / "space.yaml").is_file() and (out / "best.yaml").is_file()
    assert (out / "study.db").is_file() == (storage == "sqlite")
    assert _all_leaks(tmp_path / "runs") == [] and _all_leaks(out) == []
    assert not any(s in result.stdout + result.stderr for s in PLANTED)
    assert "HF_TOKEN: '***'" in (out / "space.yaml").read_text()
    if given:
        assert _database_leaks(given[1], PLANTED) == []


@pytest.mark.parametrize("storage", ["sqlite", "postgresql"])
def test_secret_engine_flags_never_reach_the_study(storage: str, tmp_path: Path, request):
    """`--api-key VALUE` and `--hf-token=VALUE` among the base's extra_args (the simulator
    refuses them, so every trial fails at start: its reason, log and spec are kept)."""
    space = _study_space(
        tmp_path / f"flags-{storage}.yaml",
        extra_args=["--api-key", FLAG_KEY, f"--hf-token={FLAG_TOKEN}"],
    )
    out = tmp_path / "study"
    given = _storage(storage, request)
    result = _servelab(
        "tune", "run", str(space), "--out", str(out), "--runs-dir", str(tmp_path / "runs"),
        "--no-report", *given, env={},
    )  # fmt: skip
    assert result.returncode == 3, result.stderr[-3000:]
    trials = json.loads((out / "study.json").read_text())["trials"]
    assert trials and all(t["state"] == "failed" for t in trials)
    assert "--api-key" in trials[0]["spec_yaml"]
    assert _all_leaks(tmp_path / "runs") == [] and _all_leaks(out) == []
    assert not any(s in result.stdout + result.stderr for s in PLANTED)
    if given:
        assert _database_leaks(given[1], PLANTED) == []
