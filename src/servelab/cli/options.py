"""Parsing of option values shared by the commands; each bad value is a ConfigError."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlparse

import typer

from servelab.core.errors import ConfigError

__all__ = [
    "JsonOutput",
    "OutDir",
    "RunsDir",
    "check_range",
    "parse_extra_body",
    "parse_headers",
    "parse_url",
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


def parse_url(url: str) -> str:
    """An http(s) base URL without a trailing slash or an /v1 suffix."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"--url {url!r} is not an http(s) URL", hint="e.g. http://127.0.0.1:8000")
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def parse_headers(headers: list[str], api_key: str | None) -> dict[str, str]:
    """'Name: value' pairs (repeatable --header) plus the API key as a bearer token."""
    parsed: dict[str, str] = {}
    for header in headers:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            raise ConfigError(f"--header {header!r} is not 'Name: value'")
        parsed[name.strip()] = value.strip()
    if api_key:
        parsed["Authorization"] = f"Bearer {api_key}"
    return parsed


def parse_extra_body(text: str | None) -> dict[str, Any]:
    """A JSON object merged into every request body."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
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
    in_low = value >= low if low_inclusive else value > low
    in_high = value <= high if high is not None else math.isfinite(value)
    if not (in_low and in_high):
        bound = f"{'at least' if low_inclusive else 'above'} {low:g}"
        if high is not None:
            bound += f" and at most {high:g}"
        raise ConfigError(f"{name} must be {bound}, got {value:g}")
