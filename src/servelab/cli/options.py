"""Options shared by the commands, declared once, and the parsing of their values; each
bad value is a ConfigError."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlparse

import orjson
import typer

from servelab.bench.cost_results import HourlyPrice
from servelab.core.errors import ConfigError

__all__ = [
    "AppliesFinding",
    "Duration",
    "EngineSpecPath",
    "GpuHourPrice",
    "Gpus",
    "InputLen",
    "JsonOutput",
    "MachineHourPrice",
    "NumRequests",
    "OutDir",
    "RunsDir",
    "ScrapeMetrics",
    "check_range",
    "hourly_price",
    "parse_extra_body",
    "parse_headers",
    "parse_url",
]

AppliesFinding = Annotated[
    str | None,
    typer.Option(
        "--applies",
        metavar="RUN_DIR:KIND",
        help="This run tries the action of that run's finding (e.g. a:kv_capacity): "
        "`servelab diagnose` of this run checks the finding's expected gain against what it "
        "measured.",
    ),
]
OutDir = Annotated[
    Path | None, typer.Option("--out", help="Run directory. Default: RUNS_DIR/<UTC time>-<name>/.")
]
RunsDir = Annotated[
    Path, typer.Option("--runs-dir", help="Folder of run directories and catalog.sqlite.")
]
JsonOutput = Annotated[
    bool, typer.Option("--json", help="Print summary.json's document on stdout.")
]
EngineSpecPath = Annotated[
    Path | None,
    typer.Option(
        "--engine",
        help="Instead of --url: an engine spec (YAML; see `servelab engine check`) to"
        " launch, sweep and stop: vLLM, SGLang, transformers, embedded, sim. Its log is read"
        " against known signatures.",
    ),
]
NumRequests = Annotated[
    int | None,
    typer.Option(
        help="Requests per level. Default: 5 per stream (min 16; the fewest a noise band "
        "needs), or 30 s of arrivals."
    ),
]
Duration = Annotated[
    str | None,
    typer.Option(
        help="Run each level this long instead, e.g. 60s: no request starts after it,"
        " in-flight ones finish."
    ),
]
# Each command gives its own default: run's is sized for its case without options, the
# embedded engine on a CPU.
InputLen = Annotated[int, typer.Option(help="random: prompt tokens.")]
Gpus = Annotated[
    str | None,
    typer.Option(
        help="The engine's GPUs to sample at 10 Hz while it runs (power, utilization,"
        " clocks, energy, GPM), as NVML indices or UUIDs, e.g. 0,1."
    ),
]
GpuHourPrice = Annotated[
    float | None,
    typer.Option(
        metavar="USD",
        help="What one GPU costs an hour, in US dollars: each level's tokens are priced at it"
        " times the deployment's GPUs (the engine spec's layout, else --gpus, else the GPUs"
        " the probe found), as USD per million total and output tokens. Default: no price.",
    ),
]
MachineHourPrice = Annotated[
    float | None,
    typer.Option(
        metavar="USD",
        help="Instead of --gpu-hour-price: what the whole machine costs an hour, in US"
        " dollars, whatever its GPUs.",
    ),
]
ScrapeMetrics = Annotated[
    bool,
    typer.Option(
        help="Scrape the endpoint's Prometheus /metrics ten times a second (SGLang, vLLM, the"
        " simulator): running and queued requests, KV usage. n/a where it has none."
    ),
]


def parse_url(url: str) -> str:
    """An http(s) base URL without a trailing slash or an /v1 suffix."""
    if any(not c.isprintable() or c.isspace() for c in url):
        raise ConfigError(f"--url {url!r} has a blank or control character")
    try:
        parsed = urlparse(url)
        port = parsed.port  # parsed on access: not a number, or out of range, raises
    except ValueError as exc:
        raise ConfigError(f"--url {url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(f"--url {url!r} is not an http(s) URL", hint="e.g. http://127.0.0.1:8000")
    if port == 0:
        raise ConfigError(f"--url {url!r}: port 0 cannot be connected to")
    if parsed.query or parsed.fragment or url.endswith(("?", "#")):
        raise ConfigError(f"--url {url!r} is a base URL: it takes no query or fragment")
    base = url.rstrip("/")
    while base.endswith("/v1"):  # 'http://h:1/v1/', and 'http://h://v1' too
        base = base.removesuffix("/v1").rstrip("/")
    return base


# RFC 9110: a header name is a token; a value holds no control character but HTAB.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def parse_headers(headers: list[str], api_key: str | None) -> dict[str, str]:
    """'Name: value' pairs (repeatable --header) plus the API key as a bearer token."""
    parsed: dict[str, str] = {}
    for header in headers:
        name, sep, value = header.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise ConfigError(f"--header {header!r} is not 'Name: value'")
        if not _TOKEN.fullmatch(name):
            raise ConfigError(
                f"--header {header!r}: {name!r} is not a header name",
                hint="letters, digits and !#$%&'*+-.^_`|~",
            )
        if _CONTROL.search(value):
            raise ConfigError(f"--header {header!r} has a control character in its value")
        parsed[name] = value
    if api_key:
        if _CONTROL.search(api_key):
            raise ConfigError("--api-key has a control character (a line end?)")
        parsed["Authorization"] = f"Bearer {api_key}"
    return parsed


def parse_extra_body(text: str | None) -> dict[str, Any]:
    """A JSON object merged into every request body.

    Read by the library that sends it (orjson), so what is read can be sent: no NaN or
    Infinity (not JSON), no lone surrogate, no nesting deeper than it allows.
    """
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"--extra-body is not JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise ConfigError("--extra-body must be a JSON object, e.g. '{\"temperature\": 0}'")
    return value


def check_range(
    name: str,
    value: float | None,
    *,
    low: float,
    high: float | None = None,
    low_inclusive: bool = True,
) -> None:
    """A ConfigError unless low <= value (< low excluded when not inclusive) and value <= high."""
    if value is None:
        return
    # Written so that NaN fails every comparison and is refused; infinity is refused too.
    # A whole number is finite however long (and too long for a float: not converted).
    in_low = value >= low if low_inclusive else value > low
    finite = isinstance(value, int) or math.isfinite(value)
    in_high = value <= high if high is not None else finite
    if not (in_low and in_high):
        bound = f"{'at least' if low_inclusive else 'above'} {low:g}"
        if high is not None:
            bound += f" and at most {high:g}"
        shown = str(value) if isinstance(value, int) else f"{value:g}"
        raise ConfigError(f"{name} must be {bound}, got {shown}")


def hourly_price(
    gpu_hour: float | None, machine_hour: float | None, *, command: str
) -> HourlyPrice | None:
    """The price given to `command` (e.g. 'servelab bench'); None when neither option was."""
    if gpu_hour is not None and machine_hour is not None:
        raise ConfigError("give --gpu-hour-price or --machine-hour-price, not both")
    if gpu_hour is None and machine_hour is None:
        return None
    if gpu_hour is not None:
        check_range("--gpu-hour-price", gpu_hour, low=0, low_inclusive=False)
        return HourlyPrice(basis="gpu_hour", usd=gpu_hour, source=f"{command} --gpu-hour-price")
    assert machine_hour is not None
    check_range("--machine-hour-price", machine_hour, low=0, low_inclusive=False)
    return HourlyPrice(
        basis="machine_hour", usd=machine_hour, source=f"{command} --machine-hour-price"
    )
