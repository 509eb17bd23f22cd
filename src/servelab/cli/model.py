"""`servelab model`: the analytic ceilings of a model on some GPUs, and where the time goes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from servelab.cli.exit_codes import handle_errors
from servelab.cli.options import check_range
from servelab.model.analysis import analyze
from servelab.model.calibration import Calibration, calibration_from_probe
from servelab.model.deployment import DEFAULT_MEM_FRACTION, DEFAULT_STEP_OVERHEAD_US
from servelab.model.layout import parse_layout
from servelab.model.perf import deploy
from servelab.model.results import ModelComparison, ModelReport
from servelab.report import render_model_comparison, render_model_report

__all__ = ["model"]

_TEXT_WIDTH = 120
DEFAULT_INPUT_LEN = 1024
DEFAULT_OUTPUT_LEN = 256


def model(
    model_name: Annotated[
        str,
        typer.Option(
            "--model",
            help="A preset (glm-5-nvfp4, deepseek-v3, qwen3-30b-a3b, llama-3.1-8b, "
            "llama-3.1-70b, h200-ref) or a path to a Hugging Face config.json.",
        ),
    ],
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help="GPU slug: h100, h200, b200, rtx-pro-6000, l40s, a100, rtx-5090. "
            "Default: the preset's typical deployment.",
        ),
    ] = None,
    gpus: Annotated[
        int | None,
        typer.Option("--gpus", help="GPU count. Default: tp x pp x dp, or the preset's."),
    ] = None,
    tp: Annotated[
        int | None, typer.Option("--tp", help="Tensor parallelism. Default: GPUs / (pp x dp).")
    ] = None,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline stages.")] = 1,
    ep: Annotated[
        int, typer.Option("--ep", help="Expert parallelism, within a stage's tp x dp GPUs.")
    ] = 1,
    dp: Annotated[int, typer.Option("--dp", help="Data-parallel replicas.")] = 1,
    weights: Annotated[
        str | None,
        typer.Option(
            "--weights",
            help="Weight format: bf16, fp8, nvfp4 (4-bit + fp8 scale per 16), int4 (group "
            "128). Default: the preset's or the checkpoint's, else bf16.",
        ),
    ] = None,
    attention_weights: Annotated[
        str | None,
        typer.Option(
            "--attention-weights",
            help="Attention's format; by default bf16 under nvfp4/int4, else the same as "
            "--weights.",
        ),
    ] = None,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="KV cache: bf16 or fp8.")] = "bf16",
    kernels: Annotated[
        str | None,
        typer.Option(
            "--kernels",
            help="Whose kernels the kernel floor counts: fused (SGLang, vLLM) or unfused "
            "(transformers, op by op). Default: the preset's (h200-ref: unfused), else fused.",
        ),
    ] = None,
    batch: Annotated[
        int, typer.Option("--batch", help="Requests decoding together in the step shown.")
    ] = 1,
    context: Annotated[
        int | None,
        typer.Option(
            "--context",
            help="Tokens cached per request in that step. Default: input + output / 2.",
        ),
    ] = None,
    input_len: Annotated[
        int, typer.Option("--input-len", help="Prompt tokens per request.")
    ] = DEFAULT_INPUT_LEN,
    output_len: Annotated[
        int, typer.Option("--output-len", help="Generated tokens per request.")
    ] = DEFAULT_OUTPUT_LEN,
    step_overhead_us: Annotated[
        float,
        typer.Option(
            "--step-overhead-us",
            help="Engine time per decode step outside the kernels: CUDA-graph replay, "
            "sampling, scheduler (see docs/MODEL.md).",
        ),
    ] = DEFAULT_STEP_OVERHEAD_US,
    mem_fraction: Annotated[
        float,
        typer.Option("--mem-fraction", help="Share of GPU memory for weights and KV cache."),
    ] = DEFAULT_MEM_FRACTION,
    calibrate: Annotated[
        Path | None,
        typer.Option(
            "--calibrate",
            help="A `servelab probe --comm` probe.json: its measured memory bandwidth, "
            "matmul rates, link, all-reduce and kernel launch figures replace the "
            "datasheet's.",
        ),
    ] = None,
    compare: Annotated[
        list[str] | None,
        typer.Option(
            "--compare",
            help="A layout to put side by side, e.g. tp=8 or tp=4,pp=2 (repeat the option).",
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as one JSON document on stdout.")
    ] = False,
) -> None:
    """The ceilings of a model on some GPUs in a layout, and where a decode step's time goes.

    Weight bytes per GPU, KV bytes per token and the KV capacity, the single-stream tok/s
    ceiling beside its kernel floor (kernels per step x per-kernel latency, with CUDA
    graphs and eager), the prefill time, one decode step broken down (memory, compute,
    communication, overhead) and throughput by concurrency up to the KV limit. An upper
    bound: a real engine sits below it, and the gap is the point.
    """
    out = Console() if sys.stdout.isatty() else Console(width=_TEXT_WIDTH)
    err = Console(stderr=True)
    with handle_errors(err):
        check_range("--batch", batch, low=1)
        for flag, size in (("--tp", tp), ("--pp", pp), ("--ep", ep), ("--dp", dp)):
            check_range(flag, size, low=1)
        check_range("--context", context, low=0)
        check_range("--input-len", input_len, low=0)
        check_range("--output-len", output_len, low=1)
        calibration = calibration_from_probe(calibrate) if calibrate is not None else None
        given = {"pp": pp, "ep": ep, "dp": dp} | ({} if tp is None else {"tp": tp})
        layouts = [parse_layout(spec) for spec in compare or ()] or [given]
        reports = [
            _report(
                model_name,
                layout,
                gpu=gpu,
                gpus=gpus,
                weights=weights,
                attention_weights=attention_weights,
                kv_dtype=kv_dtype,
                kernels=kernels,
                step_overhead_us=step_overhead_us,
                mem_fraction=mem_fraction,
                calibration=calibration,
                batch=batch,
                context=context,
                input_len=input_len,
                output_len=output_len,
            )
            for layout in layouts
        ]
        if compare:
            comparison = ModelComparison(reports=reports)
            if json_output:
                out.print_json(comparison.model_dump_json(by_alias=True))
            else:
                out.print(render_model_comparison(comparison))
        elif json_output:
            out.print_json(reports[0].model_dump_json(by_alias=True))
        else:
            out.print(render_model_report(reports[0]))


def _report(
    model_name: str,
    layout: dict[str, int],
    *,
    gpu: str | None,
    gpus: int | None,
    weights: str | None,
    attention_weights: str | None,
    kv_dtype: str,
    kernels: str | None,
    step_overhead_us: float,
    mem_fraction: float,
    calibration: Calibration | None,
    batch: int,
    context: int | None,
    input_len: int,
    output_len: int,
) -> ModelReport:
    dep = deploy(
        model_name,
        gpu=gpu,
        gpus=gpus,
        weights=weights,
        attention_weights=attention_weights,
        kv_dtype=kv_dtype,
        kernels=kernels,
        step_overhead_us=step_overhead_us,
        mem_fraction=mem_fraction,
        calibration=calibration,
        tp=layout.get("tp"),
        pp=layout.get("pp", 1),
        ep=layout.get("ep", 1),
        dp=layout.get("dp", 1),
    )
    return analyze(
        dep, batch=batch, context_tokens=context, input_len=input_len, output_len=output_len
    )
