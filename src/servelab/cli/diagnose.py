"""`servelab diagnose`: why a run is as fast as it is, with the evidence, and what to try."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from servelab.cli.exit_codes import handle_errors
from servelab.cli.options import check_range

__all__ = ["diagnose"]

_TEXT_WIDTH = 120


def diagnose(
    run_dir: Annotated[
        Path, typer.Argument(help="A run directory of servelab bench or run (summary.json).")
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="For the model's ceiling: a preset (glm-5-nvfp4, h200-ref, ...) or a "
            "config.json. An embedded engine's run knows its own.",
        ),
    ] = None,
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="GPU slug (h200, rtx-pro-6000, ...).")
    ] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPU count.")] = None,
    tp: Annotated[
        int | None,
        typer.Option("--tp", help="Tensor parallelism. Default: the engine's, else GPUs."),
    ] = None,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline stages.")] = 1,
    ep: Annotated[int, typer.Option("--ep", help="Expert parallelism.")] = 1,
    weights: Annotated[
        str | None, typer.Option("--weights", help="Weight format: bf16, fp8, nvfp4, int4.")
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="The engine that served the run (sglang, vllm, transformers, sim) when it "
            "does not say: actions use its flags and its log is read; else servelab knobs.",
        ),
    ] = None,
    probe: Annotated[
        Path | None,
        typer.Option(
            "--probe",
            help="A `servelab probe` probe.json, in place of the run's own: its verdicts "
            "(P2P, links, VM) and measurements (which calibrate the model).",
        ),
    ] = None,
    time_scale: Annotated[
        float,
        typer.Option(
            "--time-scale",
            help="The run was made on `servelab sim --time-scale X`: the model's times are "
            "divided by X, as the simulator's were.",
        ),
    ] = 1.0,
    what_if: Annotated[
        list[str] | None,
        typer.Option(
            "--what-if",
            metavar="KNOB=VALUE",
            help="Replay the run's twin with this limit changed and print what each level "
            "would measure, with its interval (repeat for several; VALUE 'none' lifts it): "
            "max_running_requests, kv_cache_tokens, max_batch_tokens. Writes nothing.",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print diagnosis.json's document on stdout.")
    ] = False,
) -> None:
    """Name what limits a run: findings with their evidence, most important first.

    Reads the run directory (summary.json; telemetry, engine metrics, the engine's log
    events and probe.json where present), writes diagnosis.json into it, and prints each
    finding (kind, severity, confidence, evidence and where it came from, what to try,
    the expected gain where the model can say) and the single-stream gap in layers, from
    the model's roofline to the engine as measured. docs/DIAGNOSE.md explains each kind.
    """
    out = Console() if sys.stdout.isatty() else Console(width=_TEXT_WIDTH)
    err = Console(stderr=True)
    with handle_errors(err):
        for flag, size in (("--gpus", gpus), ("--tp", tp), ("--pp", pp), ("--ep", ep)):
            check_range(flag, size, low=1)
        check_range("--time-scale", time_scale, low=0, low_inclusive=False)
        from servelab.diagnose import DiagnoseOptions, diagnose_run
        from servelab.report.diagnosis import render_diagnosis

        options = DiagnoseOptions(
            model=model,
            gpu=gpu,
            gpus=gpus,
            tp=tp,
            pp=pp,
            ep=ep,
            weights=weights,
            engine=engine,
            probe=probe,
            time_scale=time_scale,
        )
        if what_if:
            from servelab.diagnose.whatif_run import parse_changes, what_if_run
            from servelab.report.diagnosis import render_what_if

            asked = what_if_run(run_dir, parse_changes(what_if), options)
            if json_output:
                out.print_json(asked.model_dump_json())
            else:
                out.print(render_what_if(asked))
            return
        result = diagnose_run(run_dir, options)
        if json_output:
            out.print_json(result.model_dump_json(by_alias=True))
        else:
            out.print(render_diagnosis(result))
