"""`servelab run` refuses a spec it cannot launch before it makes a run folder or probes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from servelab.core.errors import ConfigError
from servelab.engines.spec import load_spec
from servelab.pipeline import run as pipeline
from servelab.pipeline.run import RunConfig, run_pipeline
from tests.conftest import SERVELAB

MEMORY_SHARES = {
    "mem_fraction": "knobs: {mem_fraction: 0.05}\n",
    "extra_args": "extra_args: [--cb-max-memory-percent, '0.05']\n",
}
"""Two spellings of a share of memory for the embedded engine's CPU cache."""


def memory_share_spec(tmp_path: Path, spelling: str) -> Path:
    path = tmp_path / "share.yaml"
    path.write_text(f"engine: embedded\nmodel: tiny\ndevice: cpu\n{MEMORY_SHARES[spelling]}")
    return path


@pytest.mark.parametrize("spelling", sorted(MEMORY_SHARES))
def test_a_cpu_memory_share_is_refused_before_any_folder(tmp_path: Path, spelling: str):
    spec = memory_share_spec(tmp_path, spelling)
    runs = tmp_path / "runs"
    runs.mkdir()
    out = tmp_path / "out"

    result = subprocess.run(
        [*SERVELAB, "run", "--engine", str(spec), "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    named = subprocess.run(
        [*SERVELAB, "run", "--engine", str(spec), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    for done in (result, named):
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("error: the embedded engine on the CPU takes no memory share")
    assert not any(runs.iterdir())
    assert not out.exists()


def test_the_refusal_comes_before_the_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def probe(**_options: object) -> None:
        raise AssertionError("the machine was probed before the refusal")

    monkeypatch.setattr(pipeline, "run_probe", probe)
    spec = load_spec(memory_share_spec(tmp_path, "mem_fraction"))

    with pytest.raises(ConfigError, match="takes no memory share"):
        run_pipeline(RunConfig(engine=spec, runs_root=tmp_path / "runs"))

    assert not (tmp_path / "runs").exists()
