"""Shared fixtures: real servers on 127.0.0.1, started through servelab's own launcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from servelab.engines.base import EngineSpec
from servelab.engines.launcher import RunningEngine, launch_engine

SERVELAB = [sys.executable, "-m", "servelab"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-hog",
        action="store_true",
        help="run one un-niced CPU-bound process beside the tests for the whole session: "
        "the check that timing tests (-m timing) do not pass only on an idle machine",
    )


@pytest.fixture(scope="session", autouse=True)
def _cpu_hog(request: pytest.FixtureRequest) -> Iterator[None]:
    """With --cpu-hog, a busy loop at the tests' own priority, on any core, for the session.

    It starts a session of its own, as another program on the machine would (another
    terminal, a service): with the kernel's autogroup scheduling a session shares the CPU
    as one group, so a loop in pytest's own session would take its share from the load
    generator's workers alone, a starvation no user's machine imposes."""
    if not request.config.getoption("--cpu-hog"):
        yield
        return
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def pytest_configure(config: pytest.Config) -> None:
    """SIGINT handled here, so every child starts with it at its default, as at a terminal.

    A shell starts a background job (`make test &`, a CI runner's detached step) with SIGINT
    ignored and children inherit that, so the Ctrl-C tests' servelab would ignore it; a
    handler (unlike an ignore) is reset to the default in every child that is exec'd."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


SHARED_SETUPS = {"demo_run": "demo", "ray_cluster": "ray"}
"""Session-long set-ups too costly to make twice: under pytest-xdist every test that uses
one runs on the same worker (`--dist loadgroup`), so each is made once."""


LONG_FIRST = ("tests/tune/", "tests/integration/", "tests/report/", "tests/soak/")
"""Folders of studies and real launches (a test of one takes up to two minutes), sent to
the workers first: in name order they came last, and one worker ran the longest study
alone while the other had finished."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist, a test runs on the worker of its shared set-up, else of its file
    (a module's fixtures, such as two embedded runs to compare, are then made once); the
    long folders come first."""
    for item in items:
        shared = [SHARED_SETUPS[f] for f in getattr(item, "fixturenames", ()) if f in SHARED_SETUPS]
        group = shared[0] if shared else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_dispatch_order)


def _dispatch_order(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return next(
        (i for i, folder in enumerate(LONG_FIRST) if path.startswith(folder)), len(LONG_FIRST)
    )


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


@dataclass(frozen=True)
class DemoRun:
    """`servelab run` with no options (the demo), as a subprocess: its folder and output."""

    out: Path
    result: subprocess.CompletedProcess[str]
    elapsed_s: float


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One real demo run (the embedded engine, the adaptive sweep, diagnose, the report),
    shared by every test that reads what it wrote."""
    out = tmp_path_factory.mktemp("demo") / "run"
    started = time.monotonic()
    result = subprocess.run(
        [*SERVELAB, "run", "--out", str(out), "--target", "single=100", "--target", "ttft_p99=2s"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return DemoRun(out=out, result=result, elapsed_s=time.monotonic() - started)
