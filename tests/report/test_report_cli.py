"""`servelab report` as a user runs it: on a run that `servelab bench` measured against
`servelab sim` and `servelab diagnose` explained, and on bad input (one line, no traceback).
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from servelab.cli import app
from servelab.engines.base import EngineSpec
from servelab.engines.launcher import launch_engine
from tests.conftest import SERVELAB
from tests.diagnose.builders import write_run
from tests.report.builders import bench_summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def servelab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVELAB, *args], capture_output=True, text=True, timeout=120)


def sweep_loads(markdown: str) -> list[str]:
    """The first cell of each row of report.md's sweep table ('4 *' for client-bound: '4')."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| concurrency |")) + 2
    rows = itertools.takewhile(lambda line: line.startswith("| "), lines[start:])
    return [row.split(" | ")[0].removeprefix("| ").removesuffix(r" \*") for row in rows]


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One measured and diagnosed run directory: two levels of eight requests on the sim."""
    folder = tmp_path_factory.mktemp("sim-run")
    engine = launch_engine(
        EngineSpec(engine="sim", options={"ttft_ms": 5, "itl_ms": 2}, startup_timeout_s=60),
        log_path=folder / "sim.log",
    )
    run = folder / "run"
    try:
        bench = servelab(
            *("bench", "--url", engine.url, "--concurrency", "1,4", "--num-requests", "8"),
            *("--input-len", "16", "--output-len", "16", "--warmup", "0", "--out", str(run)),
        )
    finally:
        engine.stop()
    assert bench.returncode == 0, bench.stderr
    diagnosed = servelab("diagnose", str(run))
    assert diagnosed.returncode == 0, diagnosed.stderr
    return run


@pytest.fixture
def run_copy(sim_run: Path, tmp_path: Path) -> Path:
    """The shared run, copied for a test that changes it."""
    return Path(shutil.copytree(sim_run, tmp_path / "run"))


def test_report_says_where_it_wrote_on_stderr(sim_run: Path, tmp_path: Path):
    out = tmp_path / "out"
    result = servelab(
        *("report", str(sim_run), "--out", str(out), "--title", "Sim state of the union"),
        *("--target", "total=1", "--target", "ttft_p99=1h", "--target", "goodput=1"),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"report: {out / 'report.html'}",
        f"markdown: {out / 'report.md'}",
    ]
    markdown = (out / "report.md").read_text()
    assert markdown.startswith("# Sim state of the union\n")
    assert "2 of 3 targets met." in markdown
    assert "Deployment modelled" in markdown  # diagnosis.json was read
    assert sweep_loads(markdown) == ["1", "4"]
    html = (out / "report.html").read_text()
    assert "<title>Sim state of the union</title>" in html
    assert html.count("<svg") == len(list((out / "plots").glob("*.png"))) >= 5
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in (out / "plots").glob("*.png"))
    assert not (sim_run / "report.html").exists()


def test_json_prints_the_paths_on_stdout(sim_run: Path, tmp_path: Path):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["report", str(sim_run), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    paths = json.loads(result.stdout)
    assert paths["html"] == str(out / "report.html")
    assert paths["markdown"] == str(out / "report.md")
    assert sorted(paths["plots"]) == sorted(str(p) for p in (out / "plots").glob("*.png"))
    assert all(Path(p).is_file() for p in [paths["html"], paths["markdown"], *paths["plots"]])


BAD_INPUT = [
    (["{missing}"], "error: no run directory at {missing}"),
    (["{empty}"], "error: {empty} has no summary.json"),
    (["{corrupt}"], "error: {corrupt}/summary.json is not a valid summary.json"),
    (["{wrong}"], "error: {wrong}/summary.json is not a valid summary.json: status"),
    (["{run}", "--target", "total=fast"], "error: target total: 'fast' is not a number"),
    (["{run}", "--target", "speed=1"], "error: target 'speed=1' is not understood"),
    (["{run}", "--out", "{file}"], "error: cannot write the report into {file}"),
    (["{run}", "{run}"], "error: a run directory is given twice: compare different runs"),
]
BAD_IDS = ["missing", "no-summary", "not-json", "not-a-summary", "target", "name", "out", "two"]


@pytest.fixture
def bad_paths(sim_run: Path, tmp_path: Path) -> dict[str, str]:
    """Folders and files that are not run directories, by name, and the good run."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "summary.json").write_text("{not json")
    (tmp_path / "wrong").mkdir()
    (tmp_path / "wrong" / "summary.json").write_text('{"status": "exploded"}')
    (tmp_path / "file").write_text("a file, not a folder")
    names = ("missing", "empty", "corrupt", "wrong", "file")
    return {name: str(tmp_path / name) for name in names} | {"run": str(sim_run)}


@pytest.mark.parametrize(("args", "message"), BAD_INPUT, ids=BAD_IDS)
def test_bad_input_is_one_error_line_and_exit_2(
    bad_paths: dict[str, str], args: list[str], message: str
):
    result = CliRunner().invoke(app, ["report", *(arg.format(**bad_paths) for arg in args)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # not an exception that escaped
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(message.format(**bad_paths))
    assert Path(bad_paths["file"]).is_file()


@pytest.mark.parametrize(
    ("args", "message"), [BAD_INPUT[1], BAD_INPUT[7]], ids=["no-summary", "two"]
)
def test_bad_input_as_a_subprocess_has_no_traceback(
    bad_paths: dict[str, str], args: list[str], message: str
):
    result = servelab("report", *(arg.format(**bad_paths) for arg in args))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(message.format(**bad_paths))
    assert "Traceback" not in result.stderr


def test_corrupt_optional_files_are_left_out_with_a_note(run_copy: Path):
    """Garbage in probe.json, diagnosis.json and engine_events.json costs only their parts;
    without --out the report goes into the run."""
    optional = ["probe.json", "diagnosis.json", "engine_events.json"]
    for name in optional:
        (run_copy / name).write_bytes(b"\x00garbage{")
    result = CliRunner().invoke(app, ["report", str(run_copy)])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == f"report: {run_copy / 'report.html'}"
    markdown = (run_copy / "report.md").read_text()
    html = (run_copy / "report.html").read_text()
    for name in optional:
        assert name.replace("_", r"\_") + " left out: " in markdown  # escaped for Markdown
        assert f"{name} left out: " in html
    assert "Not diagnosed" in markdown
    assert "No probe.json in the run" in markdown


@pytest.mark.parametrize(
    ("name", "row"),
    [
        ("requests.jsonl", {"level": 0, "ok": True, "warmup": False}),
        ("telemetry.jsonl", {"kind": "gpu", "gpu": 0}),
        ("metrics.jsonl", {"kind": "metrics", "running": 3}),
    ],
)
def test_a_jsonl_row_of_another_shape_does_not_fail_the_report(tmp_path: Path, name: str, row):
    """A stale requests.jsonl or telemetry.jsonl row costs its plots a row, not the report."""
    run_dir = write_run(tmp_path / "run", bench_summary())
    (run_dir / name).write_text(json.dumps(row) + "\n")
    result = CliRunner().invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert f"{name}: 1 row" in (run_dir / "report.md").read_text()
