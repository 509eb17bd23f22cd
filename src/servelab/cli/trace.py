"""`servelab trace`: a torch-profiler (Chrome/Kineto) trace summarised, read as a stream."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from servelab.cli.exit_codes import handle_errors
from servelab.cli.options import check_range
from servelab.report.trace import render_trace
from servelab.trace import DEFAULT_LONG_GAP_US, DEFAULT_TOP, summarize_traces

__all__ = ["trace"]

_TEXT_WIDTH = 160


def trace(
    path: Annotated[
        Path,
        typer.Argument(
            help="A trace file (.json or .json.gz, e.g. vLLM's *.pt.trace.json.gz, SGLang's "
            "*-TP-0.trace.json.gz) or a folder of them: one summary per file."
        ),
    ],
    top: Annotated[int, typer.Option("--top", help="Kernels or ops listed.")] = DEFAULT_TOP,
    gap_ms: Annotated[
        float,
        typer.Option("--gap-ms", help="An idle gap this long (ms) or longer is a long gap."),
    ] = DEFAULT_LONG_GAP_US / 1e3,
    steps: Annotated[
        int | None,
        typer.Option(
            "--steps",
            help="The steps the trace covers (e.g. a benchmark's profiled iterations): "
            "per-step figures are the window's totals over it. Default: the steps the "
            "engine marked (vLLM, SGLang, ProfilerStep#).",
        ),
    ] = None,
    step_marker: Annotated[
        str | None,
        typer.Option(
            "--step-marker",
            help="A regular expression for your own step annotation (record_function name), "
            "preferred to the engines' markers.",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the summaries as a JSON list.")
    ] = False,
) -> None:
    """Where a trace's time went: device-busy share, top kernels, idle gaps, steps.

    Busy is the union of kernel, memcpy and memset intervals over the window (Holistic
    Trace Analysis's definition); on a CPU-only trace, of the CPU ops. Ops are ranked by
    exclusive time; idle gaps come with the host op that started last before each long
    one; prefill and decode steps are counted where vLLM or SGLang marked them.
    docs/TRACE.md defines every number.
    """
    out = Console() if sys.stdout.isatty() else Console(width=_TEXT_WIDTH)
    err = Console(stderr=True)
    with handle_errors(err):
        check_range("--top", top, low=1)
        check_range("--gap-ms", gap_ms, low=0, low_inclusive=False)
        check_range("--steps", steps, low=1)
        summaries = summarize_traces(
            path, top=top, long_gap_us=gap_ms * 1e3, steps=steps, step_marker=step_marker
        )
        if json_output:
            documents = ",".join(s.model_dump_json(by_alias=True) for s in summaries)
            out.print_json(f"[{documents}]")
            return
        for summary in summaries:
            out.print(render_trace(summary))
