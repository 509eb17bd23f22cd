"""What each token costs, as a user sees it: `servelab bench --url` against the simulator with
and without a price, `servelab report` pricing the committed H200 run (its GPU power
sampled) and overriding a run's own price, and bad prices refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.bench.cost import priced, resolve_price
from servelab.bench.cost_results import HourlyPrice
from servelab.bench.results import BenchSummary
from servelab.cli import app
from servelab.engines.base import EngineSpec
from servelab.engines.launcher import RunningEngine, launch_engine
from servelab.report.cost import usd_text
from tests.conftest import SERVELAB

H200_RUN = Path(__file__).resolve().parents[2] / "benchmarks/gpu/results/h200-report"
NO_PRICE = "price: no price given (--gpu-hour-price or --machine-hour-price)"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> RunningEngine:
    folder = tmp_path_factory.mktemp("sim")
    engine = launch_engine(
        EngineSpec(engine="sim", options={"ttft_ms": 5, "itl_ms": 2}, startup_timeout_s=60),
        log_path=folder / "sim.log",
    )
    yield engine
    engine.stop()


def bench(url: str, out: Path, *price: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *SERVELAB,
            *("bench", "--url", url, "--concurrency", "1,4", "--num-requests", "8"),
            *("--input-len", "16", "--output-len", "16", "--warmup", "0", "--out", str(out)),
            *price,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "250"},  # the sweep table whole, columns unsqueezed
    )


def test_bench_with_a_machine_price_records_it_and_prices_every_level(sim, tmp_path):
    done = bench(sim.url, tmp_path / "run", "--machine-hour-price", "12")
    assert done.returncode == 0, done.stderr
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["price"] == {
        "basis": "machine_hour",
        "usd_per_gpu_hour": None,
        "usd_per_machine_hour": 12.0,
        "gpus": None,
        "gpus_source": None,
        "price_source": "servelab bench --machine-hour-price",
        "usd_per_hour": 12.0,
    }
    for level in saved["levels"]:
        tokens = level["total_input_tokens"] + level["total_output_tokens"]
        # by hand, from the level's own fields: $12 an hour over its tokens per second
        assert level["cost"]["usd_per_m_total_tokens"] == pytest.approx(
            12 / 3600 / (tokens / level["duration"]) * 1e6
        )
        assert level["cost"]["usd_per_m_output_tokens"] == pytest.approx(
            12 / 3600 / (level["total_output_tokens"] / level["duration"]) * 1e6
        )
        assert level["cost"]["j_per_output_token"] is None
        assert level["cost"]["unavailable"] == {"energy": "GPU power was not sampled (give --gpus)"}
    lines = done.stdout.splitlines()
    assert "price: $12.00 an hour (the whole machine; servelab bench --machine-hour-price)" in lines
    busiest = saved["levels"][1]["cost"]  # 4 streams: 4x the tokens of 1, no knee yet
    assert (
        "cost at the most total throughput (concurrency 4): "
        f"{usd_text(busiest['usd_per_m_total_tokens'])} per million total tokens, "
        f"{usd_text(busiest['usd_per_m_output_tokens'])} per million output tokens"
    ) in lines
    assert any("not measured: GPU power was not sampled (give --gpus)" in line for line in lines)
    assert "$/M total tok" in done.stdout  # the table's cost column


def test_bench_without_a_price_says_none_was_given(sim, tmp_path):
    done = bench(sim.url, tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert NO_PRICE in done.stdout.splitlines()
    assert "cost at" not in done.stdout and "$/M" not in done.stdout
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["price"] is None
    assert saved["levels"][0]["cost"]["unavailable"]["price"] == NO_PRICE.removeprefix("price: ")


@pytest.mark.parametrize(
    ("price", "says"),
    [
        (
            ["--gpu-hour-price", "2", "--machine-hour-price", "20"],
            "error: give --gpu-hour-price or --machine-hour-price, not both",
        ),
        (["--gpu-hour-price", "-2"], "error: --gpu-hour-price must be above 0, got -2"),
        (["--machine-hour-price", "nan"], "error: --machine-hour-price must be above 0, got nan"),
    ],
)
def test_a_bad_price_is_one_line_and_exit_2(price: list[str], says: str, tmp_path: Path):
    for command in (["bench", "--url", "http://127.0.0.1:9"], ["report", str(tmp_path)]):
        result = CliRunner().invoke(app, [*command, *price])
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines()[0] == says
        assert "Traceback" not in result.output


def test_a_gpu_price_without_a_gpu_count_is_refused_before_sending():
    result = CliRunner().invoke(
        app, ["bench", "--url", "http://127.0.0.1:9", "--gpu-hour-price", "2.5"]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: servelab bench --gpu-hour-price needs the deployment's GPU count"
    )


def test_the_h200_report_prices_its_tokens_and_shows_their_energy(tmp_path):
    """The committed H200 run recorded no price: its energy per token comes from its own
    sampled power, and `report --gpu-hour-price` prices it."""
    run = tmp_path / "h200"
    shutil.copytree(H200_RUN, run)
    plain = CliRunner().invoke(app, ["report", str(run)])
    assert plain.exit_code == 0, plain.output
    markdown = (run / "report.md").read_text()
    assert "- Price: no price given (--gpu-hour-price or --machine-hour-price)." in markdown
    # the cost table's row at concurrency 8: 2,603.67 J over 3,072 output and 28,080 tokens,
    # 1,787.18 tok/s at a mean 164.56 W (GPU power only)
    assert "| concurrency 8 | - | - | 0.8475 | 0.09272 | 10,860,193 |" in markdown
    assert "Energy at the knee (concurrency 256), GPU power only: 0.4296 J per output token" in (
        markdown
    )
    assert "Cost per token against interactivity: not drawn, no price given" in markdown

    priced_report = CliRunner().invoke(app, ["report", str(run), "--gpu-hour-price", "3.5"])
    assert priced_report.exit_code == 0, priced_report.output
    markdown = (run / "report.md").read_text()
    # $3.50 / 3600 / 1,787.18 tok/s x 1e6 = $0.544; / 195.52 output tok/s = $4.97
    assert "| concurrency 8 | $0.544 | $4.97 | 0.8475 | 0.09272 | 10,860,193 |" in markdown
    assert "Cost at the knee (concurrency 256): $0.124 per million total tokens" in markdown
    assert (run / "plots" / "cost.png").is_file()


def test_a_price_given_to_report_overrides_the_runs_own(tmp_path):
    run = tmp_path / "h200"
    shutil.copytree(H200_RUN, run)
    summary = BenchSummary.model_validate_json((run / "summary.json").read_text())
    own = HourlyPrice(basis="gpu_hour", usd=1.0, source="servelab run --gpu-hour-price")
    priced_at_1 = priced(summary, resolve_price(own, gpus=[0]))
    (run / "summary.json").write_text(priced_at_1.model_dump_json(by_alias=True))

    assert CliRunner().invoke(app, ["report", str(run)]).exit_code == 0
    markdown = (run / "report.md").read_text()
    assert "$1.00 an hour (1 GPU x $1.00 per GPU-hour; GPUs: --gpus 0" in markdown
    assert "| concurrency 8 | $0.155 |" in markdown  # $1 / 3600 / 1,787.18 x 1e6

    result = CliRunner().invoke(app, ["report", str(run), "--machine-hour-price", "7"])
    assert result.exit_code == 0, result.output
    markdown = (run / "report.md").read_text()
    assert "$7.00 an hour (the whole machine; servelab report --machine-hour-price)" in markdown
    assert "| concurrency 8 | $1.09 |" in markdown  # $7 / 3600 / 1,787.18 x 1e6
    # the run's own record is left as it ran
    kept = json.loads((run / "summary.json").read_text())
    assert kept["price"]["usd_per_hour"] == 1.0
