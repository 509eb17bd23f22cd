"""The GPU a run is priced on is the one its probe saw: a probe without `--comm` measures
nothing, but NVML still names the card. The kept pairs ran on an H100 while the embedded
preset names an H200; priced as an H200 the floors had 1.4x the bandwidth."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from tests.diagnose.builders import diagnose

PAIRS = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "results" / "h100-pairs"


def _unpacked(name: str, into: Path) -> Path:
    run = into / name
    run.mkdir()
    for path in (PAIRS / name).iterdir():
        if path.suffix == ".gz":
            (run / path.stem).write_bytes(gzip.decompress(path.read_bytes()))
        else:
            shutil.copy(path, run / path.name)
    return run


def test_a_run_probed_on_an_h100_is_priced_on_an_h100(tmp_path: Path):
    run = _unpacked("graphs2", tmp_path)
    names = {g["name"] for g in json.loads((run / "probe.json").read_text())["gpus"]["gpus"]}
    assert names == {"NVIDIA H100 80GB HBM3"}
    detail = diagnose(run).sources["model"].detail
    assert "1x h100" in detail, detail


def test_without_a_probe_the_preset_gpu_stays(tmp_path: Path):
    run = _unpacked("graphs2", tmp_path)
    (run / "probe.json").unlink()
    detail = diagnose(run).sources["model"].detail
    assert "1x h200" in detail, detail
