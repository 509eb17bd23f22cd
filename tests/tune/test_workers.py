"""One study, two hosts' workers: `servelab tune join` on a shared PostgreSQL study.

Both workers run here, each with its own study folder (as on two machines). One is killed
mid-trial (SIGKILL: no chance to say goodbye); its trial stops beating, and the other
worker, at its next trial, marks it failed and runs its settings again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import SERVELAB

HEARTBEAT = "1s"


def _space(path: Path) -> Path:
    """Fixed timing: each trial is a few seconds of streaming at two levels."""
    path.write_text(
        yaml.safe_dump(
            {
                "study": "shared",
                "base": {
                    "engine": "sim",
                    "options": {"ttft_ms": 20, "itl_ms": 20},
                    "startup_timeout_s": 60,
                },
                "space": {"options.itl_ms": [10, 12, 14, 16, 18, 22, 24]},
                "workload": {"input_len": 16, "output_len": 40},
                "load": {"concurrency": [1, 4], "num_requests": 8, "warmup": 0},
                "objective": "output_throughput@4",
                "early_stop": 0,
                "sampler": "random",
                "trials": 6,
            }
        )
    )
    return path


def _worker(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            [*SERVELAB, "tune", *args, "--heartbeat", HEARTBEAT, "--no-report"],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _running_trial(folder: Path) -> Path | None:
    """A trial folder of this worker whose first level is being measured."""
    for trial in sorted((folder / "trials").glob("*")) if (folder / "trials").is_dir() else []:
        summary = trial / "summary.json"
        requests = trial / "requests.jsonl"
        started = summary.is_file() and requests.is_file() and requests.stat().st_size > 0
        if started and json.loads(summary.read_text())["status"] == "running":
            return trial
    return None


def _kill_engine(trial: Path) -> None:
    """The killed worker's engine is an orphan now: stop it as its owner would have."""
    engine: dict[str, Any] = json.loads((trial / "summary.json").read_text()).get("engine") or {}
    pid = engine.get("pid")
    if isinstance(pid, int):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_two_workers_share_a_study_and_a_killed_workers_trial_is_retried(
    tmp_path: Path, fresh_database: str
):
    space = _space(tmp_path / "shared.yaml")
    storage = ["--storage", fresh_database, "--runs-dir", str(tmp_path / "runs")]
    first = subprocess.run(
        [
            *SERVELAB,
            "tune",
            "run",
            str(space),
            *storage,
            "--trials",
            "1",
            "--no-report",
            "--out",
            str(tmp_path / "host-a"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 0, first.stderr[-3000:]

    doomed_dir, survivor_dir = tmp_path / "host-b", tmp_path / "host-c"
    doomed = _worker(["join", "shared", *storage, "--out", str(doomed_dir)], tmp_path / "b.log")
    survivor = _worker(["join", "shared", *storage, "--out", str(survivor_dir)], tmp_path / "c.log")
    deadline = time.monotonic() + 120
    while (killed := _running_trial(doomed_dir)) is None:
        assert doomed.poll() is None, (tmp_path / "b.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the worker never started a trial"
        time.sleep(0.2)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(timeout=30)
    _kill_engine(killed)
    assert survivor.wait(timeout=300) == 0, (tmp_path / "c.log").read_text()[-3000:]

    shown = subprocess.run(
        [*SERVELAB, "tune", "show", "shared", "--storage", fresh_database, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    trials = {t["number"]: t for t in json.loads(shown.stdout)["trials"]}
    dead = next(t for t in trials.values() if t["run_dir"] == f"trials/{killed.name}")
    assert dead["state"] == "failed" and dead["role"] != "retry"
    retry = next(t for t in trials.values() if t["retry_of"] == dead["number"])
    assert dead["reason"] == (
        f"its worker stopped beating (died or was killed); retried as trial {retry['number']}"
    )
    assert retry["state"] == "complete"
    assert retry["params"] == dead["params"]
    assert (survivor_dir / retry["run_dir"] / "summary.json").is_file()
    finished = [
        t
        for t in trials.values()
        if t["state"] in ("complete", "pruned", "failed") and t is not dead
    ]
    assert len(finished) >= 6
    assert {t["role"] for t in trials.values()} >= {"default", "retry"}
    local = json.loads((survivor_dir / "study.json").read_text())
    assert local["name"] == "shared" and local["storage"].startswith("postgresql+psycopg://")
