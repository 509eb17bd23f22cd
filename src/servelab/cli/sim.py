"""`servelab sim`: the OpenAI-compatible simulator with fixed timing and injected faults."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from servelab.cli.exit_codes import handle_errors
from servelab.cli.options import check_range
from servelab.core.errors import ConfigError

__all__ = ["sim"]


def sim(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on; 0 picks a free one.")] = 8000,
    model: Annotated[str, typer.Option(help="Model name it serves.")] = "servelab-sim",
    ttft_ms: Annotated[
        float, typer.Option(help="From request received to the first text chunk, in ms.")
    ] = 50.0,
    itl_ms: Annotated[float, typer.Option(help="Between consecutive text chunks, in ms.")] = 20.0,
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
    seed: Annotated[int, typer.Option(help="Seed of the fault draws.")] = 0,
    record: Annotated[
        Path | None,
        typer.Option(help="Write the server's own timestamps of every request here (JSONL)."),
    ] = None,
    workers: Annotated[
        int, typer.Option(help="Server processes sharing the port (SO_REUSEPORT).")
    ] = 1,
) -> None:
    """Serve /v1/chat/completions and /v1/completions with exact, known timing.

    One token is one word; chunk k of a request is sent at receive + TTFT + k x ITL, on
    absolute times. The server's own send times (--record) are the ground truth that
    servelab's client is tested against.
    """
    err = Console(stderr=True)
    with handle_errors(err):
        for name, value in (
            ("--fail-rate", fail_rate),
            ("--drop-rate", drop_rate),
            ("--malformed-rate", malformed_rate),
            ("--stall-rate", stall_rate),
        ):
            check_range(name, value, low=0, high=1)
        check_range("--ttft-ms", ttft_ms, low=0)
        check_range("--itl-ms", itl_ms, low=0)
        check_range("--tokens-per-chunk", tokens_per_chunk, low=1)
        check_range("--reasoning-tokens", reasoning_tokens, low=0)
        from pydantic import ValidationError

        from servelab.sim import SimConfig, serve

        try:
            config = SimConfig(
                host=host,
                port=port,
                model=model,
                ttft_ms=ttft_ms,
                itl_ms=itl_ms,
                tokens_per_chunk=tokens_per_chunk,
                reasoning_tokens=reasoning_tokens,
                send_usage=usage,
                role_chunk=role_chunk,
                reject_fields=reject_field or [],
                fail_rate=fail_rate,
                drop_rate=drop_rate,
                malformed_rate=malformed_rate,
                stall_rate=stall_rate,
                seed=seed,
                record_path=record,
                workers=workers,
            )
        except ValidationError as exc:
            raise ConfigError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
        serve(config, on_ready=lambda url: err.print(f"serving on {url}", highlight=False))
