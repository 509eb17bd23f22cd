"""`servelab --version`: servelab's version and the engines', read from their metadata."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

from servelab.cli.version import ENGINE_DISTRIBUTIONS

_HEAVY = ("torch", "transformers", "vllm", "sglang")

# `python -m servelab --version`, then which of the heavy modules it imported.
_IMPORTED_BY_VERSION = f"""
import atexit, runpy, sys
atexit.register(lambda: print("imported:", [m for m in {_HEAVY!r} if m in sys.modules]))
sys.argv = ["servelab", "--version"]
runpy.run_module("servelab", run_name="__main__")
"""


def _version_output(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_version_names_servelab_then_each_engine_on_a_line_of_its_own():
    result = _version_output("-m", "servelab", "--version")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"servelab {metadata.version('servelab')}"
    engines = dict(line.split(" ", 1) for line in lines[1:])
    assert list(engines) == list(ENGINE_DISTRIBUTIONS)
    for name, said in engines.items():
        try:
            assert said == metadata.version(name)
        except metadata.PackageNotFoundError:
            assert said == "not installed"


def test_version_imports_no_engine():
    result = _version_output("-c", _IMPORTED_BY_VERSION)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "imported: []"
