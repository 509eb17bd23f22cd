"""cpu_bound and cpu_contention on hand-built CPU runs: the engine's cores, the machine's."""

from __future__ import annotations

import json
from pathlib import Path

from servelab.telemetry.process_cpu import EngineCpu
from tests.diagnose.builders import diagnose, kinds, level, summary, write_run

_SWEEP = [(1, 500.0, 5.0, 20.0), (2, 900.0, 6.0, 30.0), (4, 1300.0, 8.0, 60.0),
          (8, 1320.0, 16.0, 140.0), (16, 1310.0, 32.0, 300.0)]  # fmt: skip


def _run(tmp_path: Path, engine_cores: list[float], host_busy: float, *, threads: int = 1,
         host_cores: int = 2, engine: str = "embedded", env: str = "") -> Path:  # fmt: skip
    levels = [
        level(
            i,
            c,
            total_tps=tps,
            tpot_ms=tpot,
            ttft_ms=ttft,
            engine_cpu=EngineCpu(
                cores=cores,
                host_busy_cores=host_busy,
                host_cores=host_cores,
                wall_s=10.0,
                processes=1,
            ),
        )
        for i, ((c, tps, tpot, ttft), cores) in enumerate(zip(_SWEEP, engine_cores, strict=True))
    ]
    env = env or f"OMP_NUM_THREADS: '{threads}'"
    spec = f"engine: {engine}\ndevice: cpu\nenv:\n  {env}\n"
    run = summary(levels, engine={"engine": engine, "spec": spec, "command": []},
                  target_engine=engine)  # fmt: skip
    return write_run(tmp_path / "run", run)


def test_busy_threads_and_a_free_core_ask_for_a_thread_more(tmp_path: Path):
    folder = _run(tmp_path, [0.6, 0.8, 0.97, 0.99, 0.99], host_busy=4.2, threads=4, host_cores=8)
    diagnosis = diagnose(folder)
    assert "cpu_bound" not in kinds(diagnosis)  # 0.97 of 4 threads is not busy
    folder = _run(tmp_path, [1.5, 2.8, 3.9, 3.95, 3.9], host_busy=4.2, threads=4, host_cores=8)
    found = diagnose(folder).findings
    finding = next(f for f in found if f.kind == "cpu_bound")
    action = finding.actions[0]
    assert action.flags == ["OMP_NUM_THREADS=7"] and action.available  # 3.8 cores were idle
    assert action.target == "engine"  # the spec's env
    assert finding.expected_gain is not None and finding.expected_gain.factor == 1.75
    assert any("TPOT" in e.what for e in finding.evidence)


def test_busy_threads_on_a_full_machine_give_no_thread_action(tmp_path: Path):
    folder = _run(tmp_path, [0.9, 1.0, 1.0, 1.0, 1.0], host_busy=1.95)
    finding = next(f for f in diagnose(folder).findings if f.kind == "cpu_bound")
    (action,) = finding.actions
    assert not action.flags and "no whole core was idle" in action.text
    assert not action.available, "nothing on this machine can be done: said, not offered"
    assert action.target == "outside"  # more cores, or the load sent from another machine
    assert finding.expected_gain is None


def test_an_engine_short_of_cores_on_a_busy_machine_is_contention(tmp_path: Path):
    folder = _run(tmp_path, [0.7, 0.6, 0.5, 0.45, 0.5], host_busy=1.98)
    diagnosis = diagnose(folder)
    assert "cpu_bound" not in kinds(diagnosis)
    finding = next(f for f in diagnosis.findings if f.kind == "cpu_contention")
    assert "0.5 core(s) for 1 thread(s)" in finding.title


def test_idle_threads_on_an_idle_machine_are_not_the_cpu(tmp_path: Path):
    folder = _run(tmp_path, [0.3, 0.4, 0.4, 0.4, 0.4], host_busy=0.6)
    assert not {"cpu_bound", "cpu_contention"} & set(kinds(diagnose(folder)))


def test_a_gpu_engine_is_not_judged_by_its_cpu(tmp_path: Path):
    folder = _run(tmp_path, [1.0, 1.0, 1.0, 1.0, 1.0], host_busy=1.0)
    spec_path = folder / "summary.json"
    spec_path.write_text(spec_path.read_text().replace("device: cpu", "device: cuda"))
    assert not {"cpu_bound", "cpu_contention"} & set(kinds(diagnose(folder)))


def test_a_bound_vllm_counts_one_thread_a_core_of_its_binding(tmp_path: Path):
    """vLLM's CPU build as servelab launches it: its compute threads are the cores its
    binding lists (VLLM_CPU_OMP_THREADS_BIND), not every core of the machine. Two bound
    cores kept busy on a machine of eight with four idle: bound; the same load read against
    all eight cores would be an engine with idle threads."""
    busy = [1.0, 1.6, 1.95, 1.97, 1.96]
    bound = _run(tmp_path, busy, host_busy=3.5, host_cores=8, engine="vllm",
                 env="VLLM_CPU_OMP_THREADS_BIND: '0|1'")  # fmt: skip
    finding = next(f for f in diagnose(bound).findings if f.kind == "cpu_bound")
    assert "VLLM_CPU_OMP_THREADS_BIND" in " ".join(e.source for e in finding.evidence)
    assert "VLLM_CPU_OMP_THREADS_BIND" in finding.actions[0].text
    unbound = _run(tmp_path, busy, host_busy=3.5, host_cores=8, engine="vllm",
                   env="VLLM_CPU_OMP_THREADS_BIND: auto")  # fmt: skip
    assert "cpu_bound" not in kinds(diagnose(unbound))


def test_a_launch_that_left_the_client_no_core_says_so(tmp_path: Path):
    """One usable core: the launcher gave it to the engine and recorded that none was left
    to the load generator; the engine then got half of it, and the finding shows why."""
    folder = _run(tmp_path, [0.5, 0.5, 0.5, 0.5, 0.5], host_busy=0.99, host_cores=1,
                  engine="vllm", env="VLLM_CPU_OMP_THREADS_BIND: '0'")  # fmt: skip
    path = folder / "summary.json"
    run = json.loads(path.read_text())
    run["engine"]["cpu_share"] = {"engine_cpus": [0], "client_cpus": [], "starved": "one core"}
    path.write_text(json.dumps(run))
    finding = next(f for f in diagnose(folder).findings if f.kind == "cpu_contention")
    assert any("cpu_share: one core" in e.source for e in finding.evidence)
