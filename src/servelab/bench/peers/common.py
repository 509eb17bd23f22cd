"""What every peer format shares: typed reads of a document, unit conversions, and the
building of a LevelSummary from the values a file named.

A value the file does not give stays None; nothing is filled in. A number is taken only
when it is a finite number (a NaN or an infinity a tool wrote for an empty statistic is
absent, not a value), and a document of the wrong shape is `NotImportable`, which
`import_file` turns into one ConfigError line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError

from servelab.bench.records import RequestRecord
from servelab.bench.results import LevelSummary
from servelab.core.units import MS_PER_S, NS_PER_MS, NS_PER_US

__all__ = [
    "METRICS",
    "STATS",
    "Doc",
    "LevelParse",
    "NotImportable",
    "Parsed",
    "ParsedLevels",
    "build_level",
    "lacking",
    "parse_levels",
    "stats_ms",
    "to_ms",
    "to_s",
]

STATS = ("mean", "median", "std", "p90", "p95", "p99")
"""The statistics servelab keeps of each latency, in its field names' order."""
METRICS = ("ttft", "tpot", "itl", "e2e_latency")
"""The latencies, as servelab's field names spell them (`mean_ttft_ms`, ...)."""

LevelParse = Callable[[int, "Doc"], tuple[LevelSummary, list[RequestRecord], str | None]]
"""One document to its level, the requests rebuilt from it, and why none were if none."""


@dataclass
class ParsedLevels:
    """What a peer's documents gave, level by level, before its own notes are added."""

    levels: list[LevelSummary] = field(default_factory=list)
    records: list[RequestRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    why_not: list[str] = field(default_factory=list)


def parse_levels(
    docs: Sequence[Doc],
    parse: LevelParse,
    *,
    rebuilt: str,
    other: Callable[[int, Doc], LevelSummary | None] = lambda _index, _doc: None,
) -> ParsedLevels:
    """Every document a level, in file order: `other` takes those of another generation
    (no requests), `parse` the rest. `rebuilt` words the note for a level whose requests
    were rebuilt; it is formatted with `index` and `count`."""
    out = ParsedLevels()
    for index, doc in enumerate(docs):
        if (level := other(index, doc)) is not None:
            out.levels.append(level)
            continue
        level, records, reason = parse(index, doc)
        out.levels.append(level)
        out.records += records
        if reason:
            out.why_not.append(f"level {index}: {reason}")
        if records:
            out.notes.append(rebuilt.format(index=index, count=len(records)))
    return out


_MS_PER_UNIT = {
    "ms": 1.0,
    "s": float(MS_PER_S),
    "sec": float(MS_PER_S),
    "us": NS_PER_US / NS_PER_MS,
    "ns": 1 / NS_PER_MS,
}


class NotImportable(Exception):
    """Why a file is not one servelab can import, said of the file (one line)."""


@dataclass(frozen=True)
class Doc:
    """A JSON object of the file, and where it is for errors: "" for the whole file,
    "line 2" for a line of JSON Lines, a path such as "benchmarks[1]" below them."""

    data: Mapping[str, Any]
    where: str = ""

    @property
    def label(self) -> str:
        """Where it is, as a sentence names it."""
        return self.where or "the file"

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, *path: str) -> Any:
        """The value at `path` (nested keys), None where any step is absent or not an object."""
        value: Any = self.data
        for key in path:
            if not isinstance(value, Mapping):
                return None
            value = value.get(key)
        return value

    def doc(self, *path: str) -> Doc | None:
        """The object at `path`, None where absent; NotImportable where it is not an object."""
        value = self.get(*path)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise NotImportable(f"{self._name(path)} is {_kind(value)}, not an object")
        return Doc(value, self._name(path))

    def number(self, *path: str) -> float | None:
        """A finite number; None where absent, null, NaN or infinite."""
        value = self.get(*path)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise NotImportable(f"{self._name(path)} is {_kind(value)}, not a number")
        return float(value) if math.isfinite(value) else None

    def need_number(self, *path: str) -> float:
        """A finite number the format always has; NotImportable where it does not."""
        value = self.number(*path)
        if value is None:
            what = "not a finite number" if self.get(*path) is not None else "missing"
            raise NotImportable(f"{self._name(path)} is {what}")
        return value

    def count(self, *path: str) -> int | None:
        """A whole number (32 or 32.0); NotImportable for 2.5 or a negative one."""
        return None if self.number(*path) is None else self.need_count(*path)

    def need_count(self, *path: str) -> int:
        value = self.need_number(*path)
        if value < 0 or not value.is_integer():
            raise NotImportable(f"{self._name(path)} is {value:g}, not a count")
        return int(value)

    def text(self, *path: str) -> str | None:
        value = self.get(*path)
        if value is None:
            return None
        if not isinstance(value, str):
            raise NotImportable(f"{self._name(path)} is {_kind(value)}, not a string")
        return value

    def items(self, *path: str) -> list[Any] | None:
        value = self.get(*path)
        if value is None:
            return None
        if not isinstance(value, list):
            raise NotImportable(f"{self._name(path)} is {_kind(value)}, not a list")
        return value

    def _name(self, path: Sequence[str]) -> str:
        """The JSON path of `path` below this object: "line 2: a.b", "benchmarks[0].a"."""
        dotted = ".".join(path)
        if not self.where:
            return dotted
        if self.where.startswith("line ") and ": " not in self.where:
            return f"{self.where}: {dotted}"
        return f"{self.where}.{dotted}"


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    return names.get(type(value), f"a {type(value).__name__}")


def to_ms(value: float | None, unit: str | None, where: str = "a metric") -> float | None:
    """`value` in ms from `unit` (ms, s, sec, us, ns); None stays None."""
    if value is None:
        return None
    factor = _MS_PER_UNIT.get((unit or "").strip().lower())
    if factor is None:
        raise NotImportable(f"{where} is in {unit!r}, not a unit of time servelab knows")
    return value * factor


def to_s(value: float | None, unit: str | None, where: str = "a metric") -> float | None:
    ms = to_ms(value, unit, where)
    return None if ms is None else ms / MS_PER_S


def stats_ms(metric: str, values_ms: Sequence[float]) -> dict[str, float | None]:
    """servelab's statistics of `metric` (numpy: population std, linear percentiles, the
    definitions SGLang's and vLLM's benches use too); all None with no value."""
    keys = [f"{stat}_{metric}_ms" for stat in STATS]
    if not values_ms:
        return dict.fromkeys(keys)
    values = np.asarray(values_ms, dtype=np.float64)
    stats = (
        float(np.mean(values)),
        float(np.median(values)),
        float(np.std(values)),
        *(float(np.percentile(values, q)) for q in (90, 95, 99)),
    )
    return dict(zip(keys, stats, strict=True))


_DEFAULTS: dict[str, Any] = {
    "load_mode": "concurrency",
    "max_concurrency": None,
    "request_rate": None,
    "burstiness": None,
    "interrupted": False,
    "cancelled": 0,
    "errors": {},
    "error_examples": {},
    "output_tokens_estimated": False,
    "single_stream_tok_s": None,
    "slo_ms": None,
    "request_goodput": None,
    "good_fraction": None,
    **{f"{stat}_{metric}_ms": None for metric in METRICS for stat in STATS},
}


def build_level(index: int, values: Mapping[str, Any], *, where: Doc) -> LevelSummary:
    """The level from the values a file gave, by servelab's field names.

    Every latency statistic the values do not name is None; the level was not interrupted
    and cancelled nothing unless the values say so (a tool writes its file once a level is
    over); everything else the values do not name is its field's default, None.
    """
    try:
        return LevelSummary.model_validate({**_DEFAULTS, "level": index, **values})
    except ValidationError as exc:
        error = exc.errors()[0]
        name = ".".join(str(part) for part in error["loc"])
        raise NotImportable(
            f"{where.label} gives {name} a value that is not one: {error['msg'].lower()}"
        ) from None


@dataclass
class Parsed:
    """One file as a format module read it, before it becomes a BenchSummary."""

    tool: str
    """servelab's short name of the tool: sglang, vllm, aiperf, guidellm."""
    label: str
    """The tool and its file format, as the notes name it."""
    version: str | None
    """The tool's version, where the file says it."""
    generation: str
    """The schema or key generation the file was recognised as (where no version is)."""
    levels: list[LevelSummary]
    records: list[RequestRecord] = field(default_factory=list)
    target: dict[str, str | bool | list[str] | None] = field(default_factory=dict)
    workload: dict[str, str | int | float | bool | None] = field(default_factory=dict)
    host: dict[str, str | int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """Caveats of the whole file: definitions that differ from servelab's, provenance."""
    no_records: str = "the file has no per-request values"
    """Why levels without records have none."""


_LACKED = (
    ("completed", "completed"),
    ("failed", "failed"),
    ("num_requests", "num_requests"),
    ("warmup_requests", "warmup_requests"),
    ("input_token_source", "input_token_source"),
    ("request_throughput", "request_throughput"),
    ("input_throughput", "input_throughput"),
    ("total_throughput", "total_throughput"),
    ("concurrency", "concurrency (Little's law)"),
    ("max_concurrent_requests", "max_concurrent_requests"),
    ("max_output_tokens_per_s", "max_output_tokens_per_s"),
    ("client", "the client's own lag (client)"),
)
_METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e_latency": "E2E"}


def lacking(levels: Sequence[LevelSummary]) -> list[str]:
    """What the levels lack, each with the levels that lack it when not all do."""
    found: list[str] = []

    def add(name: str, missing: Iterable[int]) -> None:
        lost = sorted(missing)
        if not lost:
            return
        every = len(lost) == len(levels)
        found.append(name if every else f"{name} (level {', '.join(map(str, lost))})")

    for key, name in _LACKED:
        add(name, (s.level for s in levels if getattr(s, key) is None))
    for metric, name in _METRIC_NAMES.items():
        whole = [s.level for s in levels if all(_stat(s, st, metric) is None for st in STATS)]
        add(f"{name} statistics", whole)
        partial: dict[tuple[str, ...], list[int]] = {}
        for s in levels:
            gone = tuple(st for st in STATS if _stat(s, st, metric) is None)
            if gone and s.level not in whole:
                partial.setdefault(gone, []).append(s.level)
        for gone, which in partial.items():
            add(f"{'/'.join(gone)} {name}", which)
    return found


def _stat(level: LevelSummary, stat: str, metric: str) -> float | None:
    value: float | None = getattr(level, f"{stat}_{metric}_ms")
    return value
