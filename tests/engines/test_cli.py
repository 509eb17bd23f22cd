"""`servelab engine check|up|down|logs|list` through Typer's runner, the simulator for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli.engine import engine_app
from servelab.engines.detached import engine_down
from servelab.engines.state import load_records
from tests.sessions import session_left

runner = CliRunner()


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    monkeypatch.setenv("SERVELAB_STATE", str(state))
    return state


@pytest.fixture
def cleanup():
    """Whatever a test leaves running is stopped."""
    yield
    for name in load_records():
        engine_down(name, grace_s=2)


def invoke(*args: str):
    return runner.invoke(engine_app, list(args), catch_exceptions=False)


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_check_prints_the_command_and_the_closest_flag(tmp_path: Path):
    spec = tmp_path / "glm.yaml"
    spec.write_text(
        "engine: sglang\nmodel: /models/GLM-5-NVFP4\nport: 8000\ntp: 8\n"
        "knobs: {max_running_requests: 1024, cuda_graphs: false}\n"
        "env: {NCCL_IB_DISABLE: '1'}\nextra_args: [--moe-runer-backend, triton]\n"
    )
    result = invoke("check", str(spec), "--recorded")
    assert result.exit_code == 2
    assert "NCCL_IB_DISABLE=1 " in result.output
    assert "-m sglang.launch_server --model-path /models/GLM-5-NVFP4 --host 127.0.0.1" in (
        result.output
    )
    assert "--port 8000 --enable-metrics" in result.output
    assert "--tp-size 8 --max-running-requests 1024 --disable-cuda-graph" in result.output
    assert "unknown --moe-runer-backend; did you mean --moe-runner-backend?" in result.output
    assert "error: sglang does not accept --moe-runer-backend" in result.output

    result = invoke("check", str(spec), "--recorded", "--json", "--extra-args", "--ep-size 2")
    document = json.loads(result.output[: result.output.rindex("}") + 1])
    assert document["flags_source"] == "recorded list sglang-0.5.23 (servelab/engines/flags)"
    assert document["command"][-2:] == ["--ep-size", "2"]
    assert document["unknown_flags"] == [
        {"flag": "--moe-runer-backend", "suggestion": "--moe-runner-backend"}
    ]


def test_check_from_options_alone_passes():
    result = invoke(
        "check", "--engine", "vllm", "--model", "m", "--tp", "2", "--knob", "prefix_cache=false",
        "--recorded",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "--tensor-parallel-size 2 --no-enable-prefix-caching" in result.output
    assert "flags   all accepted, per recorded list vllm-0.33.0" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check"], "error: no engine given (pass a spec file or --engine)"),
        (
            ["check", "--engine", "vllm", "--model", "m", "--knob", "chunked_prefill_size=512"],
            "error: engine 'vllm' has no setting for knob chunked_prefill_size",
        ),
        (
            ["check", "--engine", "sim", "--knob", "max_runing_requests=3"],
            "unknown key 'max_runing_requests' in knobs (did you mean 'max_running_requests'?)",
        ),
        (["check", "--engine", "sglan"], "error: unknown engine 'sglan' (did you mean 'sglang'?)"),
        (["check", "nope.yaml"], "error: no engine spec at nope.yaml"),
        (["up", "--engine", "openai"], "is attached by URL; there is nothing to start"),
        (["down"], "error: give one engine NAME or --all"),
        (["down", "ghost"], "error: no engine named 'ghost' is recorded (none is running)"),
        (["logs", "ghost"], "error: no log for an engine named 'ghost'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str):
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_up_list_logs_down_with_the_simulator(cleanup):
    result = invoke("up", "--engine", "sim", "--served-name", "sim-a", "--name", "a", "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output[result.output.index("{") :])
    pgid, supervisor = record["engine_process"]["pid"], record["supervisor"]["pid"]
    # The command has returned: the engine runs on, detached, and answers.
    assert get(record["url"] + "/v1/models")["data"][0]["id"] == "sim-a"

    listed = invoke("list", "--json")
    assert [entry["name"] for entry in json.loads(listed.output)] == ["a"]
    table = invoke("list").output
    assert "a " in table and record["url"] in table

    logs = invoke("logs", "a").output.splitlines()
    assert logs[0].split(" ", 2)[2].startswith("servelab: launching ")
    assert any(line.endswith(f"serving on {record['url']}") for line in logs)
    assert invoke("logs", "a", "-n", "1").output.strip() == logs[-1]

    again = invoke("up", "--engine", "sim", "--name", "a")
    assert again.exit_code == 2 and "an engine named 'a' is running" in again.output

    result = invoke("down", "a", "--grace", "5s")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("a stopped\n  GPU memory: ")
    # The engine and its supervisor each lead a session: nothing of either is left.
    assert session_left(pgid) == [] and session_left(supervisor) == []
    assert invoke("list").output.strip() == "no engine is running"
    # Its log outlives it.
    assert "servelab: engine exited with code 0" in invoke("logs", "a").output


def test_the_engine_outlives_the_up_process(cleanup, _state: Path):
    code = "from servelab.cli.engine import engine_app; engine_app()"
    up = subprocess.run(
        [sys.executable, "-c", code, "up", "--engine", "sim", "--name", "p", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SERVELAB_STATE": str(_state)},
    )
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    with urllib.request.urlopen(record["url"] + "/v1/models", timeout=5) as response:
        assert response.status == 200
    assert invoke("down", "p").exit_code == 0
    assert session_left(record["engine_process"]["pid"]) == []
    assert session_left(record["supervisor"]["pid"]) == []


def test_an_engine_that_dies_at_start_up_exits_5_with_its_log(cleanup):
    result = invoke("up", "--engine", "sim", "--name", "bad", "--extra-args", "--no-such-flag")
    assert result.exit_code == 5
    assert "error: sim exited with code 2 while starting" in result.output
    assert "No such option: --no-such-flag" in result.output
    assert load_records() == {}


def test_down_all_and_stale_entries(cleanup):
    for name in ("one", "two", "three"):
        assert invoke("up", "--engine", "sim", "--name", name).exit_code == 0
    records = load_records()
    three = records["three"]
    os.killpg(three.supervisor.pid, signal.SIGKILL)
    os.killpg(three.pgid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while three.running() and time.monotonic() < deadline:
        time.sleep(0.1)
    result = invoke("down", "--all", "--grace", "5s")
    assert result.exit_code == 0, result.output
    assert "three had already exited" in result.output
    assert "one stopped" in result.output and "two stopped" in result.output
    assert load_records() == {}
    for record in records.values():
        assert session_left(record.pgid) == [] and session_left(record.supervisor.pid) == []


def test_logs_follow_until_the_engine_stops(cleanup):
    assert invoke("up", "--engine", "sim", "--name", "f").exit_code == 0
    stopper = threading.Timer(1.0, lambda: engine_down("f", grace_s=2))
    stopper.start()
    result = invoke("logs", "f", "--follow")
    stopper.join()
    assert result.exit_code == 0
    assert result.output.rstrip().endswith("servelab: engine exited with code 0")
