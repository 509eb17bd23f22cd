"""`servelab sim`: the OpenAI-compatible simulator: fixed timing or continuous batching."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console

from servelab.cli.exit_codes import handle_errors
from servelab.cli.options import check_range
from servelab.core.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import ValidationError

    from servelab.sim import Corruption, MetricsStyle

__all__ = ["sim"]

_Choice = TypeVar("_Choice", bound=StrEnum)

LINEAR = "linear"
"""The profile the --step-* flags describe (servelab.sim.profiles.LINEAR_PROFILE)."""
MODEL = "model"
"""The profile --model describes (servelab.sim.model_profile.MODEL_PROFILE)."""


def sim(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on; 0 picks a free one.")] = 8000,
    served_name: Annotated[
        str | None,
        typer.Option(help="Model name it serves. Default: --model's, else servelab-sim."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Continuous batching timed by `servelab model` for this preset or config.json"
            " (with --gpu, --gpus, --tp, ...: the `model` profile)."
        ),
    ] = None,
    gpu: Annotated[str | None, typer.Option(help="Model profile: GPU slug, e.g. h200.")] = None,
    gpus: Annotated[int | None, typer.Option(help="Model profile: GPU count.")] = None,
    tp: Annotated[int | None, typer.Option(help="Model profile: tensor parallel size.")] = None,
    pp: Annotated[int, typer.Option(help="Model profile: pipeline parallel size.")] = 1,
    ep: Annotated[int, typer.Option(help="Model profile: expert parallel size.")] = 1,
    dp: Annotated[int, typer.Option(help="Model profile: data parallel size.")] = 1,
    weights: Annotated[
        str | None, typer.Option(help="Model profile: weight format (bf16, fp8, nvfp4, int4).")
    ] = None,
    kv_dtype: Annotated[str, typer.Option(help="Model profile: KV cache dtype.")] = "bf16",
    calibrate: Annotated[
        Path | None,
        typer.Option(
            help="Model-timed profiles (--model, glm5-rtxpro6000-tp8): a `servelab probe"
            " --comm` probe.json whose measured memory bandwidth, matmul rates, links and"
            " all-reduce replace the datasheet's, as in `servelab model --calibrate`."
        ),
    ] = None,
    time_scale: Annotated[
        float | None,
        typer.Option(
            help="Batching: run every step this many times faster (a quick what-if:"
            " throughputs scale by it, their ratios between loads do not); default 1."
        ),
    ] = None,
    ttft_ms: Annotated[
        float | None,
        typer.Option(
            help="Fixed timing: request start to the first text chunk, in ms; default 50."
        ),
    ] = None,
    itl_ms: Annotated[
        float | None,
        typer.Option(help="Fixed timing: between consecutive text chunks, in ms; default 20."),
    ] = None,
    max_running_requests: Annotated[
        int | None,
        typer.Option(help="Requests generating at once; the rest queue in arrival order."),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            help="Continuous batching with this step-cost profile: `linear` (the --step-*"
            " flags), `model` (--model ...), or `glm5-rtxpro6000-tp8` (DESIGN.md's story:"
            " GLM-5 NVFP4 on 8 RTX PRO 6000, TP8, running requests capped at 64). Without"
            " one, timing is fixed."
        ),
    ] = None,
    step_base_ms: Annotated[
        float | None, typer.Option(help="Linear profile: every step, in ms; default 10.")
    ] = None,
    step_per_seq_ms: Annotated[
        float | None,
        typer.Option(help="Linear profile: per decoding request in a step, in ms; default 0.05."),
    ] = None,
    prefill_per_token_ms: Annotated[
        float | None,
        typer.Option(help="Linear profile: per prompt token prefilled, in ms; default 0.02."),
    ] = None,
    step_per_context_token_ms: Annotated[
        float | None,
        typer.Option(
            help="Linear profile: per context token of the decoding requests, in ms; default 0."
        ),
    ] = None,
    kv_capacity_tokens: Annotated[
        int | None,
        typer.Option(help="Batching: KV cache size in tokens; default the profile's, or none."),
    ] = None,
    chunked_prefill_size: Annotated[
        int | None,
        typer.Option(help="Batching: prompt tokens prefilled per step; default 8192, SGLang's."),
    ] = None,
    step_overhead_ms: Annotated[
        float | None,
        typer.Option(help="Batching: added to every step (scheduling, launch), in ms; default 0."),
    ] = None,
    prefix_cache: Annotated[
        bool,
        typer.Option(
            help="Reuse the KV of shared prompt prefixes, in whole blocks (in batching a hit"
            " skips their prefill); on by default, as in vLLM v1 and SGLang. Counted at"
            " /metrics as vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total"
            " (prompt tokens looked up and hit), or sglang:cache_hit_rate,"
            " sglang:cached_tokens_total and sglang:realtime_tokens_total."
        ),
    ] = True,
    block_size: Annotated[
        int | None,
        typer.Option(
            help="Prefix cache: tokens per block; only full blocks are cached and hit, and"
            " never a prompt's last token; default 16, vLLM's on GPUs."
        ),
    ] = None,
    cache_report: Annotated[
        bool,
        typer.Option(
            help="Report each request's cached prompt tokens in"
            " usage.prompt_tokens_details.cached_tokens, as vLLM's"
            " --enable-prompt-tokens-details and SGLang's --enable-cache-report do (off by"
            " default there too)."
        ),
    ] = False,
    metrics_style: Annotated[
        str, typer.Option(help="Names of the metrics at GET /metrics: sglang or vllm.")
    ] = "sglang",
    tokens_per_chunk: Annotated[int, typer.Option(help="Tokens carried by each chunk.")] = 1,
    reasoning_tokens: Annotated[
        int, typer.Option(help="Chat: the first N tokens go out as reasoning_content.")
    ] = 0,
    usage: Annotated[
        bool, typer.Option(help="Send usage (prompt and completion tokens) at the end.")
    ] = True,
    role_chunk: Annotated[
        bool, typer.Option(help="Chat: open each stream with a role-only chunk.")
    ] = True,
    reject_field: Annotated[
        list[str] | None,
        typer.Option(help="Answer 422 to requests carrying this field; repeatable."),
    ] = None,
    fail_rate: Annotated[float, typer.Option(help="Fraction of requests answered 500.")] = 0.0,
    drop_rate: Annotated[
        float, typer.Option(help="Fraction of streams whose connection is cut mid-way.")
    ] = 0.0,
    malformed_rate: Annotated[
        float, typer.Option(help="Fraction of streams that carry a broken event.")
    ] = 0.0,
    stall_rate: Annotated[
        float, typer.Option(help="Fraction of streams that stop sending but stay open.")
    ] = 0.0,
    corrupt: Annotated[
        str,
        typer.Option(
            metavar="KIND",
            help="Plant corruption in answers, for quality probes: nan-logprobs (NaN"
            " logprobs: null in streams, HTTP 500 non-streamed, as vLLM), wrong-token (the"
            " runner-up instead of the greedy token), reasoning-only (chat: all of it in"
            " reasoning_content, content empty), no-finish-reason, usage-overcount"
            " (completion_tokens twice those sent); none by default. Planted, every request"
            " gets the greedy text that logprob requests get.",
        ),
    ] = "none",
    corrupt_rate: Annotated[
        float, typer.Option(help="Fraction of requests --corrupt hits (seeded); default all.")
    ] = 1.0,
    corrupt_after_tokens: Annotated[
        int,
        typer.Option(
            help="wrong-token and nan-logprobs: output tokens left intact before the"
            " corruption strikes; default 0."
        ),
    ] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the fault and corruption draws.")] = 0,
    record: Annotated[
        Path | None,
        typer.Option(help="Write the server's own timestamps of every request here (JSONL)."),
    ] = None,
    workers: Annotated[
        int, typer.Option(help="Fixed timing: processes sharing the port (SO_REUSEPORT).")
    ] = 1,
    twin: Annotated[
        Path | None,
        typer.Option(
            metavar="RUN",
            help="Serve the engine fitted from a run (its twin.json, written by `servelab"
            " diagnose RUN`): its step cost, request overhead, admission policy and limits;"
            " --max-running-requests, --kv-capacity-tokens and --chunked-prefill-size"
            " given here replace the run's, to try other limits.",
        ),
    ] = None,
) -> None:
    """Serve /v1/chat/completions and /v1/completions with known timing, and /metrics.

    One token is one word. Fixed timing: chunk k of a request is sent at start + TTFT +
    k x ITL on absolute times, the start being its receive time (or, with
    --max-running-requests, when a slot frees up). Batching (--profile or --step-*): a
    continuous-batching engine whose steps each give every running request a token, their
    duration from the profile. A prefix cache, as vLLM's, reuses the KV of prompts that
    begin alike, in the KV capacity, evicting free blocks least recently used first. The
    server's own send times (--record) are the ground truth that servelab's client is
    tested against. The same seed and arrivals give the same run.
    """
    err = Console(stderr=True)
    with handle_errors(err):
        _check_ranges(
            fractions={
                "--fail-rate": fail_rate,
                "--drop-rate": drop_rate,
                "--malformed-rate": malformed_rate,
                "--stall-rate": stall_rate,
                "--corrupt-rate": corrupt_rate,
            },
            amounts={
                "--ttft-ms": ttft_ms,
                "--itl-ms": itl_ms,
                "--step-base-ms": step_base_ms,
                "--step-per-seq-ms": step_per_seq_ms,
                "--prefill-per-token-ms": prefill_per_token_ms,
                "--step-per-context-token-ms": step_per_context_token_ms,
                "--step-overhead-ms": step_overhead_ms,
                "--reasoning-tokens": reasoning_tokens,
                "--corrupt-after-tokens": corrupt_after_tokens,
            },
            counts={
                "--tokens-per-chunk": tokens_per_chunk,
                "--max-running-requests": max_running_requests,
                "--kv-capacity-tokens": kv_capacity_tokens,
                "--chunked-prefill-size": chunked_prefill_size,
                "--workers": workers,
                "--block-size": block_size,
            },
        )
        if block_size is not None and not prefix_cache:
            raise ConfigError(
                "--block-size sizes the prefix cache, which --no-prefix-cache turns off"
            )
        linear = {
            "step_base_ms": step_base_ms,
            "step_per_seq_ms": step_per_seq_ms,
            "prefill_per_token_ms": prefill_per_token_ms,
            "step_per_context_token_ms": step_per_context_token_ms,
        }
        profile = _profile(profile, linear)
        fitted: dict[str, object] = {}
        if twin is not None:
            if profile is not None or model is not None:
                raise ConfigError(
                    "--twin brings its own fitted step cost: drop --profile,"
                    " --model and the --step-* flags"
                )
            fitted = _twin_settings(twin)
            profile = LINEAR
        if model is not None:
            if profile not in (None, MODEL):
                raise ConfigError(f"--model describes the {MODEL} profile, not --profile {profile}")
            profile = MODEL
        layout = {"gpu": gpu, "gpus": gpus, "tp": tp, "weights": weights}
        if profile != MODEL and any(value is not None for value in layout.values()):
            raise ConfigError("--gpu, --gpus, --tp and --weights describe --model's deployment")
        engine = {
            "ttft_ms": ttft_ms,
            "itl_ms": itl_ms,
            "kv_capacity_tokens": kv_capacity_tokens,
            "chunked_prefill_size": chunked_prefill_size,
            "step_overhead_ms": step_overhead_ms,
            "time_scale": time_scale,
        }
        _check_mode(profile, engine, workers)
        from pydantic import ValidationError

        from servelab.sim import SimConfig, serve
        from servelab.sim.profiles import check_step_cost

        style = _metrics_style(metrics_style)
        corruption = _corruption(corrupt)
        # Only the flags given: an absent one keeps SimConfig's (or its profile's) default.
        given = {key: value for key, value in (linear | engine).items() if value is not None}
        settings: dict[str, object] = {
            "host": host,
            "port": port,
            "model": served_name or model or "servelab-sim",
            "perf_model": model,
            "gpu": gpu,
            "gpus": gpus,
            "tp": tp,
            "pp": pp,
            "ep": ep,
            "dp": dp,
            "weights": weights,
            "kv_dtype": kv_dtype,
            "calibrate": calibrate,
            "max_running_requests": max_running_requests,
            "profile": profile,
            "metrics_style": style,
            "tokens_per_chunk": tokens_per_chunk,
            "reasoning_tokens": reasoning_tokens,
            "send_usage": usage,
            "role_chunk": role_chunk,
            "reject_fields": reject_field or [],
            "fail_rate": fail_rate,
            "drop_rate": drop_rate,
            "malformed_rate": malformed_rate,
            "stall_rate": stall_rate,
            "seed": seed,
            "corruption": corruption,
            "corruption_rate": corrupt_rate,
            "corrupt_after_tokens": corrupt_after_tokens,
            "record_path": record,
            "workers": workers,
            "prefix_cache": prefix_cache,
            "cache_report": cache_report,
        }
        if block_size is not None:
            settings["block_size"] = block_size
        if fitted:
            settings["max_running_requests"] = max_running_requests or fitted.pop(
                "max_running_requests", None
            )
        try:
            config = SimConfig.model_validate(settings | fitted | given)
        except ValidationError as exc:
            raise ConfigError(_first_error(exc)) from None
        check_step_cost(config)
        serve(config, on_ready=lambda url: err.print(f"serving on {url}", highlight=False))


def _check_ranges(
    *,
    fractions: dict[str, float],
    amounts: dict[str, float | None],
    counts: dict[str, int | None],
) -> None:
    """Rates in [0, 1], times and token counts not negative, sizes at least 1."""
    for name, fraction in fractions.items():
        check_range(name, fraction, low=0, high=1)
    for name, amount in amounts.items():
        check_range(name, amount, low=0)
    for name, count in counts.items():
        check_range(name, count, low=1)


def _twin_settings(run: Path) -> dict[str, object]:
    """The simulator's settings of a run's twin (its twin.json, or the file itself)."""
    from servelab.store import TWIN_FILE, RunDir
    from servelab.twin import TwinResult

    folder, name = (run.parent, run.name) if run.is_file() else (run, TWIN_FILE)
    fitted = RunDir(folder).load(name, TwinResult)
    if fitted is None:
        raise ConfigError(f"no {TWIN_FILE} in {run}: run `servelab diagnose {run}` first")
    settings: dict[str, object] = {
        "step_base_ms": fitted.term("base"),
        "step_per_seq_ms": fitted.term("per_seq"),
        "step_per_context_token_ms": fitted.term("per_context_token"),
        "prefill_per_token_ms": fitted.term("per_prefill_token"),
        "prefill_step_ms": fitted.term("prefill_step"),
        "request_overhead_ms": fitted.request_overhead_ms.value,
        "batch_policy": fitted.policy.name if fitted.policy.name != "exact" else "sim",
    }
    for name, key in (
        ("running_cap", "max_running_requests"),
        ("kv_capacity_tokens", "kv_capacity_tokens"),
        ("batch_tokens", "chunked_prefill_size"),
    ):
        value = fitted.limit(name)
        if value is not None:
            settings[key] = value
    return settings


def _profile(profile: str | None, linear: dict[str, float | None]) -> str | None:
    """The step-cost profile: --profile, or `linear` when a --step-* flag is given."""
    given = [key for key, value in linear.items() if value is not None]
    if not given:
        return profile
    if profile is not None and profile != LINEAR:
        raise ConfigError(
            f"{_flag(given[0])} describes the {LINEAR} profile, not --profile {profile}"
        )
    return LINEAR


def _check_mode(profile: str | None, engine: dict[str, float | None], workers: int) -> None:
    """Refuse flags of the other mode: fixed timings with a profile, batching ones without."""
    if profile is not None:
        for key in ("ttft_ms", "itl_ms"):
            if engine[key] is not None:
                raise ConfigError(
                    f"{_flag(key)} is a fixed timing; with a step-cost profile ({profile})"
                    " the steps set the timing"
                )
        if workers != 1:
            raise ConfigError(
                "--workers must be 1 with continuous batching: one engine's batch cannot be"
                " split across processes"
            )
        return
    for key in ("kv_capacity_tokens", "chunked_prefill_size", "step_overhead_ms", "time_scale"):
        if engine[key] is not None:
            raise ConfigError(
                f"{_flag(key)} needs continuous batching: give --profile or a --step-* flag"
            )


def _metrics_style(text: str) -> MetricsStyle:
    """--metrics-style as a MetricsStyle, or one line naming the styles, as pydantic words it."""
    from servelab.sim import MetricsStyle

    return _choice("--metrics-style", text, MetricsStyle)


def _corruption(text: str) -> Corruption:
    """--corrupt as a Corruption, or one line naming the kinds."""
    from servelab.sim import Corruption

    return _choice("--corrupt", text, Corruption)


def _choice(flag: str, text: str, kind: type[_Choice]) -> _Choice:
    """A flag's value as one of an enum's, or one line naming them, as pydantic words it."""
    try:
        return kind(text)
    except ValueError:
        names = [f"'{member.value}'" for member in kind]
        known = f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0]
        raise ConfigError(f"{flag}: Input should be {known}") from None


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _first_error(exc: ValidationError) -> str:
    """A pydantic ValidationError's first message, with the field it is about."""
    error = exc.errors()[0]
    message = str(error["msg"]).removeprefix("Value error, ")
    field = ".".join(str(part) for part in error.get("loc", ()))
    return f"{_flag(field)}: {message}" if field else message
