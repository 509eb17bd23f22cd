"""`servelab tune kernels`: the fused-MoE config file an engine needs, whether its folder has
it, and (with --run) the engine's own tuner to make it, kept only if an A/B run is faster.
"""

from __future__ import annotations

import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table

from servelab.bench.session import BenchConfig
from servelab.bench.workload import WorkloadSpec
from servelab.cli.exit_codes import ExitCode, handle_errors
from servelab.cli.options import NumRequests, RunsDir, check_range
from servelab.cli.progress import SweepView
from servelab.core.errors import ConfigError, EngineSetupError
from servelab.core.units import parse_duration_s, parse_number_list
from servelab.engines.spec import load_spec
from servelab.store.rundir import DEFAULT_RUNS_DIR
from servelab.tune.kernels import (
    AUTO_DTYPE,
    EngineInstall,
    KernelPlan,
    KernelTuneResult,
    engine_python,
    find_install,
    kernel_engine,
    plan_kernels,
    probe_gpu_name,
    tune_kernels,
)

__all__ = ["kernels"]

_STATUS_TEXT = {
    "present": "[green]present[/]: the engine loads it",
    "fallback": "[yellow]another Triton version's[/]: the engine falls back to it, with a warning",
    "missing": "[red]missing[/]: the engine runs default tiles",
    "unchecked": "[dim]not checked[/]",
}


def kernels(
    engine: Annotated[
        Path,
        typer.Option(
            "--engine", help="The engine spec (YAML): vllm or sglang, its model, layout, env."
        ),
    ],
    gpu_name: Annotated[
        str | None,
        typer.Option(
            help='The GPU as CUDA names it, e.g. "NVIDIA H200". Default: this machine\'s first '
            "GPU (NVML)."
        ),
    ] = None,
    dtype: Annotated[
        str,
        typer.Option(
            help="auto (from the checkpoint's quantization), bf16, or the engine's MoE dtype: "
            "fp8_w8a8, int8_w8a16, int4_w4a16, int8_w8a8 (SGLang), fp8_w8a16 (vLLM)."
        ),
    ] = AUTO_DTYPE,
    block_shape: Annotated[
        str | None,
        typer.Option(help="Block quantization N,K, e.g. 128,128. Default: the checkpoint's."),
    ] = None,
    model_config: Annotated[
        Path | None,
        typer.Option(help="The checkpoint's config.json, when the spec's model is a hub id."),
    ] = None,
    config_dir: Annotated[
        Path | None,
        typer.Option(
            help="The engine's installed configs/ folder to check (SGLang: the one holding "
            "triton_X_Y_Z/). Default: found through the engine's python."
        ),
    ] = None,
    triton_version: Annotated[
        str | None,
        typer.Option(help="SGLang: the Triton version whose folder it reads. Default: found."),
    ] = None,
    tuner: Annotated[
        Path | None,
        typer.Option(
            help="The engine's tuner script (in its source tree, not its wheel). Default: found "
            "beside a source checkout of the engine."
        ),
    ] = None,
    run: Annotated[
        bool,
        typer.Option(
            "--run",
            help="Run the tuner (on the machine that serves: it needs the engine and a GPU), "
            "then launch the engine without and with its file; keep it only if faster beyond "
            "the noise band.",
        ),
    ] = False,
    tuner_timeout: Annotated[
        str, typer.Option(help="--run: stop the tuner after this long, e.g. 6h.")
    ] = "6h",
    concurrency: Annotated[
        str, typer.Option(help="--run: the A/B runs' requests in flight; a list, e.g. 8,64.")
    ] = "16",
    num_requests: NumRequests = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="--run: folder of the tuner's output, the staged config and the A/B runs. "
            "Default: RUNS_DIR/<UTC time>-kernels-<engine>/.",
        ),
    ] = None,
    runs_dir: RunsDir = DEFAULT_RUNS_DIR,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the plan (--run: the result) as JSON.")
    ] = False,
) -> None:
    """The fused-MoE config file the engine's Triton kernel looks for (E, N, GPU, dtype,
    block shape), whether its folder has it, and the engine's tuner command to make it.

    Exit codes: 0 planned, or tuned and decided (kept or not); 2 bad options; 5 the engine or
    its tuner is missing, or the tuner failed; 130 interrupted.
    """
    out_console = Console()
    err = Console(stderr=True)
    with handle_errors(err):
        spec = load_spec(engine)
        name = kernel_engine(spec.engine)
        for option, path in (("--config-dir", config_dir), ("--model-config", model_config)):
            if path is not None and not path.exists():
                raise ConfigError(f"{option} {path} does not exist")
        if tuner is not None and not tuner.is_file():
            raise ConfigError(f"--tuner {tuner} is not a file")
        timeout_s = parse_duration_s(tuner_timeout, what="--tuner-timeout")
        levels = parse_number_list(concurrency, what="--concurrency", integer=True)
        check_range("--num-requests", num_requests, low=1)
        num_requests = _ab_requests(num_requests, [int(v) for v in levels])
        gpu = gpu_name if gpu_name is not None else probe_gpu_name()
        if gpu is None:
            raise ConfigError(
                "no NVIDIA GPU visible here to name the file after",
                hint='give --gpu-name, e.g. "NVIDIA H200"',
            )
        install = find_install(name, engine_python(spec), env=spec.env)
        plan = plan_kernels(
            spec,
            gpu_name=gpu,
            dtype=dtype,
            block_shape=_block_shape(block_shape),
            install=install,
            config_dir=config_dir,
            triton_version=triton_version,
            tuner_script=tuner,
            model_config=model_config,
        )
        if not run:
            if json_output:
                out_console.print_json(plan.model_dump_json())
            else:
                out_console.print(_render_plan(plan, install))
            raise typer.Exit(int(ExitCode.OK))
        if not install.installed:
            raise EngineSetupError(
                f"{name} is not installed here ({install.reason}): the tuner runs where the "
                "engine serves, with its GPUs"
            )
        folder = out or runs_dir / f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-kernels-{name}"
        bench = BenchConfig(
            url="http://127.0.0.1",
            levels=levels,
            num_requests=num_requests,
            workload=WorkloadSpec(),
            runs_root=runs_dir,
            command=["servelab", *sys.argv[1:]],
        )
        if not json_output:
            err.print(_render_plan(plan, install))
        with SweepView(err) as view:
            result = tune_kernels(
                plan, spec, bench, out=folder, tuner_timeout_s=timeout_s, on_event=view
            )
        if json_output:
            out_console.print_json(result.model_dump_json())
        else:
            out_console.print(_render_result(result))
        if not result.tuner.ok:
            err.print(escape(f"error: {result.reason} (log: {result.tuner.log})"), highlight=False)
            raise typer.Exit(int(ExitCode.ENGINE_FAILED))
        raise typer.Exit(int(ExitCode.OK))


def _block_shape(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    values = parse_number_list(text, what="--block-shape", integer=True)
    if len(values) != 2:
        raise ConfigError(f"--block-shape {text!r} is not two sizes N,K", hint="e.g. 128,128")
    return int(values[0]), int(values[1])


def _render_plan(plan: KernelPlan, install: EngineInstall) -> Group:
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    layout = f"tp {plan.tp}, ep {plan.ep}, dp {plan.dp}"
    table.add_row("engine", escape(f"{plan.engine} ({layout})"))
    table.add_row("model", escape(f"{plan.model} ({plan.family})"))
    fused = f", {plan.fused_shared_experts} fused shared" if plan.fused_shared_experts else ""
    table.add_row("E", f"{plan.experts} experts per GPU{fused}")
    table.add_row("N", f"{plan.n} expert intermediate size per GPU")
    table.add_row("dtype", escape(plan.dtype or "16-bit (no dtype field)"))
    if plan.block_shape:
        table.add_row("block shape", f"{plan.block_shape[0]}, {plan.block_shape[1]}")
    table.add_row("GPU", escape(f"{plan.gpu_name} -> {plan.device_name}"))
    table.add_row("file", f"[bold]{escape(plan.file_name)}[/]")
    status = _STATUS_TEXT[plan.status]
    if plan.status == "unchecked":
        why = install.reason or "Triton version unknown (--triton-version)"
        status += escape(f": {why}; give --config-dir")
    table.add_row("in its folder", status)
    for path in plan.searched:
        table.add_row("", escape(f"{'found ' if path == plan.found else 'tried '}{path}"))
    if plan.found and plan.found not in plan.searched:
        table.add_row("", escape(f"found {plan.found}"))
    folder = f"{plan.user_folder_env}={plan.user_folder}" if plan.user_folder else "not set"
    table.add_row("user folder", escape(f"{plan.user_folder_env} ({folder})"))
    table.add_row("log signature", escape(f"{plan.missing_signature} ({plan.signature_name})"))
    if plan.tuner is not None:
        argv = (
            plan.tuner.argv_in(Path("DIR"))
            if plan.tuner.writes_to == "save_dir"
            else plan.tuner.argv
        )
        where = "" if plan.tuner.script_found else " [dim](script not found: --tuner PATH)[/]"
        table.add_row("tuner", escape(shlex.join(argv)) + where)
    else:
        table.add_row("tuner", escape(f"none: {plan.tuner_unavailable}"))
    for note in plan.notes:
        table.add_row("note", escape(note))
    return Group(table)


def _render_result(result: KernelTuneResult) -> Group:
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    tuner = result.tuner
    table.add_row(
        "tuner", escape(f"{tuner.status} after {tuner.elapsed_s:.0f} s (log {tuner.log})")
    )
    parts: list[Table] = [table]
    if result.ab is not None:
        levels = Table("load", "A tok/s", "B tok/s", "B / A", "noise band", "verdict", box=None)
        for level in result.ab.decision.levels:
            band = (
                f"{level.band_lo:.3f}-{level.band_hi:.3f}"
                if level.band_lo is not None and level.band_hi is not None
                else "n/a"
            )
            levels.add_row(
                level.load,
                f"{level.a_total_tok_s:.1f}",
                f"{level.b_total_tok_s:.1f}",
                f"{level.ratio:.3f}",
                band,
                escape(level.reason if not level.passed else "faster"),
            )
        table.add_row("A (without)", escape(result.ab.a_run_dir))
        table.add_row("B (with)", escape(result.ab.b_run_dir))
        parts.append(levels)
    verdict = Table(box=None, show_header=False, pad_edge=False)
    verdict.add_column(style="bold")
    verdict.add_column(overflow="fold")
    if result.kept:
        verdict.add_row("[green]kept[/]", escape(result.reason))
        for key, value in result.env.items():
            verdict.add_row("add to env", escape(f"{key}: {value}"))
    else:
        verdict.add_row("[yellow]not kept[/]", escape(result.reason))
    parts.append(verdict)
    return Group(*parts)


AB_BLOCKS = 8
"""Blocks of requests per A/B level by default: the noise band needs MIN_BLOCKS of them."""


def _ab_requests(given: int | None, levels: list[int]) -> int:
    """--num-requests for the A/B runs: by default AB_BLOCKS blocks of the highest
    concurrency; one giving the noise band too few blocks is refused (no band, no keep)."""
    from servelab.bench.noise import MIN_BLOCKS

    top = max(levels)
    if given is None:
        return AB_BLOCKS * top
    if given < MIN_BLOCKS * top:
        raise ConfigError(
            f"--num-requests {given} at concurrency {top} is {-(-given // top)} blocks of "
            f"requests: too few for a noise band ({MIN_BLOCKS} blocks)",
            hint=f"give --num-requests {MIN_BLOCKS * top} or more, or leave it out",
        )
    return given
