"""Units: the conversion factors servelab uses, and parsing of the values users type
(durations with units, number lists, SLOs).

Every conversion between units goes through a name here (`bytes / GIB`, `ns / NS_PER_MS`),
so a unit is defined once and a bare `/ 1e3` never leaves its unit to be guessed.
"""

from __future__ import annotations

import math
import re

from servelab.core.errors import ConfigError

__all__ = [
    "BYTES_PER_GB",
    "GIB",
    "KIB",
    "MIB",
    "MILLIJOULES_PER_J",
    "MILLIWATTS_PER_W",
    "MS_PER_S",
    "NS_PER_MS",
    "NS_PER_S",
    "NS_PER_US",
    "SLO_KEYS",
    "US_PER_MS",
    "US_PER_S",
    "parse_duration_s",
    "parse_number_list",
    "parse_slos",
]

GIB = 1 << 30
"""Bytes in a GiB (memory sizes)."""
MIB = 1 << 20
KIB = 1 << 10
BYTES_PER_GB = 1e9
"""Bytes in a decimal GB (bandwidths, as datasheets and nccl-tests give them)."""
MS_PER_S = 1_000
US_PER_S = 1_000_000
US_PER_MS = 1_000
NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
MILLIJOULES_PER_J = 1_000
"""Millijoules in a joule (NVML's energy counter counts millijoules)."""
MILLIWATTS_PER_W = 1_000
"""Milliwatts in a watt (NVML reports power in milliwatts)."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h)\s*$")
_FACTOR_S = {"ms": 1 / MS_PER_S, "s": 1.0, "m": 60.0, "h": 3600.0}

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
        ms = parse_duration_s(value, what=f"SLO {key}") * MS_PER_S
        if not math.isfinite(ms):
            raise ConfigError(f"SLO {key} {value.strip()!r} is too large for a duration")
        slos[key] = ms
    return slos
