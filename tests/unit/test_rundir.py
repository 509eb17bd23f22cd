"""store.RunDir: the run directory's files named, written and read in one place."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from servelab.core.errors import ConfigError
from servelab.store import REQUESTS_FILE, SUMMARY_FILE, RunDir


class _Doc(BaseModel):
    level: int
    name: str


def test_a_written_document_loads_back_as_its_model(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.write_summary(_Doc(level=3, name="x"))
    assert (tmp_path / SUMMARY_FILE).exists()
    assert run.load_summary(_Doc) == _Doc(level=3, name="x")


def test_an_absent_document_is_none_and_an_invalid_one_a_config_error(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.load_probe(_Doc) is None
    run.write_text(SUMMARY_FILE, '{"level": "three"}')
    with pytest.raises(ConfigError, match="level"):
        run.load_summary(_Doc)


def test_jsonl_rows_come_back_and_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.append_requests([{"i": 0}, {"i": 1}])
    run.close()
    with (tmp_path / REQUESTS_FILE).open("ab") as handle:
        handle.write(b'{"i": 2')
    assert [row["i"] for row in run.iter_jsonl(REQUESTS_FILE)] == [0, 1]
    assert list(run.iter_jsonl("absent.jsonl")) == []
