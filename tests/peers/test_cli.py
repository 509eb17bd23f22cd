"""`servelab import` as a user runs it, and `servelab report` and `servelab diagnose` on
what it wrote: one imported run directory per tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.bench.peers import import_file, write_imported
from servelab.bench.results import BenchSummary
from servelab.store import RunDir
from tests.peers.peerfiles import (
    AIPERF_SWEEP,
    GUIDELLM,
    SGLANG_NEW,
    SGLANG_OLD,
    VLLM_C8,
    run_import,
    run_servelab,
)


def test_import_writes_the_run_and_says_so_on_stderr(tmp_path):
    out = tmp_path / "run"
    result = run_import(str(SGLANG_NEW), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"imported sglang (0.2.12+ keys; version not in the file): 2 levels -> {out}"
    ]
    assert "1,128.9" in result.stdout  # the sweep table: c=8's total tok/s
    summary = RunDir(out).load_summary(BenchSummary)
    assert summary is not None and [s.max_concurrency for s in summary.levels] == [1, 8]
    assert len((out / "requests.jsonl").read_text().splitlines()) == 32


def test_json_prints_the_summary(tmp_path):
    result = run_import(str(VLLM_C8), "--out", str(tmp_path / "run"), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "servelab.bench/1" and document["status"] == "complete"
    assert document["levels"][0]["input_throughput"] is None
    assert document["run"]["command"] == ["servelab", "import", str(VLLM_C8)]
    assert result.stderr.startswith("imported vllm (--save-result JSON; version not in the file)")


def test_the_default_folder_is_named_after_the_tool_and_the_file(tmp_path):
    result = run_import(str(GUIDELLM["0.8.1"]), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (folder,) = (tmp_path / "servelab-runs").glob("*-import-guidellm-guidellm-0.8.1-benchmarks")
    assert result.stderr.strip() == (
        f"imported guidellm 0.8.1: 2 levels -> servelab-runs/{folder.name}"
    )
    named = run_import(str(GUIDELLM["0.8.1"]), "--name", "guide", cwd=tmp_path)
    assert named.returncode == 0, named.stderr
    assert len(list((tmp_path / "servelab-runs").glob("*-guide"))) == 1


def test_an_output_folder_that_is_not_empty_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "mine.txt").write_text("keep")
    result = run_import(str(SGLANG_NEW), "--out", str(tmp_path / "run"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: output folder {tmp_path / 'run'} exists and is not empty (pick another)"
    ]


@pytest.fixture(scope="module")
def imported_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A run directory per tool (and SGLang's old key generation, the sparsest file)."""
    root = tmp_path_factory.mktemp("imported")
    files = {
        "SGLang bench_serving": SGLANG_NEW,
        "SGLang bench_serving (0.2.11": SGLANG_OLD,
        "vLLM bench serve": VLLM_C8,
        "AIPerf sweep summary": AIPERF_SWEEP,
        "GuideLLM benchmarks.json 0.8.1": GUIDELLM["0.8.1"],
        "GuideLLM benchmarks.json (v0.3 schema)": GUIDELLM["0.3.1"],
    }
    return {
        label: write_imported(import_file(path), root / path.stem) for label, path in files.items()
    }


_LABELS = [
    "SGLang bench_serving",
    "SGLang bench_serving (0.2.11",
    "vLLM bench serve",
    "AIPerf sweep summary",
    "GuideLLM benchmarks.json 0.8.1",
    "GuideLLM benchmarks.json (v0.3 schema)",
]


@pytest.mark.parametrize("label", _LABELS)
def test_report_reads_an_imported_run_and_names_the_tool(imported_runs, label):
    run = imported_runs[label]
    result = run_servelab("report", str(run))
    assert result.returncode == 0, result.stderr
    markdown = (run / "report.md").read_text().replace("\\", "")  # Markdown's escapes
    assert f"imported from {label}" in markdown
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("label", _LABELS)
def test_diagnose_reads_an_imported_run(imported_runs, label):
    run = imported_runs[label]
    result = run_servelab("diagnose", str(run))
    assert result.returncode == 0, result.stderr
    assert (run / "diagnosis.json").exists()


def test_the_report_plots_the_distributions_of_the_levels_with_records(imported_runs):
    run = imported_runs["vLLM bench serve"]
    result = run_servelab("report", str(run))
    assert result.returncode == 0, result.stderr
    markdown = (run / "report.md").read_text()
    assert "Time to first token per level" in markdown
