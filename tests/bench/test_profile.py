"""A profiled level against a stand-in profiler that behaves as vLLM's does: its stop
request never answers while the trace is written, slowly. The level must not wait on it,
must keep its measurements, and must find the finished file by polling."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from servelab.bench.profile import ProfilePlan, ProfileWindow
from servelab.bench.session import BenchConfig, run_bench
from servelab.bench.workload import WorkloadSpec
from servelab.engines.profiler import VLLM_PROFILER

TRACE = Path(__file__).resolve().parents[1] / "trace" / "data"


class _Profiler:
    """Writes the trace in pieces after /stop_profile, which answers only after a minute."""

    def __init__(self, folder: Path, source: Path) -> None:
        self.folder, self.source = folder, source
        self.calls: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                owner.calls.append(self.path)
                if self.path == "/stop_profile":
                    owner.write_slowly()
                    time.sleep(60)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def write_slowly(self) -> None:
        data = self.source.read_bytes()
        target = self.folder / "dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz"
        with target.open("wb") as out:
            for start in range(0, len(data), max(1, len(data) // 4)):
                out.write(data[start : start + max(1, len(data) // 4)])
                out.flush()
                time.sleep(0.5)


@pytest.fixture
def profiler(tmp_path: Path) -> Iterator[_Profiler]:
    source = next(iter(sorted(TRACE.glob("*.json.gz"))), None)
    assert source is not None, "tests/trace/data holds real traces"
    stand_in = _Profiler(tmp_path / "profile", source)
    yield stand_in
    stand_in.server.shutdown()


def test_a_profiled_level_keeps_its_results_and_never_waits_on_stop(start_sim, tmp_path, profiler):
    sim = start_sim(ttft_ms=5, itl_ms=5)
    plan = ProfilePlan(
        level=2.0,
        folder=tmp_path / "profile",
        window_s=0.5,
        support=VLLM_PROFILER,
        url=profiler.url,
        files_timeout_s=30,
    )
    started = time.monotonic()
    outcome = run_bench(
        BenchConfig(
            url=sim.url,
            levels=[1.0, 2.0],
            num_requests=12,
            warmup=0,
            workload=WorkloadSpec(input_len=16, output_len=32),
            out=tmp_path / "run",
            torch_profile=plan,
        )
    )
    elapsed = time.monotonic() - started
    assert elapsed < 40, "the bench waited on /stop_profile"
    assert profiler.calls == ["/start_profile", "/stop_profile"]
    levels = outcome.summary.levels
    assert [lv.completed for lv in levels] == [12, 12]
    assert levels[1].notes[-1] == "torch profile: complete (1 trace files)"
    assert not any("torch profile" in note for note in levels[0].notes)
    record = json.loads((tmp_path / "run" / "profile.json").read_text())
    assert record["status"] == "complete"
    assert [Path(f).name for f in record["files"]] == [
        "dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz"
    ]
    (summary,) = json.loads((tmp_path / "run" / "trace_summary.json").read_text())
    assert summary["events_read"] > 0 and not summary.get("error")


def test_a_profiler_that_refuses_to_start_is_a_note(tmp_path):
    window = ProfileWindow(
        ProfilePlan(
            level=1.0,
            folder=tmp_path / "p",
            window_s=0.1,
            support=VLLM_PROFILER,
            url="http://127.0.0.1:9",
        ),
        on_notice=lambda _m: None,
    )
    window.begin()
    outcome = window.finish(tmp_path)
    assert outcome.status == "failed"
    assert outcome.detail.startswith("the profiler did not start: ")


def test_no_files_in_time_is_said(tmp_path, profiler):
    """The stand-in writes into its own folder: nothing arrives where the plan looks."""
    window = ProfileWindow(
        ProfilePlan(
            level=1.0,
            folder=tmp_path / "elsewhere",
            window_s=0.1,
            support=VLLM_PROFILER,
            url=profiler.url,
            files_timeout_s=1.5,
        ),
        on_notice=lambda _m: None,
    )
    window.begin()
    outcome = window.finish(tmp_path)
    assert (outcome.status, outcome.detail) == ("no files", "no trace file in 1.5 s")


def test_the_engines_profilers_are_turned_on_as_their_sources_say(tmp_path):
    from servelab.engines.base import EngineSpec
    from servelab.engines.profiler import SGLANG_PROFILER

    vllm = VLLM_PROFILER.enable(EngineSpec(engine="vllm", model="/m"), tmp_path / "p")
    config = json.loads(vllm.extra_args[vllm.extra_args.index("--profiler-config") + 1])
    assert config == {
        "profiler": "torch",
        "torch_profiler_dir": str((tmp_path / "p").resolve()),
        "torch_profiler_with_stack": False,
        "torch_profiler_record_shapes": False,
        "torch_profiler_use_gzip": True,
        "max_iterations": 30,
        "ignore_frontend": True,
    }
    sglang = SGLANG_PROFILER.enable(EngineSpec(engine="sglang", model="/m"), tmp_path / "p")
    assert sglang.env["SGLANG_TORCH_PROFILER_DIR"] == str((tmp_path / "p").resolve())
    assert SGLANG_PROFILER.start_body(tmp_path / "p", 30) == {
        "output_dir": str((tmp_path / "p").resolve()),
        "num_steps": 30,
        "activities": ["CPU", "GPU"],
        "with_stack": False,
        "record_shapes": False,
    }


def test_asking_a_profile_of_an_engine_without_one_is_one_line(tmp_path):
    import subprocess

    import yaml

    from tests.conftest import SERVELAB

    spec = tmp_path / "sim.yaml"
    spec.write_text(yaml.safe_dump({"engine": "sim"}))
    cases = [
        (
            ["bench", "--url", "http://127.0.0.1:9", "--torch-profile", "1"],
            "error: --torch-profile needs --engine: the profiler is turned on at launch",
        ),
        (
            ["bench", "--engine", str(spec), "--concurrency", "1,2", "--torch-profile", "4"],
            "error: --torch-profile 4 is not a level of this sweep",
        ),
        (
            ["bench", "--engine", str(spec), "--torch-profile", "1"],
            "error: sim has no torch profiler servelab can start over HTTP (transformers serve "
            "has no profiler endpoint) (--torch-profile works with vllm and sglang)",
        ),
        (
            ["run", "--torch-profile", "4", "--out", str(tmp_path / "run")],
            "error: embedded has no torch profiler servelab can start over HTTP (transformers "
            "serve has no profiler endpoint) (--torch-profile works with vllm and sglang)",
        ),
    ]
    for args, line in cases:
        done = subprocess.run(
            [*SERVELAB, *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert (done.returncode, done.stderr.strip().splitlines()) == (2, [line]), args
    assert not (tmp_path / "run").exists()
