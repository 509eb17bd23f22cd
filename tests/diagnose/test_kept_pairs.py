"""The kept H100 pairs (h200-ref under transformers serve, CUDA graphs on, sdpa): what the
twin reads of the engine from its own run directory."""

from __future__ import annotations

from pathlib import Path

from servelab.diagnose import DiagnoseOptions
from servelab.diagnose.whatif_run import fitted_twin, what_if_run
from tests.diagnose.test_probed_gpu import _unpacked


def test_transformers_with_graphs_and_sdpa_reads_its_kv_padded_to_the_cache(tmp_path: Path):
    run = _unpacked("kv3", tmp_path)
    twin, _ = fitted_twin(run, DiagnoseOptions())
    assert twin.kv_padding is not None
    assert twin.kv_padding.pool == 30 * 256  # "num_sectors = 30" in its engine.log
    result = what_if_run(run, {"kv_capacity_tokens": 21_504}, DiagnoseOptions())
    assert any("padded to the cache" in why for why in result.extrapolated)
    assert not any("cache of another size" in note for note in result.notes)


def test_graphs_off_reads_only_what_is_held(tmp_path: Path):
    run = _unpacked("graphs2", tmp_path)
    twin, _ = fitted_twin(run, DiagnoseOptions())
    assert twin.kv_padding is None
