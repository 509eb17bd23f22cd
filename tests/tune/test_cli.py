"""`servelab tune`'s bad inputs: one line on stderr, exit 2, nothing created."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import SERVELAB
from tests.tune.test_study import STORY


@pytest.fixture
def space(tmp_path: Path) -> Path:
    path = tmp_path / "story.yaml"
    path.write_text(yaml.safe_dump(STORY))
    return path


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["run", "{tmp}/nope.yaml"], "error: no space file at {tmp}/nope.yaml"),
        (
            ["run", "{space}", "--storage", "ftp://host/db"],
            "error: --storage 'ftp://host/db' is not a database URL "
            "(sqlite:///path/study.db or postgresql://user@host:5432/db)",
        ),
        (["run", "{space}", "--trials", "0"], "error: --trials must be at least 1"),
        (
            ["run", "{space}", "--study", "a b"],
            "error: study name 'a b': use letters, digits, '.', '_' and '-'",
        ),
        (["run", "{space}", "--heartbeat", "2h"], "error: --heartbeat must be between 1s and 1h"),
        (
            ["show", "{tmp}/ghost"],
            "error: no study at {tmp}/ghost (a study folder, or --storage URL)",
        ),
        (
            ["join", "ghost", "--storage", "sqlite:///{tmp}/studies.db"],
            "error: no study 'ghost' in that storage",
        ),
    ],
)
def test_a_bad_input_is_one_line_and_exit_2(tmp_path: Path, space: Path, args, line):
    out = tmp_path / "study"
    given = [arg.format(tmp=tmp_path, space=space) for arg in args]
    result = subprocess.run(
        [*SERVELAB, "tune", *given, *(["--out", str(out)] if given[0] != "show" else [])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [line.format(tmp=tmp_path)]
    assert not (out / "trials").exists()
