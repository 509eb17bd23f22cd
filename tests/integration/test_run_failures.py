"""`servelab run` when its endpoint or its engine fails: one line, a code, nothing half-made."""

from __future__ import annotations

import subprocess

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
