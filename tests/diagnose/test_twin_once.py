"""A run's twin is fitted once per process for one state of its files: a tune study's
diagnose and its forecasts read the same fit, and a run written again is fitted again."""

from __future__ import annotations

import os
from pathlib import Path

from servelab.diagnose import DiagnoseOptions
from servelab.diagnose.whatif_run import fitted_twin
from servelab.store import REQUESTS_FILE
from tests.diagnose.test_replay_ranking import _unpack

OPTIONS = DiagnoseOptions(engine="vllm")


def test_a_run_is_fitted_once_and_again_once_its_requests_change(tmp_path: Path) -> None:
    run = _unpack("vllm-cpu-cap-default", tmp_path)
    first, _ = fitted_twin(run, OPTIONS)
    assert fitted_twin(run, OPTIONS)[0] is first

    requests = run / REQUESTS_FILE
    lines = requests.read_text().splitlines(keepends=True)
    requests.write_text("".join(lines[: len(lines) // 2]))
    os.utime(requests, ns=(1, 1))
    fewer, _ = fitted_twin(run, OPTIONS)
    assert fewer is not first
    assert fewer.result.fit.requests < first.result.fit.requests
