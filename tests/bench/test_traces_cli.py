"""`servelab bench --dataset trace:PATH`: bad input is one line and exit 2, before any
request; the options say what they do."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from tests.traces import MOONCAKE

UNREACHABLE = "http://127.0.0.1:9"
"""Nothing listens there: every case below must fail before the preflight tries it."""

runner = CliRunner()


def _bench(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["bench", "--url", UNREACHABLE, *args])
    return result.exit_code, result.stderr


def _one_error(*args: str) -> str:
    code, stderr = _bench(*args)
    lines = stderr.splitlines()
    assert code == 2 and len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_help_explains_the_trace_options():
    result = runner.invoke(app, ["bench", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.output.split())
    assert "trace:PATH: a Mooncake JSONL or BurstGPT CSV trace" in text
    assert re.search(r"--trace-speed .*gaps between arrivals divided by it", text)
    assert re.search(r"--trace-window START:END .*trace's own clock", text)


def test_a_missing_trace_file(tmp_path):
    line = _one_error("--dataset", f"trace:{tmp_path / 'absent.jsonl'}")
    assert line == f"error: trace file {tmp_path / 'absent.jsonl'} does not exist"


def test_a_malformed_line_is_named_with_what_is_wrong(tmp_path):
    trace = tmp_path / "t.jsonl"
    lines = MOONCAKE.read_text().splitlines()
    lines[2] = lines[2].replace('"input_length": 300', '"input_length": 3000')
    trace.write_text("\n".join(lines) + "\n")
    line = _one_error("--dataset", f"trace:{trace}")
    assert f"{trace}:3: 1 hash_ids for 3000 input tokens" in line


def test_an_empty_window_says_what_the_trace_spans():
    line = _one_error("--dataset", f"trace:{MOONCAKE}", "--trace-window", "10s:20s")
    assert "no request" in line and "the trace spans 0–3.781 s" in line


@pytest.mark.parametrize("speed", ["0", "-2", "nan"])
def test_a_speed_that_is_not_positive(speed):
    line = _one_error("--dataset", f"trace:{MOONCAKE}", "--trace-speed", speed)
    assert line.startswith("error: --trace-speed must be above 0")


def test_a_window_without_units():
    line = _one_error("--dataset", f"trace:{MOONCAKE}", "--trace-window", "1:2")
    assert "'1' is not a duration" in line


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--concurrency", "1,8"], "--concurrency does"),
        (["--request-rate", "4"], "--request-rate does"),
        (["--num-requests", "5", "--burstiness", "0.5"], "--num-requests and --burstiness do"),
        (["--duration", "10s"], "--duration does"),
        (["--input-len", "64", "--output-len", "8"], "--input-len and --output-len do"),
        (["--shared-prefix-len", "16", "--range-ratio", "0.5"], "--range-ratio and --shared"),
    ],
)
def test_options_that_set_the_load_or_lengths_are_refused_with_a_trace(options, named):
    line = _one_error("--dataset", f"trace:{MOONCAKE}", *options)
    assert named in line and "not apply to a trace replay" in line


def test_trace_options_need_a_trace():
    line = _one_error("--trace-window", ":10s")
    assert line == "error: --trace-speed and --trace-window apply to --dataset trace:PATH"
