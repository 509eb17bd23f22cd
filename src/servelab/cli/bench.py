"""`servelab bench`: load-test any OpenAI-compatible endpoint."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from servelab.bench.attach import attached_log, bench_attached
from servelab.bench.conversation import ConversationSpec, parse_turns
from servelab.bench.cost import resolve_price
from servelab.bench.endpoint import DEFAULT_STALL_TIMEOUT_S, DEFAULT_TIMEOUT_S, Api
from servelab.bench.load import LoadMode
from servelab.bench.profile import ProfilePlan
from servelab.bench.quality.results import load_quality
from servelab.bench.results import BenchSummary
from servelab.bench.session import DEFAULT_WARMUP, BenchConfig, run_bench
from servelab.bench.traces import load_replay, parse_window
from servelab.bench.trial import PROFILE_DIR, bench_engine
from servelab.bench.workload import (
    DEFAULT_FIXED_PROMPT,
    DEFAULT_INPUT_LEN,
    WorkloadSpec,
    parse_dataset,
)
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
    parse_extra_body,
    parse_headers,
    parse_url,
)
from servelab.cli.progress import SweepView
from servelab.cli.quality_options import QualityOptions
from servelab.cli.quality_table import quality_lines, render_quality
from servelab.cli.shared_options import SharedOptions
from servelab.core.errors import ConfigError, ServelabError
from servelab.core.units import parse_duration_s, parse_number_list, parse_slos
from servelab.diagnose import DiagnoseOptions, diagnose_run
from servelab.diagnose.check import parse_applies
from servelab.engines.spec import load_spec
from servelab.report.cost import cost_lines, slo_rule
from servelab.report.diagnosis import render_diagnosis, top_finding_lines
from servelab.report.tables import render_sweep

__all__ = ["bench", "print_failures", "print_quality"]


# `servelab run` has options of these names that differ on purpose; cli/run.py says how.
@with_option_groups
def bench(
    *,
    url: Annotated[
        str | None,
        typer.Option(help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000."),
    ] = None,
    engine_log: EngineLogOptions,
    engine: EngineSpecPath = None,
    api: Annotated[Api, typer.Option(help="Which API to drive.")] = Api.CHAT,
    model: Annotated[
        str | None, typer.Option(help="Served model name. Default: the first of /v1/models.")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="SERVELAB_API_KEY", help="Sent as 'Authorization: Bearer KEY'."),
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="Extra header 'Name: value'; repeatable.")
    ] = None,
    stream: Annotated[
        bool, typer.Option(help="Stream responses. --no-stream measures E2E latency only.")
    ] = True,
    concurrency: Annotated[
        str | None,
        typer.Option(help="Closed loop: requests kept in flight; a list sweeps, e.g. 1,8,32,128."),
    ] = None,
    request_rate: Annotated[
        str | None,
        typer.Option(help="Open loop: arrivals per second (Poisson); a list sweeps, e.g. 2,4,8."),
    ] = None,
    burstiness: Annotated[
        float, typer.Option(help="Open loop: gamma shape of inter-arrival times; 1 is Poisson.")
    ] = 1.0,
    num_requests: NumRequests = None,
    duration: Duration = None,
    warmup: Annotated[
        int, typer.Option(help="Warm-up requests before each level, excluded from results.")
    ] = DEFAULT_WARMUP,
    dataset: Annotated[
        str,
        typer.Option(
            help="random, fixed (one prompt: the single-stream test), conversation (sessions"
            " of --turns user turns of --input-len tokens, each resending the history with the"
            " server's replies; --shared-prefix-len is the system prompt every session opens"
            " with), sharegpt:PATH (its first turns; with --multi-turn its whole conversations),"
            " or trace:PATH: a Mooncake JSONL or BurstGPT CSV trace (told apart by content) sent"
            " at its timestamps as one open-loop level; Mooncake's equal hash_ids become"
            " equal text, so its shared prefixes are real."
        ),
    ] = "random",
    multi_turn: Annotated[
        bool,
        typer.Option(
            "--multi-turn",
            help="sharegpt: send each conversation's turns in order as one session, the"
            " history resent with the server's own replies.",
        ),
    ] = False,
    turns: Annotated[
        str,
        typer.Option(
            help="conversation: user turns per session, a number or a range drawn uniformly"
            " (2-6); sharegpt --multi-turn: at most the range's upper end of each conversation."
        ),
    ] = "4",
    think_time: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="conversations: the mean wait between a reply and the next turn (exponential,"
            " seeded), e.g. 2s. Default: none. A session holds its slot while it thinks.",
        ),
    ] = None,
    trace_speed: Annotated[
        float,
        typer.Option(
            help="trace: replay this many times faster than recorded (the gaps between"
            " arrivals divided by it): 2 takes half the trace's time, 0.5 twice as long."
        ),
    ] = 1.0,
    trace_window: Annotated[
        str | None,
        typer.Option(
            metavar="START:END",
            help="trace: replay only the requests arriving in [START, END) on the trace's own"
            " clock (its timestamps: ms in Mooncake, s in BurstGPT), each side a time with its"
            " unit or empty, e.g. 10m:20m, 0:90s or :300s. The window's first request is sent"
            " at once. Default: the whole trace.",
        ),
    ] = None,
    input_len: InputLen = DEFAULT_INPUT_LEN,
    output_len: Annotated[
        int | None,
        typer.Option(
            help="Output tokens (max_tokens). Default: random 128, fixed 512, sharegpt: reply,"
            " trace: the trace's."
        ),
    ] = None,
    range_ratio: Annotated[
        float, typer.Option(help="random: lengths uniform in \\[r*L, L]; 1.0 is exact.")
    ] = 1.0,
    shared_prefix_len: Annotated[
        int, typer.Option(help="random: tokens of a prefix every prompt shares.")
    ] = 0,
    seed: Annotated[int, typer.Option(help="Seed of prompts, lengths and arrivals.")] = 0,
    prompt: Annotated[str, typer.Option(help="fixed: the prompt.")] = DEFAULT_FIXED_PROMPT,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="tokenizer.json (or its folder) for exact input lengths and output counts."
        ),
    ] = None,
    timeout: Annotated[
        str, typer.Option(help="Whole-request timeout, e.g. 600s.")
    ] = f"{DEFAULT_TIMEOUT_S:g}s",
    stall_timeout: Annotated[
        str, typer.Option(help="Fail a request when no byte arrives for this long, e.g. 60s.")
    ] = f"{DEFAULT_STALL_TIMEOUT_S:g}s",
    slo: Annotated[
        str | None, typer.Option(help="SLOs for goodput, e.g. ttft=200ms,tpot=50ms,e2e=10s.")
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            help="Client processes. Default: one per 256 streams or 64 req/s, up to one per CPU."
            " With --cluster: the total, spread evenly over the nodes (default at least one"
            " per node)."
        ),
    ] = None,
    shared: SharedOptions,
    quality: QualityOptions,
    extra_body: Annotated[
        str | None, typer.Option(help="JSON object merged into every request body.")
    ] = None,
    metrics: ScrapeMetrics = True,
    torch_profile: Annotated[
        float | None,
        typer.Option(
            help="With --engine (vllm, sglang): launch it with its torch profiler on and profile"
            " a few seconds of this level (a concurrency or rate of the sweep); the traces go"
            " to RUN/profile/, their summary to trace_summary.json (see `servelab trace`)."
        ),
    ] = None,
    applies: AppliesFinding = None,
    out: OutDir = None,
    name: Annotated[str | None, typer.Option(help="Run name. Default: from the URL.")] = None,
    json_output: JsonOutput = False,
) -> None:
    """Drive an endpoint with a faithful load and measure TTFT, TPOT, ITL and throughput.

    Exit codes: 0 all requests succeeded; 3 some failed; 4 none succeeded or the endpoint is
    unreachable; 2 bad options; 130 interrupted (partial results kept).
    """
    out_console = Console()
    err = Console(stderr=True)
    with handle_errors(err):
        if (url is None) == (engine is None):
            raise ConfigError("give --url (an endpoint) or --engine (a spec to launch), one")
        spec = load_spec(engine) if engine is not None else None
        if concurrency and request_rate:
            raise ConfigError("give --concurrency or --request-rate, not both")
        if num_requests is not None and duration is not None:
            raise ConfigError("give --num-requests or --duration, not both")
        check_range("--trace-speed", trace_speed, low=0, low_inclusive=False)
        dataset_name, dataset_path = parse_dataset(dataset)
        replay = None
        if dataset_name == "trace" and dataset_path is not None:
            _refuse_with_a_trace(
                concurrency=concurrency is not None,
                request_rate=request_rate is not None,
                num_requests=num_requests is not None,
                duration=duration is not None,
                burstiness=burstiness != 1.0,
                input_len=input_len != DEFAULT_INPUT_LEN,
                output_len=output_len is not None,
                range_ratio=range_ratio != 1.0,
                shared_prefix_len=shared_prefix_len != 0,
            )
            window = parse_window(trace_window) if trace_window is not None else (None, None)
            replay = load_replay(dataset_path, speed=trace_speed, window=window)
        elif trace_speed != 1.0 or trace_window is not None:
            raise ConfigError("--trace-speed and --trace-window apply to --dataset trace:PATH")
        mode, levels = (
            _load(concurrency, request_rate)
            if replay is None
            else (LoadMode.REQUEST_RATE, [replay.rate])
        )
        if torch_profile is not None and spec is None:
            raise ConfigError("--torch-profile needs --engine: the profiler is turned on at launch")
        if torch_profile is not None and not any(
            math.isclose(torch_profile, level) for level in levels
        ):
            raise ConfigError(f"--torch-profile {torch_profile:g} is not a level of this sweep")
        check_range("--burstiness", burstiness, low=0, low_inclusive=False)
        check_range("--num-requests", num_requests, low=1)
        check_range("--warmup", warmup, low=0)
        check_range("--input-len", input_len, low=1)
        check_range("--output-len", output_len, low=1)
        check_range("--range-ratio", range_ratio, low=0, high=1, low_inclusive=False)
        check_range("--shared-prefix-len", shared_prefix_len, low=0)
        check_range("--workers", workers, low=1)
        cluster_at = shared.cluster_spec(workers=workers)
        conversation = _conversation(dataset_name, multi_turn, turns, think_time)
        if conversation is not None and mode is not LoadMode.CONCURRENCY:
            raise ConfigError(
                "conversations run in a closed loop: a session is the unit of concurrency",
                hint="give --concurrency",
            )
        workload = WorkloadSpec(
            dataset=dataset_name,
            path=dataset_path,
            input_len=input_len,
            output_len=output_len,
            range_ratio=range_ratio,
            shared_prefix_len=shared_prefix_len,
            seed=seed,
            prompt=prompt,
            replay=replay,
            conversation=conversation,
        )
        if tokenizer is not None:
            from servelab.bench.tokens import check_tokenizer

            check_tokenizer(tokenizer)
        base_url = parse_url(url or "http://127.0.0.1")
        gpus = shared.telemetry_gpus()
        quality_plan = quality.plan()
        given = shared.price("servelab bench")
        price = resolve_price(given, spec=spec, gpus=gpus) if given is not None else None
        config = BenchConfig(
            url=base_url,
            api=api,
            model=model,
            stream=stream,
            headers=parse_headers(header or [], api_key),
            mode=mode,
            levels=levels,
            num_requests=num_requests,
            duration_s=parse_duration_s(duration, what="--duration") if duration else None,
            warmup=warmup,
            burstiness=burstiness,
            workload=workload,
            tokenizer=tokenizer,
            timeout_s=parse_duration_s(timeout, what="--timeout"),
            stall_timeout_s=parse_duration_s(stall_timeout, what="--stall-timeout"),
            slo_ms=parse_slos(slo) if slo else None,
            workers=workers,
            cluster=cluster_at,
            extra_body=parse_extra_body(extra_body),
            name=name,
            out=out,
            runs_root=shared.runs_dir,
            command=["servelab", *sys.argv[1:]],
            applies=parse_applies(applies).label if applies is not None else None,
            gpus=gpus,
            metrics_url=base_url if metrics else None,
            torch_profile=(
                ProfilePlan(level=torch_profile, folder=Path(PROFILE_DIR))
                if torch_profile is not None
                else None
            ),
            price=price,
            quality=quality_plan,
        )
        attached = attached_log(engine_log.engine_log, engine_log.engine, url=url)
        with SweepView(err) as view:
            if spec is not None:
                outcome = bench_engine(spec, config, metrics=metrics, on_event=view)
            elif attached is not None:
                outcome = bench_attached(config, attached, on_event=view)
            else:
                outcome = run_bench(config, on_event=view)
        summary = outcome.summary
        if json_output:
            out_console.print_json(summary.model_dump_json(by_alias=True))
        else:
            out_console.print(render_sweep(summary.levels))
            for line in cost_lines(summary, meets=slo_rule(summary)):
                out_console.print(escape(line), highlight=False, soft_wrap=True)
            print_quality(out_console, outcome.run_dir)
        print_failures(err, summary)
        err.print(f"results: {escape(str(outcome.run_dir))}", highlight=False)
        if spec is not None:
            _diagnose(outcome.run_dir, err, show=not json_output)
        completed = sum(s.completed or 0 for s in summary.levels)
        failed = sum(s.failed or 0 for s in summary.levels)
        raise typer.Exit(int(exit_for_levels(completed, failed)))


def _diagnose(run_dir: Path, err: Console, *, show: bool) -> None:
    """A launched engine's sweep is diagnosed at once: diagnosis.json, and its top finding."""
    try:
        diagnosis = diagnose_run(run_dir, DiagnoseOptions(), write=True)
    except ServelabError as exc:
        err.print(escape(f"not diagnosed: {exc}"), highlight=False, soft_wrap=True)
        return
    if show:
        err.print(render_diagnosis(diagnosis))
    for line in top_finding_lines(diagnosis):
        err.print(escape(line), highlight=False, soft_wrap=True)


def print_failures(err: Console, summary: BenchSummary) -> None:
    """One line per kind of failure, with its first message."""
    counts: dict[str, int] = {}
    examples: dict[str, str] = {}
    for level in summary.levels:
        for kind, n in level.errors.items():
            counts[kind] = counts.get(kind, 0) + n
            examples.setdefault(kind, level.error_examples.get(kind, ""))
    for kind, n in sorted(counts.items()):
        err.print(
            escape(f"{n} request{'s' if n > 1 else ''} failed ({kind}): {examples[kind]}"),
            highlight=False,
        )


def print_quality(console: Console, run_dir: Path) -> None:
    """The Quality table and its lines, where the run probed quality."""
    result = load_quality(run_dir)
    if result is None:
        return
    console.print(render_quality(result))
    for line in quality_lines(result):
        console.print(escape(line), highlight=False, soft_wrap=True)


def _conversation(
    dataset: str, multi_turn: bool, turns: str, think_time: str | None
) -> ConversationSpec | None:
    """The sessions' shape for a conversation workload; None for one-request workloads."""
    if multi_turn and dataset != "sharegpt":
        raise ConfigError("--multi-turn applies to --dataset sharegpt:PATH")
    if dataset != "conversation" and not multi_turn:
        if turns != "4" or think_time is not None:
            raise ConfigError("--turns and --think-time apply to conversations")
        return None
    think = parse_duration_s(think_time, what="--think-time") if think_time else 0.0
    return ConversationSpec(turns=parse_turns(turns), think_time_s=think)


def _refuse_with_a_trace(**given: bool) -> None:
    """A trace sets the load and the lengths: the options that would set them too are refused."""
    named = [f"--{name.replace('_', '-')}" for name, on in given.items() if on]
    if named:
        listed = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)
        verb = "does" if len(named) == 1 else "do"
        raise ConfigError(
            f"{listed} {verb} not apply to a trace replay",
            hint="its timestamps set the load, one open-loop level chosen with --trace-window"
            " and --trace-speed, and its lengths set the requests'",
        )


def _load(concurrency: str | None, request_rate: str | None) -> tuple[LoadMode, list[float]]:
    """Open loop at the given rates, else closed loop at the given concurrencies (1 alone)."""
    if request_rate:
        return LoadMode.REQUEST_RATE, parse_number_list(
            request_rate, what="--request-rate", integer=False
        )
    return LoadMode.CONCURRENCY, parse_number_list(
        concurrency or "1", what="--concurrency", integer=True
    )
