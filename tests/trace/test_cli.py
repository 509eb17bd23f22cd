"""`servelab trace` through Typer: tables, the JSON list, and one line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from tests.trace.builders import cpu_op, write_trace
from tests.trace.test_summary import gpu_events

runner = CliRunner()


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    write_trace(tmp_path / "rank0.pt.trace.json.gz", gpu_events(), gz=True)
    write_trace(tmp_path / "cpu.trace.json", [cpu_op("aten::mm", 0.0, 10.0)])
    return tmp_path


def test_json_is_a_list_of_summaries(traces: Path):
    result = runner.invoke(app, ["trace", str(traces), "--json", "--gap-ms", "0.1", "--top", "2"])
    assert result.exit_code == 0, result.output
    documents = json.loads(result.stdout)
    assert [Path(d["file"]).name for d in documents] == ["cpu.trace.json", "rank0.pt.trace.json.gz"]
    cpu, gpu = documents
    assert gpu["schema"] == "servelab.trace/1"
    assert (gpu["busy_us"], gpu["window_us"], gpu["device"]) == (95.0, 300.0, True)
    assert len(gpu["top_ops"]) == 2 and len(gpu["top_host_ops"]) == 2
    assert gpu["gaps"]["long_count"] == 1 and gpu["gaps"]["long_threshold_us"] == 100.0
    assert gpu["steps"]["prefill"] == 1 and gpu["per_step"]["steps"] == 2
    assert set(gpu["threads"][0]) == {
        "pid",
        "tid",
        "name",
        "events",
        "exclusive_us",
        "window_share",
    }
    assert cpu["busy_basis"] == "cpu_op" and cpu["notes"][0].startswith("CPU-only trace")


def test_given_steps_and_a_custom_marker(traces: Path):
    file = traces / "rank0.pt.trace.json.gz"
    result = runner.invoke(app, ["trace", str(file), "--json", "--steps", "4"])
    (document,) = json.loads(result.stdout)
    assert document["per_step"] == {
        "steps": 4,
        "source": "given",
        "window_us": 75.0,
        "busy_us": 23.75,
        "kernels": 0.75,
        "kernel_us": 22.5,
        "device_events": 1.25,
    }
    result = runner.invoke(app, ["trace", str(file), "--json", "--step-marker", "generation_2"])
    (document,) = json.loads(result.stdout)
    assert (document["steps"]["source"], document["steps"]["count"]) == ("custom", 1)


def test_tables(traces: Path):
    result = runner.invoke(
        app, ["trace", str(traces / "rank0.pt.trace.json.gz"), "--gap-ms", "0.1"]
    )
    assert result.exit_code == 0, result.output
    for text in (
        "busy",
        "95.000 µs"
        if False
        else "0.095 ms of device (kernel, memcpy, memset): 0.317 of the window",
        "kernels",
        "Device kernels and copies by exclusive time",
        "Host ops by exclusive time",
        "Longest gaps and the host op before each",
        "aten::add",
        "Per step (2 steps, marked in the trace)",
        "Steps: vLLM execute_context_N(T)_generation_M(U)",
        "Host threads: exclusive time",
    ):
        assert text in result.stdout, text
    cpu = runner.invoke(app, ["trace", str(traces / "cpu.trace.json")])
    assert "CPU ops by exclusive time" in cpu.stdout
    assert "CPU-only trace: device-busy is not defined" in " ".join(cpu.stdout.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{dir}/missing.json"], "error: no trace file or folder at"),
        (["{dir}/notes.txt"], "is not a JSON trace"),
        (["{dir}/object.json"], "holds no trace events"),
        (["{dir}/empty"], "error: no trace files in"),
        (["{dir}/cpu.trace.json", "--top", "0"], "error: --top must be at least 1"),
        (["{dir}/cpu.trace.json", "--gap-ms", "0"], "error: --gap-ms"),
        (["{dir}/cpu.trace.json", "--steps", "0"], "error: --steps must be at least 1"),
        (["{dir}/cpu.trace.json", "--step-marker", "("], "is not a regular expression"),
        (["{dir}/cpu.trace.json", "--gap-ms", "x"], "error:"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(traces: Path, args: list[str], message: str):
    (traces / "notes.txt").write_text("not a trace\n")
    (traces / "object.json").write_text('{"displayTimeUnit": "ms"}')
    (traces / "empty").mkdir()
    result = runner.invoke(app, ["trace", *(arg.format(dir=traces) for arg in args)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
    assert result.stdout == ""


def test_the_command_as_a_subprocess(traces: Path):
    command = [sys.executable, "-m", "servelab", "trace"]
    done = subprocess.run(
        [*command, str(traces / "rank0.pt.trace.json.gz"), "--json"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["busy_us"] == 95.0
    (traces / "cut.json").write_text('{"traceEvents": [')
    done = subprocess.run([*command, str(traces / "cut.json")], capture_output=True, text=True)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: {traces / 'cut.json'} is not a JSON trace: ")
