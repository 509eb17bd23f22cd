"""The times an engine's log lines carry at their start, read into seconds.

A finished log is read without the clock servelab's launcher stamps live lines with, so its
stats series is placed in time by the stamps the engine (or whatever wrote the file) put at
the start of each line:

- `iso8601`: `2025-01-02T10:00:00.123Z ...` or `2025-01-02 10:00:00,123 ...`, as
  servelab's engine.log, docker and kubectl `--timestamps`, or Python's default logging
  format write it;
- `sglang`: `[2025-01-02 10:00:00 TP0] ...`, SGLang's logger (`configure_logger` in
  python/sglang/srt/utils: `[%(asctime)s{prefix}] %(message)s`, date `%Y-%m-%d %H:%M:%S`);
- `vllm`: `(APIServer pid=1) INFO 01-02 10:00:00 [loggers.py:127] ...`, vLLM's logger
  (vllm/logger.py: `%(levelname)s %(asctime)s [...]`, date `%m-%d %H:%M:%S`), after the
  process prefix its multiprocessing adds.

vLLM's stamp has no year: the year is taken as 2000 (a leap year, so 02-29 reads), and a
stamp more than half a year before the one above it moves into the next year, so a log
running over New Year stays in order. A stamp without a zone is read as UTC; only the
differences between the stamps of one text are used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

__all__ = ["Stamp", "StampReader", "StampStyle"]

StampStyle = Literal["iso8601", "sglang", "vllm"]

_ISO = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})([.,]\d+)?(Z|[+-]\d{2}:?\d{2})?(?=[\s\]]|$)"
)
_SGLANG = re.compile(r"^\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})([.,]\d+)?(?=[\] ])[^\]]*\]")
_VLLM = re.compile(
    r"^(?:\([^)]*\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})"
    r"([.,]\d+)?\s"
)
_VLLM_YEAR = 2000
_ROLLOVER = timedelta(days=183)


@dataclass(frozen=True, slots=True)
class Stamp:
    """One line's stamp: its style, its text as written and its time in Unix seconds."""

    style: StampStyle
    text: str
    unix_s: float


class StampReader:
    """Reads the stamps of one text's lines in order (vLLM's yearless stamps need the order)."""

    def __init__(self) -> None:
        self._vllm_year = _VLLM_YEAR
        self._last_vllm: datetime | None = None

    def read(self, line: str) -> Stamp | None:
        """The stamp at the start of `line`, if it has one of the known styles."""
        if match := _ISO.match(line):
            zone = match[4] or "+00:00"
            when = _parse(
                f"{match[1]}T{match[2]}{_fraction(match[3])}{zone.replace('Z', '+00:00')}"
            )
            return Stamp("iso8601", match[0], when.timestamp()) if when else None
        if match := _SGLANG.match(line):
            when = _parse(f"{match[1]}T{match[2]}{_fraction(match[3])}+00:00")
            return Stamp("sglang", match[0], when.timestamp()) if when else None
        if match := _VLLM.match(line):
            when = self._vllm_time(match[1], match[2], _fraction(match[3]))
            return Stamp("vllm", f"{match[1]} {match[2]}", when.timestamp()) if when else None
        return None

    def _vllm_time(self, month_day: str, clock: str, fraction: str) -> datetime | None:
        when = _parse(f"{self._vllm_year}-{month_day}T{clock}{fraction}+00:00")
        if when is not None and self._last_vllm is not None and when < self._last_vllm - _ROLLOVER:
            self._vllm_year += 1
            when = _parse(f"{self._vllm_year}-{month_day}T{clock}{fraction}+00:00")
        if when is not None:
            self._last_vllm = when
        return when


def _fraction(text: str | None) -> str:
    """A fraction of a second as fromisoformat takes it: a dot and at most 6 digits."""
    return "." + text[1:7] if text else ""


def _parse(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text)
    except ValueError:  # a month 13, a 02-29 of a year without one
        return None
