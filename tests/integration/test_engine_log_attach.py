"""`--engine-log` beside `--url`: the log of an engine servelab did not launch, followed
while `servelab bench` sends a real load to the simulator on loopback.

The simulator writes no stats line, so a thread appends real-format SGLang lines (a stats
line and a full-KV-cache retract, as tests/engines/test_enginelog.py and the signature's
example have them) to a file while the bench runs; the run must carry exactly those.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.engines.signatures import SIGNATURES
from tests.conftest import SERVELAB

# SGLang's stats line (tests/engines/test_enginelog.py), with its values set to ones the
# simulator's own /metrics would never show together.
STATS_LINE = (
    "[2026-03-04 15:13:22] Decode batch, #running-req: 7, #token: 84, token usage: 0.42, cuda "
    "graph: True, gen throughput (token/s): 3.62, #queue-req: 3"
)
RETRACT_LINE = next(
    sig.example for sig in SIGNATURES["sglang"] if sig.name == "sglang.kv_cache_pool_full_retract"
)
# Written before the run: following starts at the file's end, so it must not be read.
OLD_LINE = next(
    sig.example for sig in SIGNATURES["sglang"] if sig.name == "sglang.kv_cache_allocated"
)


@contextmanager
def appending(path: Path, *lines: str, every_s: float = 0.05) -> Iterator[None]:
    """Append `lines` to `path` every `every_s` from a thread, as an engine writes its log."""
    done = threading.Event()

    def write() -> None:
        while not done.wait(every_s):
            with path.open("a") as log:
                log.writelines(f"{line}\n" for line in lines)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def requests_seen(url: str) -> int:
    with urllib.request.urlopen(f"{url}/sim/stats", timeout=5) as response:
        return int(json.loads(response.read())["requests_total"])


def test_an_attached_engines_log_gives_the_run_its_events_and_stats(start_sim, tmp_path: Path):
    sim = start_sim(ttft_ms=20, itl_ms=20)
    log = tmp_path / "sglang.log"
    log.write_text(f"{OLD_LINE}\n")
    out = tmp_path / "run"
    with appending(log, STATS_LINE, RETRACT_LINE):
        result = subprocess.run(
            [
                *SERVELAB,
                *("bench", "--url", sim.url, "--engine-log", str(log), "--no-metrics"),
                *("--concurrency", "2", "--num-requests", "10", "--output-len", "40"),
                *("--warmup", "0", "--out", str(out), "--runs-dir", str(tmp_path / "runs")),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    said = " ".join(result.stderr.split())  # Rich wraps its notices
    assert f"following {log} from line " in said
    assert f"engine log {log}: " in said and "read as sglang's (its log)" in said

    events = json.loads((out / "engine_events.json").read_text())
    assert events["engine"] == "sglang"
    (retract,) = events["events"]  # the old line before following began is not among them
    assert retract["kind"] == "kv_cache_full" and retract["signature"] == (
        "sglang.kv_cache_pool_full_retract"
    )
    assert retract["count"] >= 3 and retract["line_no"] >= 2
    assert retract["t_mono_ns"] is not None  # on the bench clock, for the timeline
    assert retract["text"] == RETRACT_LINE

    (level,) = json.loads((out / "summary.json").read_text())["levels"]
    engine = level["telemetry"]["engine"]
    assert engine["log_samples"] >= 3 and engine["samples"] == 0  # no /metrics scraped
    assert engine["sources"] == {
        "running": "log",
        "queued": "log",
        "kv_usage": "log",
        "gen_throughput": "log",
    }
    assert (engine["running_mean"], engine["running_max"]) == (7, 7)
    assert (engine["queued_mean"], engine["queued_max"]) == (3, 3)
    assert engine["kv_usage_max"] == pytest.approx(0.42)
    assert engine["gen_throughput_mean"] == pytest.approx(3.62)


def test_a_log_that_cannot_be_followed_stops_the_run_before_any_request(start_sim, tmp_path: Path):
    sim = start_sim(ttft_ms=5, itl_ms=5)
    runner = CliRunner()
    missing = tmp_path / "missing.log"
    packed = tmp_path / "engine.log.gz"
    packed.write_bytes(b"\x1f\x8b")
    for path, message in (
        (
            missing,
            f"error: --engine-log {missing}: no such file (the log the engine is writing now)",
        ),
        (
            packed,
            f"error: --engine-log {packed} is compressed: a .gz log cannot grow while the load "
            f"runs (read a finished log with `servelab engine scan {packed}`)",
        ),
    ):
        for command in ("bench", "run"):
            result = runner.invoke(
                app,
                [
                    *(command, "--url", sim.url, "--engine-log", str(path)),
                    *("--runs-dir", str(tmp_path / "runs"), "--num-requests", "2"),
                ],
            )
            assert (result.exit_code, result.stderr) == (2, message + "\n"), command
    assert requests_seen(sim.url) == 0
    assert not (tmp_path / "runs").exists()


def test_engine_log_goes_with_url_only(tmp_path: Path):
    log = tmp_path / "engine.log"
    log.touch()
    result = CliRunner().invoke(app, ["run", "--engine-log", str(log)])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --engine-log follows the log of an engine given by --url (the log of an "
        "engine servelab launches is read already)\n"
    )
    alone = CliRunner().invoke(
        app, ["bench", "--url", "http://127.0.0.1:9", "--engine-log-format", "vllm"]
    )
    assert alone.exit_code == 2
    assert alone.stderr == (
        "error: --engine-log-format names the engine of --engine-log: give both\n"
    )
