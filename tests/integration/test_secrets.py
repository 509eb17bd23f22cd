"""A planted secret never reaches a file servelab writes: every file is grepped for it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

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
