"""The all-reduce harness, for real: two gloo ranks on the CPU, as separate processes."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from servelab.probe.comm.allreduce import (
    KEPT_ENV,
    NCCL_DEBUG_ENV,
    _rank_env,
    allreduce_sizes,
    bus_bandwidth_factor,
    run_allreduce,
)
from tests.ci import require_module

require_module("torch")

SIZES = [8, 1024, 64 << 10]


def _processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains `text` (the run directory names the ranks)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def test_two_gloo_ranks_give_sane_points(tmp_path):
    result = run_allreduce(
        world_size=2,
        backend="gloo",
        device_type="cpu",
        sizes_bytes=SIZES,
        warmup_iterations=2,
        iterations=5,
        timeout_s=60,
        log_dir=tmp_path,
    )
    assert result.error is None, result.log_tail
    assert result.sum_verified is True
    assert result.nccl is None
    assert [p.size_bytes for p in result.points] == SIZES
    for point in result.points:
        assert point.count == point.size_bytes // 4
        assert point.dtype == "float32"
        assert point.time_us > 0
        assert point.algbw_gb_s == pytest.approx(point.size_bytes / point.time_us / 1e3)
        # nccl-tests: busbw = algbw * 2(n-1)/n, which is 1 for two ranks.
        assert point.busbw_gb_s == pytest.approx(point.algbw_gb_s * 2 * (2 - 1) / 2)
    assert _processes_mentioning(str(tmp_path)) == []
    # Each rank logged its points as it went.
    assert (tmp_path / "rank0.jsonl").read_text().count('"point"') == len(SIZES)


def test_timeout_kills_every_rank(tmp_path):
    started = time.monotonic()
    # Ranks are still importing torch at 0.5 s: the harness must kill them, not wait.
    result = run_allreduce(
        world_size=2,
        backend="gloo",
        device_type="cpu",
        sizes_bytes=SIZES,
        timeout_s=0.5,
        log_dir=tmp_path,
    )
    assert time.monotonic() - started < 10
    assert result.error == "timed out after 0.5 s"
    assert result.points == []
    assert _processes_mentioning(str(tmp_path)) == []


def test_a_failing_rank_is_reported_with_its_log(tmp_path):
    result = run_allreduce(
        world_size=2,
        backend="no-such-backend",
        device_type="cpu",
        sizes_bytes=SIZES,
        timeout_s=60,
        log_dir=tmp_path,
    )
    assert result.error is not None
    assert result.error.startswith("rank ")
    assert "exited with code" in result.error
    assert any("no-such-backend" in line for line in result.log_tail)
    assert result.points == []
    assert _processes_mentioning(str(tmp_path)) == []


def test_temporary_run_directory_is_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    result = run_allreduce(
        world_size=1, backend="gloo", device_type="cpu", sizes_bytes=[8], timeout_s=0.2
    )
    assert result.error == "timed out after 0.2 s"
    assert list(tmp_path.iterdir()) == []


def test_nccl_ranks_get_debug_logging_and_the_kept_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # a user setting must not turn multicast on
    env = _rank_env(tmp_path, rank=1, world_size=2, port=29500, backend="nccl")
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,P2P,SHM,NET"
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl-rank1.log")
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("1", "2", "127.0.0.1")
    gloo = _rank_env(tmp_path, rank=0, world_size=2, port=29500, backend="gloo")
    assert all(gloo[key] == value for key, value in KEPT_ENV.items())
    assert set(NCCL_DEBUG_ENV) == {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"}


def test_sizes_follow_nccl_tests():
    full = allreduce_sizes()
    assert full[0] == 8
    assert full[-1] == 256 << 20
    assert len(full) == 26  # -b 8 -e 256M -f 2
    quick = allreduce_sizes(factor=4)
    assert quick[:3] == [8, 32, 128]
    assert all(b == 4 * a for a, b in itertools.pairwise(quick))
    with pytest.raises(ValueError):
        allreduce_sizes(factor=1)


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_bandwidth_factor(n, factor):
    assert bus_bandwidth_factor(n) == pytest.approx(factor)
