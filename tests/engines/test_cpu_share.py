"""The load generator's share of a CPU machine: which cores a launched CPU engine computes
on, and a busy-waiting scheduler's lower priority, set on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import servelab.engines.vllm as vllm_adapter
from servelab.bench.results import BenchSummary
from servelab.engines.base import EngineSpec
from servelab.engines.cpu_share import CpuShare, engine_cpu_share, lower_priority
from servelab.engines.vllm import OMP_BIND_ENV, VLLMAdapter
from servelab.store import RunDir
from tests.diagnose.builders import level, summary, write_run

THREADED_CHILD = (
    "import subprocess, threading, time;"
    "sibling = subprocess.Popen(['sleep', '60']);"
    "[threading.Thread(target=time.sleep, args=(60,), daemon=True).start() for _ in range(3)];"
    "print(sibling.pid, flush=True); time.sleep(60)"
)
"""A Python of four threads that starts a `sleep` in its session and prints its pid."""


def test_the_engine_gets_the_first_half_of_the_usable_cores_and_the_client_the_rest():
    assert engine_cpu_share((0, 1)) == CpuShare(engine=(0,), client=(1,))
    assert engine_cpu_share((2, 5, 7, 9, 11)) == CpuShare(engine=(2, 5), client=(7, 9, 11))
    alone = engine_cpu_share((3,))
    assert alone == CpuShare(engine=(3,), client=()) and alone.starved
    assert not engine_cpu_share((0, 1)).starved


def test_the_default_share_splits_this_process_affinity():
    usable = sorted(os.sched_getaffinity(0))
    share = engine_cpu_share()
    assert sorted(share.engine + share.client) == usable
    assert len(share.engine) == max(1, len(usable) // 2)


def _nice_of_every_thread(pid: int) -> set[int]:
    """Field 19 of /proc/PID/task/TID/stat, the nice value, of each of the process's threads."""
    values = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        values.add(int(fields[16]))
    return values


def test_only_the_named_processes_of_the_session_are_lowered_every_thread_of_them():
    """A session of two Pythons with four threads each: the one whose command line starts
    with the name goes to nice 10 in every thread, the other stays; one outside the
    session with the same name is not touched."""
    leader, outsider = (
        subprocess.Popen(
            [sys.executable, "-c", THREADED_CHILD],
            stdout=subprocess.PIPE,
            start_new_session=new_session,
            text=True,
        )
        for new_session in (True, False)
    )
    try:
        assert leader.stdout is not None and outsider.stdout is not None
        sibling = int(leader.stdout.readline())
        outsiders = {outsider.pid, int(outsider.stdout.readline())}
        name = Path(sys.executable).as_posix().encode()
        own = os.getpriority(os.PRIO_PROCESS, 0)  # the children's too: under `nice`, not 0
        lowered = min(own + 5, 19)
        assert lower_priority(leader.pid, (name,), lowered) == [leader.pid]
        assert len(list(Path(f"/proc/{leader.pid}/task").iterdir())) == 4
        assert _nice_of_every_thread(leader.pid) == {lowered} != {own}
        assert _nice_of_every_thread(sibling) == {own}
        assert all(_nice_of_every_thread(pid) == {own} for pid in outsiders)
    finally:
        for child in (leader, outsider):
            child.kill()
            child.wait()


def test_a_session_with_no_such_process_changes_nothing():
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        own = os.getpriority(os.PRIO_PROCESS, 0)
        assert lower_priority(child.pid, (b"VLLM::EngineCore",), min(own + 5, 19)) == []
        assert _nice_of_every_thread(child.pid) == {own}
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def cpu_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's CPU build on a machine of eight usable cores, none bound by the caller."""
    monkeypatch.setattr(vllm_adapter, "is_cpu_build", lambda _spec: True)
    monkeypatch.setattr(vllm_adapter, "engine_cpu_share", lambda: engine_cpu_share(tuple(range(8))))
    monkeypatch.delenv(OMP_BIND_ENV, raising=False)


def _bind(spec: EngineSpec) -> str | None:
    return VLLMAdapter().preview(spec).env.get(OMP_BIND_ENV)


@pytest.mark.usefixtures("cpu_build")
def test_a_cpu_vllm_binds_each_rank_to_its_part_of_the_engines_half(
    monkeypatch: pytest.MonkeyPatch,
):
    spec = EngineSpec(engine="vllm", model="m")
    assert _bind(spec) == "0,1,2,3"
    assert _bind(spec.model_copy(update={"tp": 2})) == "0,1|2,3"
    assert _bind(spec.model_copy(update={"tp": 2, "pp": 2})) == "0|1|2|3"
    # more ranks than the engine's cores: vLLM's own binding, not a share it cannot split
    assert _bind(spec.model_copy(update={"tp": 8})) is None
    # the spec's own binding, or the environment's, is kept
    own = spec.model_copy(update={"env": {OMP_BIND_ENV: "5-7"}})
    assert _bind(own) == "5-7"
    monkeypatch.setenv(OMP_BIND_ENV, "nobind")
    assert _bind(spec) is None


def test_a_gpu_vllm_is_not_bound(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(vllm_adapter, "is_cpu_build", lambda _spec: False)
    monkeypatch.delenv(OMP_BIND_ENV, raising=False)
    assert _bind(EngineSpec(engine="vllm", model="m")) is None
    assert VLLMAdapter().settle(EngineSpec(engine="vllm", model="m"), os.getpid()) == {}


@pytest.mark.usefixtures("cpu_build")
def test_settle_records_the_binding_and_whose_it_is():
    adapter = VLLMAdapter()
    ours = adapter.preview(EngineSpec(engine="vllm", model="m"))
    session = os.getsid(0)  # no VLLM::EngineCore in it: nothing is lowered
    record = adapter.settle(ours, session)
    assert record == {
        "scheduler_nice": 10,
        "scheduler_pids": [],
        OMP_BIND_ENV: "0,1,2,3",
        "engine_cpus": [0, 1, 2, 3],
        "client_cpus": [4, 5, 6, 7],
    }
    own = ours.model_copy(update={"env": {OMP_BIND_ENV: "6,7"}})
    assert adapter.settle(own, session)[OMP_BIND_ENV] == "6,7 (the spec's or the environment's own)"


def test_the_share_is_kept_in_the_runs_summary(tmp_path: Path):
    """What settle returned goes into summary.json's engine record as it is (nested, with
    lists of cores) and reads back the same."""
    share = {
        "scheduler_nice": 10,
        "scheduler_pids": [4242],
        OMP_BIND_ENV: "0",
        "engine_cpus": [0],
        "client_cpus": [1],
    }
    run = summary(
        [level(0, 1, total_tps=100.0, tpot_ms=5.0, ttft_ms=20.0)],
        engine={"engine": "vllm", "command": ["vllm", "serve"], "cpu_share": share},
    )
    folder = write_run(tmp_path / "run", run)
    loaded = RunDir(folder).load_summary(BenchSummary)
    assert loaded is not None and loaded.engine is not None
    assert loaded.engine["cpu_share"] == share
