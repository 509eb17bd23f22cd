"""The launcher: inherited environment, stamped log lines, the on_line hook, readiness on
/health then /v1/models, start-up failures with the log's tail, and nothing left behind."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest

from servelab.core.errors import EngineLaunchError
from servelab.core.processes import group_alive
from servelab.engines import launcher
from servelab.engines.base import EngineSpec
from servelab.engines.enginelog import parse_log_line
from servelab.engines.launcher import RunningEngine, launch_engine
from servelab.engines.registry import register
from tests.engines.stub import STUB, StubEngine
from tests.sessions import session_left

STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z \d+\.\d{6} ")


def spec(**options: Any) -> EngineSpec:
    timeout = options.pop("timeout", 30.0)
    env = options.pop("spec_env", {})
    return EngineSpec(engine="stub-engine", options=options, env=env, startup_timeout_s=timeout)


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The session id of every engine launch_engine starts (its pid: it leads a new
    session), one that fails to start included, which no other handle reaches."""
    started: list[int] = []

    def recorded(*args: Any, **kwargs: Any) -> RunningEngine:
        engine = RunningEngine(*args, **kwargs)
        started.append(engine.pid)
        return engine

    monkeypatch.setattr(launcher, "RunningEngine", recorded)
    return started


def test_env_is_the_parents_with_the_specs_on_top(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SERVELAB_T_PARENT", "parent")
    monkeypatch.setenv("SERVELAB_T_BOTH", "parent")
    names = ["SERVELAB_T_PARENT", "SERVELAB_T_BOTH", "SERVELAB_T_CHILD"]
    engine = launch_engine(
        spec(env=names, spec_env={"SERVELAB_T_BOTH": "spec", "SERVELAB_T_CHILD": "spec"}),
        log_path=tmp_path / "engine.log",
    )
    engine.stop(grace_s=2)
    lines = [parse_log_line(raw)[2] for raw in (tmp_path / "engine.log").read_text().splitlines()]
    for expected in ("SERVELAB_T_PARENT=parent", "SERVELAB_T_BOTH=spec", "SERVELAB_T_CHILD=spec"):
        assert expected in lines


def test_every_line_is_stamped_and_handed_to_the_hook(tmp_path: Path):
    seen: list[str] = []
    engine = launch_engine(
        spec(lines=["loading weights", "Capturing batches 1/4\rCapturing batches 4/4"]),
        log_path=tmp_path / "engine.log",
        on_line=seen.append,
    )
    pgid = engine.pgid
    engine.stop(grace_s=2)
    text = (tmp_path / "engine.log").read_text().splitlines()
    assert all(STAMPED.match(raw) for raw in text)
    lines = [parse_log_line(raw)[2] for raw in text]
    assert lines[0].startswith("servelab: launching ") and STUB in lines[0]
    assert lines[-1] == "servelab: engine exited with code -15"
    assert seen[:3] == ["loading weights", "Capturing batches 1/4", "Capturing batches 4/4"]
    assert "request /health" in seen and "request /v1/models" in seen
    assert not any(line.startswith("servelab:") for line in seen)
    stamps = [parse_log_line(raw)[1] for raw in text]
    assert stamps == sorted(stamps)
    assert not group_alive(pgid)
    assert session_left(pgid) == []  # it leads its own session: all of it is gone


def test_a_failing_hook_is_dropped_not_the_log(tmp_path: Path):
    def hook(line: str) -> None:
        raise RuntimeError("boom")

    engine = launch_engine(spec(lines=["one", "two"]), log_path=tmp_path / "e.log", on_line=hook)
    engine.stop(grace_s=2)
    lines = [parse_log_line(raw)[2] for raw in (tmp_path / "e.log").read_text().splitlines()]
    assert "servelab: on_line hook failed and was dropped: RuntimeError: boom" in lines
    assert "two" in lines


def test_a_child_that_dies_while_starting_shows_the_tail(tmp_path: Path, sessions: list[int]):
    with pytest.raises(EngineLaunchError) as caught:
        launch_engine(spec(lines=["starting up"], exit=3), log_path=tmp_path / "engine.log")
    [sid] = sessions
    assert session_left(sid) == []
    assert str(caught.value) == "stub-engine exited with code 3 while starting"
    assert caught.value.log_tail[-2:] == ["starting up", "stub: fatal error while loading"]
    assert caught.value.log_path == str(tmp_path / "engine.log")


def test_a_child_that_never_becomes_ready_is_stopped(tmp_path: Path, sessions: list[int]):
    with pytest.raises(EngineLaunchError, match=r"not ready after 1 s$") as caught:
        launch_engine(
            spec(delay=-1, lines=["waiting forever"], timeout=1.0),
            log_path=tmp_path / "engine.log",
        )
    assert "waiting forever" in caught.value.log_tail
    last = parse_log_line((tmp_path / "engine.log").read_text().splitlines()[-1])[2]
    assert last == "servelab: engine exited with code -15"
    [sid] = sessions
    assert session_left(sid) == []


def test_health_alone_is_not_ready_when_the_models_list_is_missing(tmp_path: Path):
    with pytest.raises(EngineLaunchError, match=r"not ready after 1.5 s \(/v1/models\)"):
        launch_engine(spec(models=False, timeout=1.5), log_path=tmp_path / "engine.log")


def test_a_taken_port_is_refused_before_starting(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = spec().model_copy(update={"port": port})
        with pytest.raises(EngineLaunchError, match=f"port {port} on 127.0.0.1 is in use"):
            launch_engine(busy, log_path=tmp_path / "engine.log")
    assert not (tmp_path / "engine.log").exists()


def test_a_missing_program_is_a_launch_error(tmp_path: Path):
    class Missing(StubEngine):
        name = "stub-missing"

        def command(self, spec: EngineSpec, *, host: str, port: int) -> list[str]:
            return ["/nonexistent/engine-binary"]

    register(Missing())
    with pytest.raises(EngineLaunchError, match="cannot start stub-missing: /nonexistent"):
        launch_engine(EngineSpec(engine="stub-missing"), log_path=tmp_path / "engine.log")


def test_gpu_release_is_not_applicable_without_nvml(tmp_path: Path):
    engine = launch_engine(spec(), log_path=tmp_path / "engine.log")
    assert engine.gpu_memory_released is None
    engine.stop(grace_s=2)
    from servelab.probe.nvml import open_nvml

    nvml = open_nvml()
    if nvml is None:
        assert engine.gpu_memory_released is None
        assert engine.gpu_memory_detail.startswith("n/a: ")
    else:
        nvml.close()
        assert engine.gpu_memory_released is True
