"""`servelab engine check --input-len N --output-len M`: the embedded engine's CPU cache, sized
by the adapter's own numbers as `servelab run` sizes it, and refused when it holds no request."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.bench.session import BenchConfig
from servelab.bench.sweep import SweepPlan
from servelab.bench.trial import sized_for_load
from servelab.bench.workload import WorkloadSpec
from servelab.cli.engine import engine_app
from servelab.engines.base import EngineSpec
from servelab.engines.transformers_serve import CB_BLOCK_TOKENS
from tests.conftest import SERVELAB

runner = CliRunner()

FAST = ("--recorded", "--no-machine")
"""The recorded flag list and no machine read: only the cache is under test."""


def check(*args: str):
    return runner.invoke(engine_app, ["check", *args, *FAST], catch_exceptions=False)


def spec_file(tmp_path: Path, kv_cache_tokens: int | None) -> Path:
    path = tmp_path / "embedded.yaml"
    knobs = "" if kv_cache_tokens is None else f"knobs: {{kv_cache_tokens: {kv_cache_tokens}}}\n"
    path.write_text(f"engine: embedded\nmodel: tiny\ndevice: cpu\n{knobs}")
    return path


def cache_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("cache   "))


def run_sizes(plan: SweepPlan, input_len: int, output_len: int) -> int:
    """The kv_cache_tokens `servelab run` launches the embedded engine with for this load."""
    config = BenchConfig(
        url="",
        workload=WorkloadSpec(dataset="random", input_len=input_len, output_len=output_len),
        sweep=plan,
    )
    sized, _ = sized_for_load(EngineSpec(engine="embedded", model="tiny", device="cpu"), config)
    assert sized.knobs.kv_cache_tokens is not None
    return sized.knobs.kv_cache_tokens


def test_a_cache_too_small_for_one_request_is_refused_in_one_line(tmp_path: Path):
    spec = spec_file(tmp_path, 256)  # one block: 256 tokens

    result = check(str(spec), "--input-len", "300", "--output-len", "64")

    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: the KV cache of 256 tokens cannot hold one request of 364 tokens "
        "(raise knobs.kv_cache_tokens to at least 364)"
    ]
    assert "holds 0 requests of 364 tokens" in cache_line(result.stdout)


def test_the_refusal_through_the_real_command(tmp_path: Path):
    spec = spec_file(tmp_path, 256)
    done = subprocess.run(
        [
            *SERVELAB,
            "engine",
            "check",
            str(spec),
            "--input-len",
            "300",
            "--output-len",
            "64",
            *FAST,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "cannot hold one request of 364 tokens" in done.stderr


def test_the_same_cache_holding_one_request_passes(tmp_path: Path):
    spec = spec_file(tmp_path, 256)

    result = check(str(spec), "--input-len", "192", "--output-len", "64")

    assert result.exit_code == 0, result.output
    assert "holds 1 requests of 256 tokens" in cache_line(result.stdout)


def test_a_fitting_cache_prints_its_tokens_blocks_and_source(tmp_path: Path):
    spec = spec_file(tmp_path, 1000)  # four blocks of 256: whole blocks, rounded up

    result = check(str(spec), "--input-len", "300", "--output-len", "64", "--concurrency", "8")

    assert result.exit_code == 0, result.output
    line = cache_line(result.stdout)
    assert line.startswith("cache   1,024 tokens (4 blocks, ")
    assert "holds 2 requests of 364 tokens" in line
    assert "--cb-num-blocks 4 " in result.stdout
    assert "from the configured KV cache (kv_cache_tokens=1,000 holds 2 364-token requests)" in (
        result.stdout
    )


@pytest.mark.parametrize(
    ("load", "plan", "source"),
    [
        (["--concurrency", "1,4,16"], SweepPlan(fixed=(1, 4, 16)), "sized for 16 192-token"),
        (
            ["--concurrency", "64"],
            SweepPlan(max_concurrency=64, max_source="--max-concurrency"),
            "sized for 64 192-token",
        ),
        ([], SweepPlan(), "sized for 256 192-token requests (the embedded engine's CPU cap"),
    ],
)
def test_no_cache_in_the_spec_is_sized_for_the_load_as_run_sizes_it(
    tmp_path: Path, load: list[str], plan: SweepPlan, source: str
):
    tokens = run_sizes(plan, 128, 64)

    result = check(
        str(spec_file(tmp_path, None)), "--input-len", "128", "--output-len", "64", *load
    )

    assert result.exit_code == 0, result.output
    blocks = tokens // CB_BLOCK_TOKENS
    assert cache_line(result.stdout).startswith(f"cache   {tokens:,} tokens ({blocks} blocks, ")
    assert f"--cb-num-blocks {blocks} " in result.stdout  # the command run would launch
    assert source in result.stdout
    assert tokens != 32_768  # not the default of an engine started with no load


def test_sixteen_requests_of_192_tokens_take_twenty_blocks(tmp_path: Path):
    """The adapter's numbers: 16 requests x 1 block of 256 tokens x 1.25 headroom."""
    result = check(
        str(spec_file(tmp_path, None)), "--input-len", "128", "--output-len", "64",
        "--concurrency", "16", "--json",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    cache = json.loads(result.stdout)["cache"]
    assert (cache["tokens"], cache["blocks"], cache["requests_held"]) == (5120, 20, 20)
    assert cache["source"] == "the KV cache sized for 16 192-token requests"


def test_without_a_load_the_default_is_shown_and_named(tmp_path: Path):
    result = check(str(spec_file(tmp_path, None)))

    assert result.exit_code == 0, result.output
    assert cache_line(result.stdout).startswith("cache   32,768 tokens (128 blocks, ")
    assert "from the default of an engine started with no load in view" in result.stdout


def test_concurrency_without_the_lengths_is_one_line_and_exit_2(tmp_path: Path):
    result = check(str(spec_file(tmp_path, None)), "--concurrency", "16")

    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --concurrency sizes the cache for a load: give its --input-len and --output-len too"
    ]
