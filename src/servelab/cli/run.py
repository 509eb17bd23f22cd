"""`servelab run`: the main job in one command."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from servelab.bench.capacity import (
    DEFAULT_ATTAINMENT,
    DEFAULT_MAX_RATE,
    DEFAULT_MAX_STEPS,
    DEFAULT_REMEASURES,
    DEFAULT_TOLERANCE,
)
from servelab.bench.load import LoadMode
from servelab.bench.sweep import DEFAULT_MAX_CONCURRENCY
from servelab.bench.workload import parse_dataset
from servelab.cli.bench import print_failures, print_quality
from servelab.cli.engine_log_options import EngineLogOptions
from servelab.cli.exit_codes import exit_for_levels, handle_errors
from servelab.cli.option_groups import with_option_groups
from servelab.cli.options import (
    AppliesFinding,
    Duration,
    EngineSpecPath,
    InputLen,
    JsonOutput,
    NumRequests,
    OutDir,
    ScrapeMetrics,
    check_range,
    parse_url,
)
from servelab.cli.progress import SweepView
from servelab.cli.quality_options import QualityOptions
from servelab.cli.report import Targets, Title
from servelab.cli.shared_options import SharedOptions
from servelab.core.errors import ConfigError
from servelab.core.units import parse_duration_s, parse_number_list, parse_slos
from servelab.diagnose.check import parse_applies
from servelab.engines.embedded.cache import EMBEDDED_CPU_MAX_CONCURRENCY
from servelab.engines.embedded.presets import DEFAULT_PRESET
from servelab.engines.spec import load_spec
from servelab.pipeline.run import (
    DEFAULT_RUN_INPUT_LEN,
    DEFAULT_RUN_OUTPUT_LEN,
    RunConfig,
    run_pipeline,
)
from servelab.report import parse_target, render_capacity
from servelab.report.cost import cost_lines, slo_rule
from servelab.report.diagnosis import top_finding_lines
from servelab.report.tables import render_sweep

__all__ = ["run"]


# Options named as bench's that differ from them on purpose: --url and --model are optional
# (without either, the embedded engine); --concurrency defaults to the auto sweep and
# --request-rate takes 'auto' for the capacity search; --slo also stops the auto sweep;
# --dataset takes no trace (a trace sets its own send times); --output-len is one length
# for every dataset; --torch-profile names a concurrency, a level of the sweep.
@with_option_groups
def run(
    *,
    url: Annotated[
        str | None,
        typer.Option(help="Sweep this endpoint instead of launching the embedded engine."),
    ] = None,
    engine_log: EngineLogOptions,
    engine: EngineSpecPath = None,
    model: Annotated[str | None, typer.Option(help="With --url: the served model name.")] = None,
    preset: Annotated[
        str | None,
        typer.Option(help="Embedded engine preset: tiny (CPU, the default) or h200-ref (GPU)."),
    ] = None,
    concurrency: Annotated[
        str,
        typer.Option(
            help="Concurrency levels to sweep, e.g. 1,4,16; 'auto': start at 1 and double "
            "until two levels past the knee, >5% failed requests, a broken SLO, a full KV "
            "cache, or --max-concurrency."
        ),
    ] = "auto",
    max_concurrency: Annotated[
        int | None,
        typer.Option(
            help="The auto sweep's last level at most. Default: the model's KV capacity at "
            f"these lengths where known, else {DEFAULT_MAX_CONCURRENCY}; the embedded engine "
            f"on the CPU: {EMBEDDED_CPU_MAX_CONCURRENCY}, its KV cache sized in tokens for it "
            "(knobs.kv_cache_tokens)."
        ),
    ] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(
            help="Open loop instead of --concurrency: arrival rates in requests/s (Poisson), "
            "e.g. 1,2,4; 'auto' with --capacity: search the rate."
        ),
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option(help="SLOs, e.g. ttft=2s,tpot=50ms: goodput, and the auto sweep's stop."),
    ] = None,
    capacity: Annotated[
        bool,
        typer.Option(
            "--capacity",
            help="Find the highest load that meets --slo: from 1, double until a level fails, "
            f"then bisect to within {DEFAULT_TOLERANCE:.0%}; a boundary level whose verdict is "
            f"within noise is measured again ({DEFAULT_REMEASURES} more time at most) and "
            "judged on its requests pooled. The answer leads the report (docs/REPORT.md).",
        ),
    ] = False,
    attainment: Annotated[
        float | None,
        typer.Option(
            help="With --capacity: the share of a level's requests that must meet every SLO, "
            f"in (0, 1]; 0.99 for a p99-style target. Default {DEFAULT_ATTAINMENT:g}."
        ),
    ] = None,
    max_request_rate: Annotated[
        float | None,
        typer.Option(
            help="With --request-rate auto: the largest rate searched, in requests/s. "
            f"Default {DEFAULT_MAX_RATE:g}."
        ),
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            help="With --capacity: levels at most, re-measures included. "
            f"Default {DEFAULT_MAX_STEPS}."
        ),
    ] = None,
    dataset: Annotated[
        str, typer.Option(help="random, fixed (one prompt) or sharegpt:PATH.")
    ] = "random",
    input_len: InputLen = DEFAULT_RUN_INPUT_LEN,
    output_len: Annotated[
        int, typer.Option(help="Output tokens of every request.")
    ] = DEFAULT_RUN_OUTPUT_LEN,
    num_requests: NumRequests = None,
    duration: Duration = None,
    shared: SharedOptions,
    quality: QualityOptions,
    metrics: ScrapeMetrics = True,
    torch_profile: Annotated[
        int | None,
        typer.Option(
            help="With --engine (vllm, sglang): launch it with its torch profiler on and profile"
            " a few seconds of the level at this concurrency (a power of 2 in the auto sweep);"
            " diagnose and the report read the summary."
        ),
    ] = None,
    applies: AppliesFinding = None,
    out: OutDir = None,
    target: Targets = None,
    title: Title = None,
    json_output: JsonOutput = False,
) -> None:
    """Probe → launch → sweep → diagnose → report (HTML + Markdown) → stop.

    With no options: starts the embedded engine (a generated model on the CPU, served by
    transformers serve) and sweeps from concurrency 1, doubling until two levels past the
    knee, at 128 input / 64 output tokens.

    With --engine SPEC: the same on the engine the spec launches; with --url: on a running
    endpoint. With --slo ... --capacity: the highest load that meets the SLO, searched.
    With --cluster: the load comes from client workers on a Ray cluster's nodes.
    """
    out_console = Console()
    err = Console(stderr=True)
    with handle_errors(err):
        given = [name for name, value in (("--url", url), ("--engine", engine)) if value]
        if len(given) > 1:
            raise ConfigError("give --url (an endpoint) or --engine (a spec to launch), not both")
        if given and preset is not None:
            raise ConfigError(
                f"--preset is for the embedded engine; it does not go with {given[0]}"
            )
        if model is not None and url is None:
            raise ConfigError("--model names the served model of --url; a spec has served_name")
        check_range("--max-concurrency", max_concurrency, low=1)
        if max_concurrency is not None and concurrency.strip().lower() != "auto":
            raise ConfigError("--max-concurrency caps the auto sweep; it does not go with levels")
        _check_capacity_options(
            capacity=capacity,
            attainment=attainment,
            max_steps=max_steps,
            request_rate=request_rate,
            max_request_rate=max_request_rate,
            concurrency=concurrency,
            max_concurrency=max_concurrency,
        )
        dataset_name, dataset_path = parse_dataset(dataset)
        if dataset_name == "trace":
            raise ConfigError(
                "--dataset trace: a trace sets its own send times; replay it with servelab bench"
            )
        check_range("--torch-profile", torch_profile, low=1)
        check_range("--input-len", input_len, low=1)
        check_range("--output-len", output_len, low=1)
        check_range("--num-requests", num_requests, low=1)
        if num_requests is not None and duration is not None:
            raise ConfigError("give --num-requests or --duration, not both")
        quality_plan = quality.plan()  # before the engine starts: a bad --quality-ref is one line
        config = RunConfig(
            url=parse_url(url) if url else None,
            engine_log=engine_log.engine_log,
            engine_log_format=engine_log.engine,
            engine=load_spec(engine) if engine is not None else None,
            model=model,
            preset=preset or DEFAULT_PRESET,
            mode=LoadMode.REQUEST_RATE if request_rate else LoadMode.CONCURRENCY,
            concurrency=_levels(concurrency),
            request_rate=_rates(request_rate),
            max_concurrency=max_concurrency,
            slo_ms=parse_slos(slo) if slo else None,
            capacity=capacity,
            attainment=attainment if attainment is not None else DEFAULT_ATTAINMENT,
            max_request_rate=max_request_rate,
            max_steps=max_steps if max_steps is not None else DEFAULT_MAX_STEPS,
            dataset=dataset_name,
            dataset_path=dataset_path,
            input_len=input_len,
            output_len=output_len,
            num_requests=num_requests,
            duration_s=parse_duration_s(duration, what="--duration") if duration else None,
            out=out,
            runs_root=shared.runs_dir,
            command=["servelab", *sys.argv[1:]],
            applies=parse_applies(applies).label if applies is not None else None,
            gpus=shared.telemetry_gpus(),
            metrics=metrics,
            torch_profile=float(torch_profile) if torch_profile is not None else None,
            cluster=shared.cluster_spec(),
            targets=[parse_target(t) for t in target or []],
            title=title,
            price=shared.price("servelab run"),
            quality=quality_plan,
        )
        with SweepView(err) as view:
            result = run_pipeline(config, on_event=view)
        found = result.summary.capacity
        if json_output:
            out_console.print_json(result.summary.model_dump_json(by_alias=True))
        else:
            out_console.print(render_sweep(result.summary.levels))
            if found is not None:
                out_console.print(render_capacity(found))
            out_console.print(
                escape(result.knee.explanation[0].upper() + result.knee.explanation[1:])
            )
            if found is not None:
                out_console.print(
                    escape(found.explanation[0].upper() + found.explanation[1:]), soft_wrap=True
                )
            for line in cost_lines(result.summary, meets=slo_rule(result.summary)):
                out_console.print(escape(line), highlight=False, soft_wrap=True)
            print_quality(out_console, result.run_dir)
        print_failures(err, result.summary)
        err.print(f"report: {escape(str(result.report.html))}", highlight=False, soft_wrap=True)
        err.print(
            f"markdown: {escape(str(result.report.markdown))}", highlight=False, soft_wrap=True
        )
        if result.diagnosis is not None:
            for line in top_finding_lines(result.diagnosis):
                err.print(escape(line), highlight=False, soft_wrap=True)
        levels = result.summary.levels
        code = exit_for_levels(
            sum(s.completed or 0 for s in levels), sum(s.failed or 0 for s in levels)
        )
        raise typer.Exit(int(code))


def _check_capacity_options(
    *,
    capacity: bool,
    attainment: float | None,
    max_steps: int | None,
    request_rate: str | None,
    max_request_rate: float | None,
    concurrency: str,
    max_concurrency: int | None,
) -> None:
    """One ConfigError line for options that do not go together or are out of range."""
    check_range("--attainment", attainment, low=0, high=1, low_inclusive=False)
    check_range("--max-steps", max_steps, low=1)
    check_range("--max-request-rate", max_request_rate, low=0, low_inclusive=False)
    for name, value in (("--attainment", attainment), ("--max-steps", max_steps)):
        if value is not None and not capacity:
            raise ConfigError(f"{name} is the capacity search's; it goes with --capacity")
    if request_rate is None:
        if max_request_rate is not None:
            raise ConfigError("--max-request-rate caps --request-rate auto")
        return
    if concurrency.strip().lower() != "auto" or max_concurrency is not None:
        raise ConfigError("give --concurrency or --request-rate, not both")
    if max_request_rate is not None and request_rate.strip().lower() != "auto":
        raise ConfigError("--max-request-rate caps --request-rate auto; it does not go with rates")


def _rates(text: str | None) -> list[float] | None:
    """None (closed loop, or 'auto': the capacity search's rates), else the rates given."""
    if text is None or text.strip().lower() == "auto":
        return None
    return parse_number_list(text, what="--request-rate", integer=False)


def _levels(text: str) -> list[int] | None:
    """'auto' -> None (the adaptive sweep), else the integer levels given."""
    if text.strip().lower() == "auto":
        return None
    return [int(c) for c in parse_number_list(text, what="--concurrency", integer=True)]
