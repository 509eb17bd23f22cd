"""tests.ci's rule at a module's top, where test files ask for torch or transformers: pytest
itself runs a module that asks for a module that is not there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = """
from tests.ci import require_module

require_module("no_such_module_here")


def test_never_collected():
    pass
"""


def run_module(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    """pytest on a one-test module that asks for a missing module at its top."""
    path = tmp_path / "test_asks_at_the_top.py"
    path.write_text(MODULE)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,  # `python -m` puts it on sys.path: `tests` imports
        env={**os.environ, "CI": ci},
    )


def test_outside_ci_the_whole_module_skips_with_the_reason(tmp_path: Path):
    done = run_module(tmp_path, "")
    assert done.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, done.stdout[-2000:]
    assert "1 skipped" in done.stdout
    assert "no_such_module_here is not installed" in done.stdout


def test_in_ci_the_module_fails_to_collect(tmp_path: Path):
    done = run_module(tmp_path, "1")
    assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout[-2000:]  # by the error
    assert "CI=1 and no_such_module_here is not installed" in done.stdout
