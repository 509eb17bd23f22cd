"""The run directory an import writes, and the faithfulness checks on per-request arrays."""

from __future__ import annotations

import json
import sqlite3

import pytest

from servelab.bench.peers import import_file, write_imported
from servelab.bench.peers.chunks import RequestArrays, rebuild_records
from servelab.bench.peers.common import Doc
from servelab.bench.peers.sglang import parse_sglang
from servelab.bench.records import RequestRecord
from servelab.bench.results import BenchSummary
from servelab.core.errors import ConfigError
from servelab.store import RunDir
from tests.peers.peerfiles import ALL, SGLANG_NEW, VLLM_C8, read_lines


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_fixture_writes_a_run_that_loads_back(path, tmp_path):
    run = import_file(path)
    out = write_imported(run, tmp_path / "run")
    loaded = RunDir(out).load_summary(BenchSummary)
    assert loaded == run.summary
    records = [RequestRecord.from_json(r) for r in RunDir(out).iter_jsonl("requests.jsonl")]
    assert records == run.records
    assert (out / "requests.jsonl").exists() == bool(run.records)
    # A peer's file never fills servelab's own self-check or telemetry.
    assert all(s.client is None and s.telemetry is None for s in loaded.levels)


def test_the_default_folder_and_the_catalogue(tmp_path):
    run = import_file(VLLM_C8)
    out = write_imported(run, root=tmp_path)
    assert out.parent == tmp_path
    assert out.name.endswith(f"-import-vllm-{VLLM_C8.stem}")
    with sqlite3.connect(tmp_path / "catalog.sqlite") as db:
        rows = db.execute("SELECT kind, levels, best_total_throughput FROM runs").fetchall()
    assert rows == [("import", 1, json.loads(VLLM_C8.read_text())["total_token_throughput"])]


def test_a_name_names_the_run_and_its_folder(tmp_path):
    run = import_file(SGLANG_NEW, name="h200 baseline")
    assert run.summary.run.name == "h200 baseline"
    assert write_imported(run, root=tmp_path).name.endswith("-h200-baseline")


def test_a_folder_that_is_not_empty_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x").write_text("")
    with pytest.raises(ConfigError, match="exists and is not empty"):
        write_imported(import_file(SGLANG_NEW), tmp_path / "run")


def test_the_native_sglang_backend_gets_no_records_and_says_why():
    lines = read_lines(SGLANG_NEW)
    lines[1]["backend"] = "sglang"  # /generate: its itls are per token, not per chunk
    parsed = parse_sglang([Doc(line, f"line {i + 1}") for i, line in enumerate(lines)])
    assert parsed.records == []
    assert parsed.levels[1].failed == 0  # the counts from the details still hold
    assert "spreads each chunk's gap over the chunk's tokens" in parsed.no_records


def _arrays(**changes) -> RequestArrays:
    base = {
        "ttfts_s": [0.05, 0.06],
        "itls_s": [[0.02, 0.02], [0.02]],
        "output_lens": [3, 2],
        "input_lens": [64, 64],
        "errors": ["", ""],
    }
    return RequestArrays(**{**base, **changes})


def test_rebuilt_offsets_are_ttft_then_cumulative_gaps():
    rebuilt = rebuild_records(0, _arrays(), completed=2)
    assert rebuilt.reason is None
    assert [r.chunk_offsets_ns for r in rebuilt.records] == [
        [50_000_000, 70_000_000, 90_000_000],
        [60_000_000, 80_000_000],
    ]


def test_a_failed_request_is_a_failed_record_with_its_message():
    rebuilt = rebuild_records(
        0,
        _arrays(ttfts_s=[0.05, 0.0], itls_s=[[0.02, 0.02], []], errors=["", "Bad Gateway"]),
        completed=1,
    )
    failed = rebuilt.records[1]
    assert not failed.ok and failed.error == "Bad Gateway" and failed.chunk_offsets_ns == []


@pytest.mark.parametrize(
    ("changes", "completed", "why"),
    [
        ({"itls_s": [[0.02]]}, 2, "differ in length (itls)"),
        ({"ttfts_s": [0.05, "x"]}, 2, "a value of the wrong kind"),
        ({}, 1, "hold 2 completed requests, its summary 1"),
        ({"latencies_s": [0.09, 0.5]}, 2, "is not its TTFT plus its chunk gaps"),
    ],
)
def test_arrays_that_are_not_faithful_give_no_records(changes, completed, why):
    rebuilt = rebuild_records(0, _arrays(**changes), completed=completed)
    assert rebuilt.records == []
    assert why in (rebuilt.reason or "")
