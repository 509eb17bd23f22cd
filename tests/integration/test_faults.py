"""Bad servers and bad input: every failure is recorded, one line is printed, no traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from servelab.engines.launcher import free_port
from tests.conftest import SERVELAB


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SERVELAB, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def assert_no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize(
    ("option", "kind"),
    [
        ("fail_rate", "http"),
        ("drop_rate", "dropped"),
        ("malformed_rate", "malformed"),
        ("stall_rate", "stall"),
    ],
)
def test_faulty_server_failures_are_counted_and_the_run_goes_on(start_sim, tmp_path, option, kind):
    sim = start_sim(ttft_ms=5, itl_ms=5, seed=3, **{option: 0.5})
    out = tmp_path / "run"
    result = run_cli(
        "bench",
        "--url",
        sim.url,
        "--concurrency",
        "4",
        "--num-requests",
        "24",
        "--input-len",
        "16",
        "--output-len",
        "16",
        "--warmup",
        "0",
        "--stall-timeout",
        "1s",
        "--out",
        str(out),
    )
    assert_no_traceback(result)
    assert result.returncode == 3, result.stderr
    level = summary_of(out)["levels"][0]
    assert level["failed"] > 0 and level["completed"] > 0
    assert level["completed"] + level["failed"] == 24
    assert set(level["errors"]) == {kind}
    assert f"failed ({kind})" in result.stderr
    records = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert sum(1 for r in records if r["error_kind"] == kind) == level["failed"]


def test_unreachable_url_is_one_line_and_exit_4(tmp_path):
    result = run_cli(
        "bench", "--url", f"http://127.0.0.1:{free_port()}", "--runs-dir", str(tmp_path)
    )
    assert result.returncode == 4
    assert_no_traceback(result)
    assert result.stderr.strip().count("\n") == 0 and "nothing answers" in result.stderr
    assert not any(tmp_path.iterdir())  # no empty run folder left behind


def test_server_that_answers_500_to_everything(start_sim, tmp_path):
    sim = start_sim(fail_rate=1.0)
    result = run_cli("bench", "--url", sim.url, "--runs-dir", str(tmp_path))
    assert result.returncode == 4
    assert_no_traceback(result)
    assert "HTTP 500" in result.stderr


def test_all_requests_failing_mid_stream_is_exit_4(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=5, drop_rate=1.0)
    out = tmp_path / "run"
    result = run_cli("bench", "--url", sim.url, "--num-requests", "4", "--out", str(out))
    assert result.returncode == 4
    assert summary_of(out)["levels"][0]["errors"] == {"dropped": 4}


@pytest.mark.parametrize(
    "args",
    [
        ["--concurrency", "0"],
        ["--concurrency", "1,x"],
        ["--concurrency", "2", "--request-rate", "3"],
        ["--timeout", "30"],
        ["--range-ratio", "1.5"],
        ["--slo", "latency=3s"],
        ["--dataset", "sharegpt:/no/such/file.json"],
        ["--dataset", "nonsense"],
        ["--header", "no-colon"],
        ["--extra-body", "[1]"],
        ["--tokenizer", "/no/such/tokenizer"],
        ["--api", "grpc"],
        ["--num-requests", "3", "--duration", "5s"],
    ],
)
def test_bad_cli_values_exit_2_with_one_clear_line(args, tmp_path):
    result = run_cli("bench", "--url", "http://127.0.0.1:9", "--runs-dir", str(tmp_path), *args)
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result)
    assert_one_error_line(result)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuch"], "error: No such command 'nosuch'"),
        (["bench", "--nope"], "error: No such option: --nope"),
        (["bench", "--url"], "error: Option '--url' requires an argument"),
        (["model", "--tp", "x"], "error: Invalid value for '--tp'"),
        (["probe", "--comm=yes"], "error: Option '--comm' does not take a value"),
        (["sim", "--port", "abc"], "error: Invalid value for '--port'"),
        (["run", "extra"], "error: Got unexpected extra argument"),
        (["engine", "logs"], "error: Missing argument 'name'"),
        (["engine", "up", "--nope"], "error: No such option: --nope"),
        (["engine", "frobnicate"], "error: No such command 'frobnicate'"),
    ],
)
def test_usage_errors_of_every_command_are_one_line_and_exit_2(args, message):
    result = run_cli(*args, timeout=60)
    assert result.returncode == 2, result.stderr
    assert_no_traceback(result)
    assert_one_error_line(result)
    assert result.stderr.startswith(message), result.stderr
    assert "--help" in result.stderr  # where the valid choices are


def assert_one_error_line(result: subprocess.CompletedProcess[str]) -> None:
    assert result.stderr.startswith("error: "), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_bad_url_is_a_usage_error(tmp_path):
    result = run_cli("bench", "--url", "localhost:8000", "--runs-dir", str(tmp_path))
    assert result.returncode == 2 and "not an http(s) URL" in result.stderr


def test_ctrl_c_keeps_partial_results(start_sim, tmp_path):
    sim = start_sim(ttft_ms=5, itl_ms=20)
    out = tmp_path / "run"
    process = subprocess.Popen(
        [
            *SERVELAB,
            "bench",
            "--url",
            sim.url,
            "--concurrency",
            "4",
            "--num-requests",
            "400",
            "--output-len",
            "10",
            "--warmup",
            "0",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    requests = out / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if requests.exists() and len(requests.read_text().splitlines()) >= 8:
            break
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "Traceback" not in stderr and f"partial results are in {out}" in stderr
    summary = summary_of(out)
    assert summary["status"] == "interrupted"
    level = summary["levels"][0]
    assert level["interrupted"] and 8 <= level["completed"] < 400
    finished = [json.loads(x) for x in requests.read_text().splitlines()]
    assert sum(1 for r in finished if r["ok"]) == level["completed"]
