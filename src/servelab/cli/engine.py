"""`servelab engine check|up|down|logs|list|scan`: launch, watch and stop a serving engine,
and read the log of one that has finished.

A spec comes from a YAML file, from options, or from both (options win; --env and
--knob merge into the file's, --extra-args append). `check` starts nothing; `up`
leaves the engine running after it returns, recorded in the state file
(`$SERVELAB_STATE`, else `$XDG_STATE_HOME/servelab`, else `~/.local/state/servelab`).
`scan` reads a log or a saved /metrics page, wherever it came from.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servelab.cli.engine_log_options import LogEngine
from servelab.cli.exit_codes import handle_errors
from servelab.cli.option_groups import with_option_groups
from servelab.cli.options import check_range
from servelab.cli.spec_options import SpecOptions
from servelab.core.errors import ConfigError
from servelab.core.units import parse_duration_s, parse_number_list
from servelab.engines.base import EngineSpec
from servelab.engines.embedded.cache import EMBEDDED_CPU_MAX_CONCURRENCY

if TYPE_CHECKING:
    from servelab.engines.check import CacheCheck, SpecCheck
    from servelab.engines.logscan import EngineLogScan

__all__ = ["engine_app"]

engine_app = typer.Typer(
    name="engine",
    help="Launch, watch and stop a serving engine (SGLang, vLLM, transformers, sim) from a spec;"
    " read a finished engine's log.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

StartupTimeout = Annotated[
    str | None,
    typer.Option("--startup-timeout", help="How long the engine may take to be ready: 10m, 90s."),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


@engine_app.command("check")
@with_option_groups
def check(
    *,
    spec_options: SpecOptions,
    recorded: Annotated[
        bool,
        typer.Option(help="Check against the recorded flag list even when the engine is here."),
    ] = False,
    probe: Annotated[
        Path | None,
        typer.Option(
            "--probe",
            help="A `servelab probe` probe.json of the machine the engine will run on "
            "(--comm adds measured copies and the model's calibration). Default: this "
            "machine's facts, read now, with the NCCL variables of this shell.",
        ),
    ] = None,
    no_machine: Annotated[
        bool, typer.Option("--no-machine", help="Do not read the settings against a machine.")
    ] = False,
    input_len: Annotated[
        int | None,
        typer.Option(
            help="Prompt tokens of the load: the KV cache servelab sizes (the embedded engine "
            "on the CPU) must hold one such request with --output-len."
        ),
    ] = None,
    output_len: Annotated[
        int | None, typer.Option(help="Output tokens of the load (with --input-len).")
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            help="Concurrency levels of the load, as `servelab run --concurrency` (1,4,16) or "
            "its --max-concurrency (64): a cache servelab sizes is sized for the largest, as "
            "run sizes it. Default: what run's auto sweep sizes for (the embedded engine on "
            f"the CPU: {EMBEDDED_CPU_MAX_CONCURRENCY}). Needs --input-len and --output-len."
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Print the exact command and environment of a spec, check every flag, and read its
    settings against the machine.

    The flags (knobs mapped to the engine's own and --extra-args alike) are checked
    against the installed engine's --help, else against the flag list recorded for a
    named version; an unknown flag gets the closest valid name. The NCCL variables
    (NCCL_P2P_LEVEL, NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, channel counts, NCCL_IB_*,
    NCCL_NVLS_ENABLE), CUDA_VISIBLE_DEVICES and the layout are read against the probe:
    each contradiction with its evidence and a fix. With --input-len and --output-len, the
    KV cache servelab sizes (the embedded engine on the CPU) is sized for that load as
    `servelab run` sizes it, unless the spec gives kv_cache_tokens, and the line says which.
    Exit code 2 when a flag is unknown, the layout cannot run there, the cache cannot hold
    one request of the load, or the spec is invalid; warnings alone exit 0. Nothing is
    started.
    """
    out, err = _out(), Console(stderr=True)
    with handle_errors(err):
        spec = spec_options.spec()
        from servelab.engines.check import check_spec

        check_range("--input-len", input_len, low=1)
        check_range("--output-len", output_len, low=1)
        if (input_len is None) != (output_len is None):
            raise ConfigError("--input-len and --output-len go together")
        if concurrency is not None and input_len is None:
            raise ConfigError(
                "--concurrency sizes the cache for a load: give its --input-len "
                "and --output-len too"
            )
        lengths = (input_len, output_len) if input_len and output_len else None
        level = None
        if concurrency is not None:
            levels = parse_number_list(concurrency, what="--concurrency", integer=True)
            level = int(max(levels))
        result = check_spec(spec, use_installed=not recorded, lengths=lengths, concurrency=level)
        if not no_machine:
            result = _against_machine(result, spec, probe)
        if json_output:
            out.print_json(result.model_dump_json(), highlight=False)
        else:
            _print_check(out, result)
        if result.unknown_flags:
            flags = ", ".join(problem.flag for problem in result.unknown_flags)
            raise ConfigError(f"{result.engine} does not accept {flags}")
        if result.machine_errors:
            raise ConfigError(f"{result.machine_errors[0].title} (per {result.machine_source})")
        if result.cache is not None and result.cache.holds_none:
            need = (result.cache.input_len or 0) + (result.cache.output_len or 0)
            raise ConfigError(
                f"the KV cache of {result.cache.tokens:,} tokens cannot hold one request of "
                f"{need:,} tokens",
                hint=f"raise knobs.kv_cache_tokens to at least {need:,}",
            )


@engine_app.command("up")
@with_option_groups
def up(
    *,
    spec_options: SpecOptions,
    startup_timeout: StartupTimeout = None,
    name: Annotated[
        str | None, typer.Option(help="Name to stop it by. Default: ENGINE-PORT.")
    ] = None,
    log: Annotated[
        Path | None, typer.Option(help="Write engine.log here. Default: in the state folder.")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Start an engine that keeps running after this command returns.

    Returns once the engine answers /health (and /v1/models); its name, pid, process
    group, URL and log are recorded in the state file. Stop it with `servelab engine
    down NAME`. Exit code 5 when the engine dies or is not ready in time; the last lines
    of its log are shown.
    """
    out, err = _out(), Console(stderr=True)
    with handle_errors(err):
        timeout_s = (
            parse_duration_s(startup_timeout, what="--startup-timeout")
            if startup_timeout is not None
            else None
        )
        spec = spec_options.spec(startup_timeout_s=timeout_s)
        from servelab.engines.detached import engine_up

        with err.status("starting", spinner="dots") as status:
            record = engine_up(
                spec, name=name, log_path=log, on_status=lambda m: status.update(escape(m))
            )
        if json_output:
            out.print_json(record.model_dump_json(), highlight=False)
            return
        out.print(f"{escape(record.name)} ready at {record.url}")
        out.print(f"  pid {record.engine_process.pid}, process group {record.pgid}")
        out.print(f"  log {escape(record.log_path)}")
        out.print(f"  stop it with: servelab engine down {escape(record.name)}")


@engine_app.command("down")
def down(
    name: Annotated[str | None, typer.Argument(help="The engine's name (see `list`).")] = None,
    all_engines: Annotated[bool, typer.Option("--all", help="Stop every recorded engine.")] = False,
    grace: Annotated[str, typer.Option(help="Time between SIGTERM and SIGKILL, e.g. 10s.")] = "10s",
) -> None:
    """Stop a detached engine: SIGTERM its process group, SIGKILL what is left, forget it."""
    out, err = _out(), Console(stderr=True)
    with handle_errors(err):
        grace_s = parse_duration_s(grace, what="--grace")
        if (name is None) == (not all_engines):
            raise ConfigError("give one engine NAME or --all")
        from servelab.engines.detached import engine_down, running_engines

        if all_engines:
            live, stale = running_engines()
            names = [record.name for record in live]
            for gone in stale:
                out.print(f"{escape(gone)} had already exited")
        else:
            assert name is not None
            names = [name]
        for each in names:
            result = engine_down(each, grace_s=grace_s)
            verb = "stopped" if result.was_running else "had already exited"
            how = " (SIGKILL was needed)" if result.killed else ""
            out.print(f"{escape(result.name)} {verb}{how}")
            out.print(f"  GPU memory: {escape(_gpu_words(result.gpu_memory_released))}", end="")
            out.print(f" ({escape(result.gpu_memory_detail)})")


@engine_app.command("logs")
def logs(
    name: Annotated[str, typer.Argument(help="The engine's name (see `list`).")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines until it exits.")
    ] = False,
    lines: Annotated[
        int | None, typer.Option("--lines", "-n", help="Only the last N lines.", min=1)
    ] = None,
) -> None:
    """Print an engine's log: each line stamped with UTC time and the monotonic clock."""
    err = Console(stderr=True)
    with handle_errors(err):
        from servelab.engines.detached import follow_log, log_path_of
        from servelab.engines.state import load_records

        path = log_path_of(name)
        if not follow:
            text = path.read_text(encoding="utf-8", errors="replace").splitlines()
            for line in text[-lines:] if lines else text:
                typer.echo(line)
            return

        def stopped() -> bool:
            record = load_records().get(name)
            return record is None or not record.running()

        shown = follow_log(path, until=stopped)
        if lines:
            skip = max(0, len(path.read_text(errors="replace").splitlines()) - lines)
            shown = (line for index, line in enumerate(shown) if index >= skip)
        for line in shown:
            typer.echo(line)


@engine_app.command("list")
def list_engines(json_output: JsonFlag = False) -> None:
    """The detached engines still running; entries of engines that exited are removed."""
    out, err = _out(), Console(stderr=True)
    with handle_errors(err):
        from servelab.engines.detached import running_engines

        live, stale = running_engines()
        if json_output:
            out.print_json(json.dumps([r.model_dump(mode="json") for r in live]), highlight=False)
            return
        for gone in stale:
            err.print(f"{escape(gone)} had exited; its entry was removed", highlight=False)
        if not live:
            out.print("no engine is running")
            return
        table = Table("name", "engine", "url", "pid", "started (UTC)", "log", box=None)
        for r in live:
            table.add_row(
                r.name, r.engine, r.url, str(r.engine_process.pid), r.started_at, r.log_path
            )
        out.print(table)


@engine_app.command("scan")
def scan(
    source: Annotated[
        str,
        typer.Argument(
            metavar="FILE|-",
            help="An engine log (plain or gzip; written by servelab's launcher, docker, "
            "kubectl or the engine itself) or a /metrics page saved with curl; - reads "
            "standard input.",
        ),
    ],
    engine: Annotated[
        LogEngine | None,
        typer.Option(
            "--engine",
            help="Whose log it is. Default: the engine whose own messages and stats lines "
            "match the most lines (a /metrics page: by its metric names); the output names "
            "the guess.",
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            metavar="PNG",
            help="Also draw the stats series (requests, KV usage, throughput, prefill "
            "tokens) over time into this PNG file.",
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Read a finished engine log, or a saved /metrics page, into events and a stats series.

    Its lines go through the readers servelab reads a launched engine's log with. Each
    known message (a default MoE config, CUDA graphs, KV capacity and limits, out of
    memory, NCCL errors, ...) is an event, shown with its count, its fields and its first
    line. The periodic stats lines (running and queued requests, KV cache usage,
    generation throughput, prefill tokens) become a series: samples, min, median and max
    per gauge, placed in time by the lines' own timestamps (ISO 8601, SGLang's, vLLM's)
    where every stats line has one, else by line order; the output says which. Exit code
    2 when the file cannot be read or nothing in it was recognised (the line says which
    engine and version it looks like); docs/ENGINE_SCAN.md describes --json.
    """
    out, err = _out(), Console(stderr=True)
    with handle_errors(err):
        from servelab.engines.logscan import scan_engine_file, scan_engine_stream
        from servelab.report.engine_scan import nothing_read, render_engine_scan

        name = engine.value if engine is not None else None
        if source == "-":
            result = scan_engine_stream(sys.stdin.buffer, source="-", engine=name)
        else:
            result = scan_engine_file(Path(source), engine=name)
        if json_output:
            out.print_json(result.model_dump_json(), highlight=False)
        if not result.recognised:
            raise ConfigError(nothing_read(result))
        if not json_output:
            out.print(render_engine_scan(result))
        if plot is not None:
            _write_scan_plot(result, plot, err)


def _write_scan_plot(result: EngineLogScan, path: Path, err: Console) -> None:
    """The PNG of the stats series; a scan with too few samples gets a note instead."""
    from servelab.report.engine_scan import engine_scan_plot
    from servelab.report.plots.render import render_png

    drawn = engine_scan_plot(result)
    if drawn.missing is not None:
        err.print(f"not plotted: {escape(drawn.missing)}", highlight=False)
        return
    try:
        path.write_bytes(render_png(drawn))
    except OSError as exc:
        raise ConfigError(f"cannot write --plot {path}: {exc.strerror}") from None
    err.print(f"plot: {escape(str(path))}", highlight=False, soft_wrap=True)


def _against_machine(result: SpecCheck, spec: EngineSpec, probe: Path | None) -> SpecCheck:
    """The check with the machine verdicts: of `probe`, else of this machine read now."""
    from servelab.engines.check import check_against_machine

    if probe is not None:
        from servelab.diagnose.inputs import read_probe

        doc = read_probe(probe)
        return check_against_machine(result, spec, doc.document, source=doc.source, inherit=False)
    from servelab.probe.collect import run_probe

    report = run_probe(cuda=False)
    if report.gpus is None or not report.gpus.gpus:
        note = "settings not read against a machine: no NVIDIA GPU here (give --probe FILE)"
        return result.model_copy(update={"notes": [*result.notes, note]})
    document = report.model_dump(mode="json", by_alias=True)
    return check_against_machine(
        result, spec, document, source="this machine (probed now)", inherit=True
    )


def _print_check(out: Console, result: SpecCheck) -> None:
    out.print(f"engine  {result.engine}")
    if result.command:
        where = "" if result.port_from_spec else " (a free port, picked anew at launch)"
        out.print(f"listen  {result.host}:{result.port}{where}")
        env = " ".join(f"{key}={shlex.quote(value)}" for key, value in result.env.items())
        out.print(f"env     {escape(env) if env else '(inherited only)'}")
        out.print("command")
        out.print(escape(" ".join(filter(None, [env, shlex.join(result.command)]))))
    for note in result.notes:
        out.print(f"note    {escape(note)}")
    if result.cache is not None:
        out.print(f"cache   {_cache_words(result.cache)}")
        out.print(f"        from {escape(result.cache.source)}")
    if result.flags_source is not None:
        if not result.unknown_flags:
            out.print(f"flags   all accepted, per {escape(result.flags_source)}")
        else:
            out.print(f"flags   checked against {escape(result.flags_source)}:")
            for problem in result.unknown_flags:
                hint = f"; did you mean {problem.suggestion}?" if problem.suggestion else ""
                out.print(f"  unknown {escape(problem.flag)}{escape(hint)}")
    if result.machine_source is None:
        return
    if not result.machine:
        out.print(f"machine nothing contradicts {escape(result.machine_source)}")
        return
    out.print(f"machine read against {escape(result.machine_source)}:")
    for verdict in result.machine:
        out.print(f"  {verdict.severity.value:<8} {escape(verdict.code)}: {escape(verdict.title)}")
        for line in verdict.evidence:
            out.print(f"           - {escape(line)}")
        out.print(f"           why: {escape(verdict.meaning)}")
        out.print(f"           fix: {escape(verdict.action)}")


def _cache_words(cache: CacheCheck) -> str:
    mib = 2**20
    words = (
        f"{cache.tokens:,} tokens ({_count(cache.blocks, 'block')}, "
        f"{cache.kv_bytes / mib:,.0f} MiB), "
        f"{cache.batch_tokens:,} batch tokens ({cache.mask_bytes / mib:,.0f} MiB of masks)"
    )
    if cache.requests_held is not None:
        size = (cache.input_len or 0) + (cache.output_len or 0)
        words += f"; holds {cache.requests_held:,} requests of {size:,} tokens"
    return words


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"


def _out() -> Console:
    """stdout; piped, Rich would cut tables at 80 columns: the paths need more."""
    return Console(soft_wrap=True, highlight=False, width=None if sys.stdout.isatty() else 200)


def _gpu_words(released: bool | None) -> str:
    if released is None:
        return "not checked"
    return "released" if released else "STILL HELD"
