"""diagnose's gap layers for an engine on the CPU: from probe.json's CPU rates, the
engine's thread count in its launched spec and the embedded preset; and, without them,
which evidence is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from servelab.diagnose.cpu_layers import OP_FLOOR_NAME, ROOFLINE_NAME
from servelab.diagnose.deployment import CPU_DETAIL
from tests.diagnose.builders import diagnose, level, summary, write_run

MODEL = "/cache/embedded/tiny-0123456789abcdef"
BANDWIDTH_GB_S = 15.0
FP32_TFLOP_S = 0.08
DISPATCH_US = 3.0
ROOFLINE_MS = (5_257_216 + 655_360) / (BANDWIDTH_GB_S * 1e9) * 1e3
"""tests/model/test_cpu.py's single stream by hand: weights and KV of tiny at context 320."""
OPS = 222


def _engine(threads: str | None = "1", device: str = "cpu") -> dict[str, object]:
    env = {"HF_HUB_OFFLINE": "1"} | ({"OMP_NUM_THREADS": threads} if threads else {})
    spec = {"engine": "embedded", "model": MODEL, "device": device, "env": env}
    return {"engine": "embedded", "model": MODEL, "spec": yaml.safe_dump(spec)}


def _probe(folder: Path, threads: tuple[int, ...] | None) -> Path:
    document: dict[str, object] = {"schema": "servelab.probe/1", "verdicts": []}
    if threads is not None:
        rows = [
            {
                "threads": t,
                "memory_copy": {"bandwidth_gb_s": BANDWIDTH_GB_S},
                "matmul": [{"dtype": "fp32", "tflop_s": FP32_TFLOP_S}],
                "launch": {"eager_us_per_kernel": DISPATCH_US, "chain_verified": True},
            }
            for t in threads
        ]
        document["comm"] = {"cpu": {"cores": 2, "torch_threads": 2, "by_threads": rows}}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "measured-probe.json"
    path.write_text(json.dumps(document))
    return path


def _run(
    tmp_path: Path, *, threads: str | None = "1", probe: tuple[int, ...] | None = (1, 2)
) -> Path:
    levels = [
        level(0, 1, total_tps=40.0, tpot_ms=20.0, ttft_ms=30.0),
        level(1, 4, total_tps=120.0, tpot_ms=28.0, ttft_ms=60.0),
    ]
    run = summary(levels, engine=_engine(threads), target_engine="embedded")
    return write_run(tmp_path / "run", run, probe=_probe(tmp_path / "p", probe))


def test_the_cpu_run_gets_its_roofline_and_op_floor(tmp_path: Path):
    diagnosis = diagnose(_run(tmp_path))
    single = diagnosis.layers[0]
    assert single.point == "single stream"
    roofline, floor, engine = single.layers
    assert roofline.name == ROOFLINE_NAME and roofline.available
    assert roofline.ms_per_token == pytest.approx(ROOFLINE_MS)
    assert "memory-bound" in (roofline.note or "") and "1 threads" in (roofline.note or "")
    assert floor.name == OP_FLOOR_NAME and floor.available
    assert floor.ms_per_token == pytest.approx(ROOFLINE_MS + OPS * DISPATCH_US / 1e3)
    assert "222 unfused ops" in (floor.note or "")
    assert engine.ms_per_token == 20.0
    assert single.gap_ms_per_token == pytest.approx(20.0 - ROOFLINE_MS)
    shares = {s.what.split(" (")[0]: s for s in single.shares}
    assert shares["op dispatch"].ms_per_token == pytest.approx(OPS * DISPATCH_US / 1e3, abs=1e-3)
    assert sum(s.share for s in single.shares) == pytest.approx(1.0, abs=0.01)
    # The rules' model stays a GPU's: none here, and the sources say where the CPU's went.
    assert diagnosis.deployment is None
    assert diagnosis.sources["model"].detail == CPU_DETAIL


def test_without_cpu_rates_the_layers_say_what_is_missing(tmp_path: Path):
    diagnosis = diagnose(_run(tmp_path, probe=None))
    roofline, floor, engine = diagnosis.layers[0].layers
    assert not roofline.available and not floor.available and engine.available
    assert "holds no CPU rates" in (roofline.note or "")
    assert roofline.ms_per_token is None and floor.ms_per_token is None


def test_rates_at_another_thread_count_are_not_borrowed(tmp_path: Path):
    diagnosis = diagnose(_run(tmp_path, threads="4"))
    roofline = diagnosis.layers[0].layers[0]
    assert not roofline.available
    assert "at 1, 2 threads, not at the engine's 4" in (roofline.note or "")


def test_without_the_engines_thread_count_the_layers_say_so(tmp_path: Path):
    roofline = diagnose(_run(tmp_path, threads=None)).layers[0].layers[0]
    assert not roofline.available and "thread count" in (roofline.note or "")
