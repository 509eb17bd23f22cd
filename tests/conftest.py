"""Shared fixtures: real servers on 127.0.0.1, started through servelab's own launcher."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.base import EngineSpec
from servelab.engines.launcher import RunningEngine, launch_engine

SERVELAB = [sys.executable, "-m", "servelab"]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Generated models go to one cache per test session, never the user's home."""
    cache = os.environ.get("SERVELAB_TEST_CACHE") or str(tmp_path_factory.getbasetemp() / "cache")
    monkeypatch.setenv("SERVELAB_CACHE", cache)


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[..., RunningEngine]]:
    """Start `servelab sim` with the given options; every one is stopped after the test."""
    started: list[RunningEngine] = []

    def start(**options: Any) -> RunningEngine:
        n = len(started)
        engine = launch_engine(
            EngineSpec(engine="sim", options=options, startup_timeout_s=60),
            log_path=tmp_path / f"sim-{n}.log",
        )
        started.append(engine)
        return engine

    yield start
    for engine in started:
        engine.stop()
