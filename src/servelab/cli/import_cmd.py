"""`servelab import`: a peer's result file (SGLang, vLLM, AIPerf, GuideLLM) as a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from servelab.cli.exit_codes import handle_errors
from servelab.cli.options import JsonOutput

__all__ = ["import_run"]


def import_run(
    file: Annotated[
        Path,
        typer.Argument(
            help="A peer's result file: SGLang bench_serving --output-file (JSONL), vLLM "
            "bench serve --save-result (JSON), AIPerf profile_export_aiperf.json or its sweep "
            "summary, GuideLLM benchmarks.json. The tool is told from the content.",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Run directory to write (must be new or empty). Default: "
            "servelab-runs/<UTC time>-import-<tool>-<file stem>/.",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(help="The run's name (and folder name). Default: import-<tool>-<file stem>."),
    ] = None,
    json_output: JsonOutput = False,
) -> None:
    """Turn a peer benchmark's result file into a servelab run directory.

    Writes summary.json (one level per level of the file, servelab's field names, units
    converted: ms for latencies, s for durations) and, where the file has per-request
    TTFTs and chunk gaps that can be rebuilt faithfully, requests.jsonl. A value the file
    does not have stays null, never 0; the run's notes say what it lacks and where the
    tool's definitions differ (docs/METRICS.md, "Imported results"). Then `servelab
    report` and `servelab diagnose` read it like any run.
    """
    out_console = Console()
    err = Console(stderr=True)
    with handle_errors(err):
        from servelab.bench.peers import import_file, write_imported
        from servelab.report.tables import render_sweep

        run = import_file(file, name=name)
        path = write_imported(run, out)
        if json_output:
            out_console.print_json(run.summary.model_dump_json(by_alias=True))
        else:
            out_console.print(render_sweep(run.summary.levels))
        levels = len(run.summary.levels)
        err.print(
            escape(
                f"imported {run.tool} {run.version_text}: {levels} level{'s' * (levels != 1)}"
                f" -> {path}"
            ),
            highlight=False,
            soft_wrap=True,
        )
