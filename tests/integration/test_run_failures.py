"""`servelab run` when its endpoint or its engine fails: one line, a code, nothing half-made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from servelab.core.net import free_port
from tests.conftest import SERVELAB


def test_run_against_an_unreachable_url_leaves_no_run_directory(tmp_path):
    result = subprocess.run(
        [*SERVELAB, "run", "--url", f"http://127.0.0.1:{free_port()}", "--runs-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "nothing answers" in result.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_engine_killed_mid_level_keeps_finished_levels_and_exits_6(tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen(
        [
            *SERVELAB,
            "run",
            "--concurrency",
            "1,2,4",
            "--duration",
            "8s",
            "--output-len",
            "16",
            "--input-len",
            "16",
            "--out",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "stderr.txt").open("w"),
        text=True,
    )
    summary_path = out / "summary.json"
    deadline = time.monotonic() + 240  # levels of 8 s: level 1 is killed well inside its span
    pid = None
    while time.monotonic() < deadline and process.poll() is None:
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        if summary.get("levels"):  # level 0 is done: level 1 runs for the next 8 s
            pid = int(summary["engine"]["pid"])
            break
        time.sleep(0.1)
    time.sleep(2.0)
    assert pid is not None, (tmp_path / "stderr.txt").read_text()
    os.kill(pid, signal.SIGKILL)
    assert process.wait(timeout=120) == 6, (tmp_path / "stderr.txt").read_text()
    stderr = (tmp_path / "stderr.txt").read_text()
    last = stderr.strip().splitlines()[-1]
    assert "Traceback" not in stderr
    assert "the engine died during level 1 (signal SIGKILL)" in last and str(out) in last
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "failed" and "signal SIGKILL" in summary["failure"]
    assert [level["level"] for level in summary["levels"]] == [0, 1]  # level 2 never ran
    assert summary["levels"][0]["failed"] == 0
    dying = summary["levels"][1]
    assert dying["failed"] >= 1 and set(dying["errors"]) == {"engine_died"}
    events = json.loads((out / "engine_events.json").read_text())
    assert events["exit"]["code"] == -signal.SIGKILL and events["exit"]["during"] == "level 1"
    assert events["exit"]["log_tail"]
    report = (out / "report.md").read_text()
    assert "The engine exited during level 1 with signal SIGKILL" in report
