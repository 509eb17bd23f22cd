"""The peers' real result files (tests/fixtures/peers, README.md there), read two ways: by
servelab's importer, and independently here with Python's json, to compare field by field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from servelab.bench.peers import ImportedRun, import_file
from servelab.cli import app
from tests.conftest import SERVELAB

FIXTURES = Path(__file__).parents[1] / "fixtures" / "peers"

SGLANG_NEW = FIXTURES / "sglang-0.5.23-bench_serving.jsonl"
SGLANG_OLD = FIXTURES / "sglang-0.2.11-bench_serving.jsonl"
VLLM_C1 = FIXTURES / "vllm-0.32.0-bench_serve-c1.json"
VLLM_C8 = FIXTURES / "vllm-0.32.0-bench_serve-c8.json"
AIPERF_C1 = FIXTURES / "aiperf-0.13.0-profile_export_aiperf-c1.json"
AIPERF_C8 = FIXTURES / "aiperf-0.13.0-profile_export_aiperf-c8.json"
AIPERF_SWEEP = FIXTURES / "aiperf-0.13.0-profile_export_aiperf_sweep.json"
GUIDELLM = {
    "0.8.1": FIXTURES / "guidellm-0.8.1-benchmarks.json",
    "0.6.1": FIXTURES / "guidellm-0.6.1-benchmarks.json",
    "0.3.1": FIXTURES / "guidellm-0.3.1-benchmarks.json",
}
ALL = sorted(p for p in FIXTURES.iterdir() if p.suffix in (".json", ".jsonl"))

_REGISTERED = any(c.name == "import" for c in app.registered_commands)
IMPORT = (
    [*SERVELAB, "import"]
    if _REGISTERED
    else [
        # Until cli/__init__.py registers the command: the same Typer command, alone.
        sys.executable,
        "-c",
        "import typer; from servelab.cli.import_cmd import import_run; "
        "app = typer.Typer(add_completion=False, pretty_exceptions_enable=False); "
        "app.command()(import_run); app()",
    ]
)
"""`servelab import` as a subprocess."""


def read_json(path: Path) -> Any:
    """The file as Python's json reads it (SGLang's Infinity included)."""
    return json.loads(path.read_text())


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def imported(path: Path) -> ImportedRun:
    return import_file(path)


def run_servelab(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVELAB, *args], capture_output=True, text=True, timeout=timeout)


def run_import(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*IMPORT, *args], capture_output=True, text=True, timeout=120, cwd=cwd)
