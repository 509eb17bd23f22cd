"""Parsing of the values users type: durations with units, number lists, SLOs."""

from __future__ import annotations

import math
import re

from servelab.core.errors import ConfigError

__all__ = ["SLO_KEYS", "parse_duration_s", "parse_number_list", "parse_slos"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h)\s*$")
_FACTOR_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}

SLO_KEYS = ("ttft", "tpot", "e2e")


def parse_duration_s(text: str, *, what: str = "duration") -> float:
    """'200ms', '30s', '2m', '1h' -> seconds. A bare number is refused: its unit is unknown."""
    match = _DURATION.match(text)
    if match is None:
        raise ConfigError(
            f"{what} {text!r} is not a duration", hint="write it with a unit: 200ms, 30s, 2m, 1h"
        )
    seconds = float(match.group(1)) * _FACTOR_S[match.group(2)]
    if seconds <= 0:
        raise ConfigError(f"{what} {text!r} must be positive")
    if not math.isfinite(seconds):
        raise ConfigError(f"{what} {text!r} is too large for a duration")
    return seconds


def parse_number_list(text: str, *, what: str, integer: bool) -> list[float]:
    """'1,8,32' -> [1, 8, 32]; every value positive and finite."""
    values: list[float] = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part) if integer else float(part)
        except ValueError:
            kind = "whole numbers" if integer else "numbers"
            raise ConfigError(
                f"{what} {text!r} is not a list of {kind}", hint="for example 1,8,32"
            ) from None
        # A whole number is finite however long (and too long for a float: not converted).
        if value <= 0 or not (isinstance(value, int) or math.isfinite(value)):
            raise ConfigError(f"{what} values must be positive, got {part!r}")
        values.append(value)
    return values


def parse_slos(text: str) -> dict[str, float]:
    """'ttft=200ms,tpot=50ms' -> {'ttft': 200.0, 'tpot': 50.0} in milliseconds."""
    slos: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in SLO_KEYS:
            raise ConfigError(
                f"SLO {part.strip()!r} is not understood",
                hint=f"use key=duration with key one of {', '.join(SLO_KEYS)}, e.g. ttft=200ms",
            )
        slos[key] = parse_duration_s(value, what=f"SLO {key}") * 1e3
    return slos
