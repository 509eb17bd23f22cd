from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.core.errors import ConfigError
from servelab.engines.base import EngineAdapter, EngineSpec
from servelab.engines.embedded import PRESETS, SERVER_ENV, EmbeddedAdapter, model_dir


def test_adapter_satisfies_the_protocol() -> None:
    adapter = EmbeddedAdapter()
    assert isinstance(adapter, EngineAdapter)
    assert adapter.name == "embedded"
    assert adapter.launches is True
    assert adapter.health_path == "/health"
    assert adapter.pinning_fields == frozenset()
    assert adapter.has_tokenize is False


def test_prepare_builds_the_default_preset_and_serves_its_folder(tmp_path: Path) -> None:
    adapter = EmbeddedAdapter(cache_dir=tmp_path)
    prepared = adapter.prepare(EngineSpec(engine="embedded"))
    assert prepared.model == str(model_dir("tiny", cache_dir=tmp_path))
    assert prepared.served_name == prepared.model
    assert (Path(prepared.model) / "config.json").is_file()
    assert prepared.device == "cpu"
    assert prepared.env["HF_HUB_OFFLINE"] == "1"


def test_prepare_keeps_what_the_spec_sets(tmp_path: Path) -> None:
    spec = EngineSpec(
        engine="embedded",
        model="tiny",
        device="cuda:1",
        env={"HF_HUB_OFFLINE": "0", "OMP_NUM_THREADS": "2"},
        extra_args=["--log-level", "info"],
    )
    prepared = EmbeddedAdapter(cache_dir=tmp_path).prepare(spec)
    assert prepared.device == "cuda:1"
    assert prepared.env["HF_HUB_OFFLINE"] == "0"
    assert prepared.env["OMP_NUM_THREADS"] == "2"
    assert prepared.extra_args == ["--log-level", "info"]


def test_prepare_rejects_an_unknown_preset_before_building(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as excinfo:
        EmbeddedAdapter(cache_dir=tmp_path).prepare(EngineSpec(engine="embedded", model="big"))
    assert all(name in str(excinfo.value) for name in PRESETS)
    assert not tmp_path.joinpath("embedded").exists()


def test_command_runs_transformers_serve_with_this_python() -> None:
    spec = EngineSpec(
        engine="embedded",
        model="/models/tiny-abc",
        device="cpu",
        knobs={"kv_cache_tokens": 1000, "max_batch_tokens": 512},
        extra_args=["--log-level", "info"],
    )
    argv = EmbeddedAdapter().command(spec, host="127.0.0.1", port=8123)
    assert argv[:2] == [sys.executable, "-c"]
    assert "ContinuousBatchingLogger" in argv[2] and "logging.INFO" in argv[2]
    assert argv[3:] == [
        "serve",
        "/models/tiny-abc",
        "--continuous-batching",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--device",
        "cpu",
        "--cb-num-blocks",
        "4",
        "--cb-max-batch-tokens",
        "512",
        "--log-level",
        "info",
    ]


def test_command_needs_a_prepared_spec() -> None:
    with pytest.raises(ConfigError, match="prepare"):
        EmbeddedAdapter().command(EngineSpec(engine="embedded"), host="127.0.0.1", port=1)


def test_transformers_serve_accepts_the_flags_we_pass() -> None:
    spec = EngineSpec(engine="embedded", model="unused", device="cpu")
    argv = EmbeddedAdapter().command(spec, host="127.0.0.1", port=1)
    help_argv = [*argv[: argv.index("serve") + 1], "--help"]
    result = subprocess.run(
        help_argv,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **SERVER_ENV, "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    for flag in ("--continuous-batching", "--host", "--port", "--device"):
        assert flag in result.stdout


def test_the_cpu_launch_holds_no_memory_share_only_a_cache_in_tokens(tmp_path: Path) -> None:
    """No share of the machine's memory reaches the CPU engine: the cache is given in
    blocks, the batch tokens bounded so the masks fit (the demo's default launch)."""
    adapter = EmbeddedAdapter(cache_dir=tmp_path)
    prepared = adapter.preview(EngineSpec(engine="embedded"))
    argv = adapter.command(prepared, host="127.0.0.1", port=1)
    assert "--cb-max-memory-percent" not in argv
    blocks = int(argv[argv.index("--cb-num-blocks") + 1])
    batch = int(argv[argv.index("--cb-max-batch-tokens") + 1])
    assert blocks * 256 == prepared.knobs.kv_cache_tokens == 32_768
    assert batch * (blocks * 256 + batch) * 4 <= 512 * 2**20


def test_a_cpu_memory_share_is_refused_in_one_line(tmp_path: Path) -> None:
    adapter = EmbeddedAdapter(cache_dir=tmp_path)
    share = EngineSpec(engine="embedded", knobs={"mem_fraction": 0.05})
    with pytest.raises(ConfigError, match="kv_cache_tokens"):
        adapter.preview(share)
    native = EngineSpec(engine="embedded", extra_args=["--cb-max-memory-percent", "0.2"])
    with pytest.raises(ConfigError, match="no memory share"):
        adapter.preview(native)
    gpu = adapter.preview(share.model_copy(update={"device": "cuda"}))
    assert gpu.knobs.mem_fraction == 0.05 and gpu.knobs.kv_cache_tokens is None


def test_the_cache_is_sized_twice_is_an_error() -> None:
    spec = EngineSpec(
        engine="embedded",
        model="/m",
        device="cpu",
        knobs={"kv_cache_tokens": 4096},
        extra_args=["--cb-num-blocks", "9"],
    )
    with pytest.raises(ConfigError, match="sized twice"):
        EmbeddedAdapter().command(spec, host="127.0.0.1", port=1)
