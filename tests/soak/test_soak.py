"""20 launch/stop cycles of the simulator and 2 of the embedded engine leave nothing behind.

The embedded engine's cycles are each a model load (about 20 s on two cores); two show a
stop that leaves nothing and a second launch that finds its port free. The long soak
(benchmarks/soak.py's defaults, 100 and 20) is recorded in benchmarks/README.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_launch_stop_cycles_leave_no_process_and_no_port():
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "soak.py"),
            "--sim",
            "20",
            "--embedded",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=880,
        cwd=ROOT,
    )
    assert result.returncode in (0, 1), result.stderr[-3000:]
    report = json.loads(result.stdout)
    by_engine = {r["engine"]: r for r in report["results"]}
    assert by_engine["sim"]["cycles"] == 20
    assert by_engine["embedded"]["cycles"] == 2
    for r in report["results"]:
        assert r["answered"] == r["cycles"], r
        assert r["groups_left"] == 0, r
        assert r["ports_busy"] == 0, r
    assert report["groups_alive_at_end"] == 0
    assert report["children_alive_at_end"] == []
    assert result.returncode == 0
