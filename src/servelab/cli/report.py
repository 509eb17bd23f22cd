"""`servelab report`: the state of the union of a run (or a tuning study), as report.html
and report.md."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from servelab.cli.exit_codes import handle_errors
from servelab.cli.options import JsonOutput, MachineHourPrice, hourly_price
from servelab.core.errors import ConfigError
from servelab.report import TARGETS, is_study_dir, parse_target, write_report, write_study_report

__all__ = ["Targets", "Title", "report"]

Targets = Annotated[
    list[str] | None,
    typer.Option(
        "--target",
        help="A goal, NAME=VALUE, repeatable: total=1000 (tok/s), output=300, single=100 "
        "(single-stream tok/s), per_user=50 (1000/TPOT), goodput=2 (req/s), ttft_p99=2s, "
        "ttft_p50, tpot_p99=50ms, tpot_p50, itl_p99, e2e_p99, errors=1 (%). Names: "
        + ", ".join(TARGETS)
        + ".",
    ),
]
Title = Annotated[str | None, typer.Option(help="The report's title.")]


def report(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            help="Run directories (servelab run, bench or import): one to report, several to "
            "compare with the first; or one study folder (servelab tune, with study.json).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            help="Where report.html, report.md and plots/ go. Default: the run; for a "
            "comparison, compare-A-vs-B/ beside the first run. A study's report always goes "
            "into the study folder."
        ),
    ] = None,
    target: Targets = None,
    title: Title = None,
    gpu_hour_price: Annotated[
        float | None,
        typer.Option(
            metavar="USD",
            help="Price every run's tokens at this many US dollars per GPU-hour, over the run's"
            " GPUs (the count its own price recorded, else its engine spec's layout, the GPUs"
            " it sampled, or its probe's), in place of the price it ran with.",
        ),
    ] = None,
    machine_hour_price: MachineHourPrice = None,
    json_output: JsonOutput = False,
) -> None:
    """Write report.html (one self-contained file) and report.md (+ plots/*.png).

    Sections: goal and targets, machine (probe facts and verdicts), engine (version,
    launch command, spec), results (the sweep table and plots), findings (diagnose and
    the server's warnings), status (done, open, next). With several runs: the same
    sections side by side, and every later run against the first, per load and metric,
    with a noise band and a verdict (within noise, better or worse outside noise). With a
    study folder: a Tuning section first (the question, the best trial or the Pareto set
    and its gain over the default, the best spec and command, every trial, the plot, and
    which layout wins and why), then the best trial's run in the six sections.
    """
    out_console = Console()
    err = Console(stderr=True)
    with handle_errors(err):
        targets = [parse_target(t) for t in target or []]
        price = hourly_price(gpu_hour_price, machine_hour_price, command="servelab report")
        if len(run_dirs) == 1 and is_study_dir(run_dirs[0]):
            if out is not None:
                raise ConfigError(
                    "--out does not apply to a study: its report goes into the study folder"
                )
            if price is not None:
                raise ConfigError(
                    "a study's trials were priced as they ran",
                    hint="to price one at another rate, report its run directory (trials/NNN)",
                )
            files = write_study_report(run_dirs[0], title=title, targets=targets)
        else:
            files = write_report(run_dirs, out=out, targets=targets, title=title, price=price)
        if json_output:
            out_console.print_json(
                data={
                    "html": str(files.html),
                    "markdown": str(files.markdown),
                    "plots": [str(p) for p in files.plots],
                }
            )
            return
        err.print(f"report: {escape(str(files.html))}", highlight=False, soft_wrap=True)
        err.print(f"markdown: {escape(str(files.markdown))}", highlight=False, soft_wrap=True)
