"""The settings an engine resolved, read back from its command and its own log.

The transformers logs are real (tests/engines/data/logs, see test_signatures.py): what
transformers serve 5.24.0 printed when servelab launched it as the embedded engine, and
when its cache sizing failed.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from servelab.diagnose.engineconf import engine_config
from servelab.engines.enginelog import LINE_PREFIX, parse_log_line
from servelab.engines.signatures import scan_log

LOGS = Path(__file__).parents[1] / "engines" / "data" / "logs"
SERVING = LOGS / "embedded_serving.log"


def _launch_command(log: Path) -> list[str]:
    """The command servelab's launcher wrote on the log's first line."""
    _, _, first = parse_log_line(log.read_text(encoding="utf-8").splitlines()[0])
    return shlex.split(first.removeprefix(LINE_PREFIX).removeprefix("launching "))


@pytest.mark.parametrize("engine", ["embedded", "transformers"])
def test_the_cache_transformers_built_is_read_in_tokens(engine: str):
    command = _launch_command(SERVING)
    assert command[-4:] == ["--cb-num-blocks", "320", "--cb-max-batch-tokens", "1024"]

    conf = engine_config(engine, command, scan_log(SERVING, engine))

    # 320 sectors of one 256-token block each (the tiny preset has only full attention)
    assert conf.kv_capacity_tokens is not None
    assert conf.kv_capacity_tokens.value == 320 * 256
    assert conf.kv_capacity_tokens.source.startswith("engine.log line 18 (kv_cache_capacity)")
    assert "Paged cache initialized, 320 sectors of 256 tokens" in conf.kv_capacity_tokens.source
    assert conf.max_batch_tokens is not None and conf.max_batch_tokens.value == 1024
    assert conf.max_batch_tokens.source == "engine command: --cb-max-batch-tokens 1024"
    assert conf.kv_memory_gib is not None and conf.kv_memory_gib.value == 4952 / 1024
    assert conf.cuda_graphs is not None and conf.cuda_graphs.value is False
    assert "cuda graphs on the decode path" in conf.cuda_graphs.source


def test_without_the_flag_the_batch_budget_comes_from_the_log():
    conf = engine_config("embedded", [], scan_log(SERVING, "embedded"))

    assert conf.max_batch_tokens is not None and conf.max_batch_tokens.value == 1024
    assert conf.max_batch_tokens.source == (
        "engine.log line 18 (kv_cache_capacity): max_batch_tokens=1024"
    )


def test_a_block_size_on_the_command_sizes_the_sectors():
    command = [*_launch_command(SERVING), "--cb-block-size", "128"]

    conf = engine_config("embedded", command, scan_log(SERVING, "embedded"))

    assert conf.kv_capacity_tokens is not None and conf.kv_capacity_tokens.value == 320 * 128


def test_a_failed_sizing_has_no_cache_but_names_its_batch_budget():
    log = LOGS / "embedded_cache_sizing_failed.log"

    conf = engine_config("embedded", [], scan_log(log, "embedded"))

    assert conf.kv_capacity_tokens is None
    assert conf.max_batch_tokens is not None and conf.max_batch_tokens.value == 8192
    assert "kv_cache_sizing_failed" in conf.max_batch_tokens.source
    assert conf.kv_memory_gib is not None and conf.kv_memory_gib.value == 4 / 1024


def test_other_engines_sectors_are_not_read_as_transformers_blocks():
    conf = engine_config("vllm", [], scan_log(LOGS / "vllm_startup.log", "vllm"))

    assert conf.kv_capacity_tokens is not None and conf.kv_capacity_tokens.value == 2226624
    assert conf.kv_memory_gib is not None and conf.kv_memory_gib.value == 101.92
    assert conf.max_batch_tokens is not None and conf.max_batch_tokens.value == 8192


def test_sglang_batch_budget_is_its_prefill_tokens():
    conf = engine_config("sglang", [], scan_log(LOGS / "sglang_startup.log", "sglang"))

    assert conf.max_batch_tokens is not None and conf.max_batch_tokens.value == 16384
    assert conf.kv_memory_gib is None
